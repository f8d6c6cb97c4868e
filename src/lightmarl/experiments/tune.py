"""Hyper-parameter search with Optuna: each trial a ``lightmarl fit`` subprocess, the study in a real database.

A tune file (docs/reference/tune_yaml.md has every field)::

    name: spread_lr
    recipe: recipes/quickstart.yaml
    overrides: {model.max_frames: 20000}
    trials: 20
    objective: {metric: eval/main/episode_return, direction: maximize, mode: final}
    search_space:
      model.algorithm.init_args.lr: {type: float, low: 0.0001, high: 0.01, log: true}
      model.algorithm.init_args.epochs: {type: int, low: 1, high: 8}
      model.algorithm.init_args.entropy_coeff: {type: categorical, choices: [0.0, 0.01]}
    pruner: {type: median, n_startup_trials: 2}

The study lives in Optuna's RDB storage, ``storage`` (any SQLAlchemy URL; default
``sqlite:///<out_dir>/study.db``). ``lightmarl tune`` runs trials until the study holds ``trials``
finished ones (complete or pruned), so a second call after a crash resumes it, and several calls at
once (on one machine or several, sharing a database URL) share the study. A trial whose process died
is failed by Optuna's heartbeat (no heartbeat for ``2 * heartbeat_s`` seconds) and tried again once
with the same parameters, resuming the dead trial's run from its ``last.ckpt`` (lightmarl's exact
resume). One call runs at most ``trials`` trials, so a recipe whose every trial fails stops.

Each trial's run directory is ``<out_dir>/trials/trial_<number>``. Its score is the objective metric
of the trial's periodic validations during ``fit`` (``mode: final``: the last one, ``best``: the best
one). The callback `OptunaPruning` reports every validation to the trial, with the run's frames
as the step, and stops the fit when the pruner says so. When the call ends, ``best.yaml`` in
``out_dir`` is the best trial as a recipe: the base recipe with the overrides and the trial's
parameters applied (``lightmarl fit --config <out_dir>/best.yaml``), and ``trials.json`` lists every trial.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import logging
import math
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from lightning.pytorch import Callback, LightningModule, Trainer

from lightmarl.errors import ConfigError
from lightmarl.experiments.runner import error_line, lightmarl_command, metrics_files
from lightmarl.experiments.spec import override_args, read_config_file

log = logging.getLogger(__name__)

HAS_OPTUNA = importlib.util.find_spec("optuna") is not None
_TOP_LEVEL = {
    "name", "recipe", "overrides", "trials", "seed", "objective", "search_space", "pruner", "storage", "out_dir",
    "heartbeat_s",
}  # fmt: skip
_PARAM_TYPES = {"float", "int", "categorical"}
_PRUNERS = {"median", "percentile", "hyperband", "none"}
#: the file a pruned trial's callback leaves in its run directory.
PRUNED_FILE = "optuna_pruned.json"


def _optuna() -> Any:
    if not HAS_OPTUNA:
        raise ImportError("lightmarl tune needs optuna: pip install 'lightmarl[experiments]'")
    import optuna

    return optuna


@dataclass(frozen=True)
class TuneSpec:
    """A parsed tune file (see the module doc).

    Attributes:
        name: the study's name (default: the file's stem).
        recipes: the base recipe files.
        overrides: recipe key -> value for every trial.
        trials: finished trials the study should hold.
        seed: the sampler's seed and every trial's ``seed_everything``.
        metric: the objective's validation metric.
        direction: ``maximize`` or ``minimize``.
        mode: ``final`` (the last validation's value) or ``best`` (the best over the fit's validations).
        search_space: recipe key -> distribution (``{type: float|int|categorical, ...}``).
        pruner: ``{type: median|percentile|hyperband|none, ...}``, the rest passed to the Optuna pruner.
        storage: the study's SQLAlchemy URL.
        out_dir: trial run directories, ``best.yaml`` and ``trials.json``.
        heartbeat_s: seconds between a running trial's heartbeats; a trial silent for twice that is failed.
    """

    name: str
    recipes: tuple[str, ...]
    overrides: dict[str, Any]
    trials: int
    seed: int
    metric: str
    direction: str
    mode: str
    search_space: dict[str, dict[str, Any]]
    pruner: dict[str, Any] = field(default_factory=dict)
    storage: str = ""
    out_dir: Path = Path("tunes")
    heartbeat_s: int = 60


def _check_param(key: str, dist: Any, where: str) -> dict[str, Any]:
    at = f"{where}: search_space.{key}"
    if not isinstance(dist, dict) or dist.get("type") not in _PARAM_TYPES:
        raise ConfigError(f"{at}: expected {{type: float|int|categorical, ...}}, got {dist!r}")
    if dist["type"] == "categorical":
        if not isinstance(dist.get("choices"), list) or not dist["choices"]:
            raise ConfigError(f"{at}.choices: expected a non-empty list, got {dist.get('choices')!r}")
        return dist
    try:
        low, high = float(dist["low"]), float(dist["high"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{at}: expected numeric low: and high:, got {dist!r}") from None
    if not low < high:
        raise ConfigError(f"{at}: low {dist['low']!r} is not below high {dist['high']!r}")
    if dist.get("log") and low <= 0:
        raise ConfigError(f"{at}: log: true needs a positive low, got {dist['low']!r}")
    unknown = sorted(set(dist) - {"type", "low", "high", "log", "step"})
    if unknown:
        raise ConfigError(f"{at}: unknown field {unknown[0]!r}; the fields are type, low, high, log, step")
    return dist


def load_tune(path: str | Path) -> TuneSpec:
    """Read and check a tune file; every mistake is a `ConfigError` naming the field.

    Args:
        path: the tune YAML.
    """
    path = Path(path)
    raw = read_config_file(path)
    where = str(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping with recipe:, objective: and search_space:")
    unknown = sorted(set(raw) - _TOP_LEVEL)
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r}; the fields are {', '.join(sorted(_TOP_LEVEL))}")
    name = str(raw.get("name") or path.stem)
    recipes = raw.get("recipe")
    recipes = [recipes] if isinstance(recipes, str) else recipes
    if not isinstance(recipes, list) or not recipes or not all(isinstance(r, str) for r in recipes):
        raise ConfigError(f"{where}: recipe: expected a recipe file or a list of them, got {raw.get('recipe')!r}")
    for recipe in recipes:
        if not Path(recipe).is_file():
            raise ConfigError(f"{where}: recipe: {recipe!r}: no such file (relative to {Path.cwd()})")
    overrides = raw.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"{where}: overrides: expected a mapping of recipe keys to values, got {overrides!r}")
    trials = raw.get("trials", 20)
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise ConfigError(f"{where}: trials: expected a positive integer, got {trials!r}")
    seed = raw.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise ConfigError(f"{where}: seed: expected an integer from 0 to 2**32 - 1, got {seed!r}")
    objective = raw.get("objective")
    if not isinstance(objective, dict) or not isinstance(objective.get("metric"), str):
        raise ConfigError(f"{where}: objective: expected {{metric: eval/..., direction: maximize}}, got {objective!r}")
    direction = objective.get("direction", "maximize")
    if direction not in ("maximize", "minimize"):
        raise ConfigError(f"{where}: objective.direction: expected maximize or minimize, got {direction!r}")
    mode = objective.get("mode", "final")
    if mode not in ("final", "best"):
        raise ConfigError(f"{where}: objective.mode: expected final or best, got {mode!r}")
    space = raw.get("search_space")
    if not isinstance(space, dict) or not space:
        raise ConfigError(f"{where}: search_space: expected a mapping of recipe keys to distributions, got {space!r}")
    pruner = raw.get("pruner") or {"type": "none"}
    if not isinstance(pruner, dict) or pruner.get("type") not in _PRUNERS:
        raise ConfigError(f"{where}: pruner: expected {{type: {'|'.join(sorted(_PRUNERS))}, ...}}, got {pruner!r}")
    heartbeat = raw.get("heartbeat_s", 60)
    if not isinstance(heartbeat, int) or isinstance(heartbeat, bool) or heartbeat < 1:
        raise ConfigError(f"{where}: heartbeat_s: expected a positive integer, got {heartbeat!r}")
    out_dir = Path(str(raw.get("out_dir") or f"tunes/{name}"))
    storage = raw.get("storage") or f"sqlite:///{out_dir / 'study.db'}"
    if not isinstance(storage, str) or "://" not in storage:
        raise ConfigError(f"{where}: storage: expected an SQLAlchemy URL (sqlite:///study.db), got {storage!r}")
    return TuneSpec(
        name=name,
        recipes=tuple(recipes),
        overrides=dict(overrides),
        trials=trials,
        seed=seed,
        metric=objective["metric"],
        direction=direction,
        mode=mode,
        search_space={k: _check_param(k, v, where) for k, v in space.items()},
        pruner=pruner,
        storage=storage,
        out_dir=out_dir,
        heartbeat_s=heartbeat,
    )


def suggest(trial: Any, space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The trial's value of every key of the search space."""
    params = {}
    for key, dist in space.items():
        if dist["type"] == "categorical":
            params[key] = trial.suggest_categorical(key, dist["choices"])
        elif dist["type"] == "int":
            params[key] = trial.suggest_int(
                key, int(dist["low"]), int(dist["high"]), step=int(dist.get("step", 1)), log=bool(dist.get("log"))
            )
        else:
            step = dist.get("step")
            params[key] = trial.suggest_float(
                key, float(dist["low"]), float(dist["high"]), step=None if step is None else float(step),
                log=bool(dist.get("log")),
            )  # fmt: skip
    return params


def _pruner(optuna: Any, config: dict[str, Any]) -> Any:
    kwargs = {k: v for k, v in config.items() if k != "type"}
    kind = config["type"]
    if kind == "median":
        return optuna.pruners.MedianPruner(**kwargs)
    if kind == "percentile":
        return optuna.pruners.PercentilePruner(**kwargs)
    if kind == "hyperband":
        return optuna.pruners.HyperbandPruner(**kwargs)
    return optuna.pruners.NopPruner()


def open_study(spec: TuneSpec) -> Any:
    """The spec's study in its storage, created on first use (SQLite's folder too)."""
    optuna = _optuna()
    if spec.storage.startswith("sqlite:///"):
        Path(spec.storage[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    storage = optuna.storages.RDBStorage(
        spec.storage,
        heartbeat_interval=spec.heartbeat_s,
        grace_period=2 * spec.heartbeat_s,
        failed_trial_callback=optuna.storages.RetryFailedTrialCallback(max_retry=1),
    )
    return optuna.create_study(
        study_name=spec.name,
        storage=storage,
        direction=spec.direction,
        sampler=optuna.samplers.TPESampler(seed=spec.seed),
        pruner=_pruner(optuna, spec.pruner),
        load_if_exists=True,
    )


class OptunaPruning(Callback):
    """Reports each validation's metric to an Optuna trial and stops the fit when its pruner says so.

    Added by ``lightmarl tune`` to every trial's ``lightmarl fit``; the study is opened from its storage,
    so the trial may run in any process that reaches the database. The step of each report is the
    run's frames (``counters/frames``). A pruned fit stops after that validation, with a final
    checkpoint, and leaves `PRUNED_FILE` in its run directory.

    Args:
        storage: the study's SQLAlchemy URL.
        study_name: the study.
        trial_id: the trial's id in the storage (``trial._trial_id``).
        metric: the validation metric reported.
    """

    def __init__(self, storage: str, study_name: str, trial_id: int, metric: str) -> None:
        self.storage = storage
        self.study_name = study_name
        self.trial_id = trial_id
        self.metric = metric
        self._trial: Any = None

    def _the_trial(self) -> Any:
        if self._trial is None:
            optuna = _optuna()
            study = optuna.load_study(study_name=self.study_name, storage=self.storage)
            self._trial = optuna.trial.Trial(study, self.trial_id)
        return self._trial

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        value = trainer.callback_metrics.get(self.metric)
        if value is None:
            return
        frames = int(getattr(pl_module, "frames", trainer.global_step))
        trial = self._the_trial()
        trial.report(float(value), step=frames)
        if trial.should_prune():
            log.info("lightmarl tune: trial pruned at %d frames (%s = %.4g)", frames, self.metric, float(value))
            Path(trainer.default_root_dir, PRUNED_FILE).write_text(
                json.dumps({"frames": frames, "value": float(value)})
            )
            trainer.should_stop = True


def trial_score(run_dir: Path, metric: str, mode: str, direction: str) -> float | None:
    """The objective of a finished trial: the metric's last (``final``) or best validation value during fit."""
    values: list[float] = []
    for path in metrics_files(run_dir):
        with path.open() as f:
            values += [float(row[metric]) for row in csv.DictReader(f) if row.get(metric) not in (None, "")]
    if not values:
        return None
    if mode == "final":
        return values[-1]
    return max(values) if direction == "maximize" else min(values)


def _objective(spec: TuneSpec, study: Any) -> Any:
    optuna = _optuna()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

    def objective(trial: Any) -> float:
        params = suggest(trial, spec.search_space)
        # A retry of a trial whose process died (same parameters) resumes that trial's run from its last.ckpt.
        frozen = next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number)
        retried = optuna.storages.RetryFailedTrialCallback.retried_trial_number(frozen)
        run_dir = spec.out_dir / "trials" / f"trial_{trial.number if retried is None else retried}"
        (run_dir / PRUNED_FILE).unlink(missing_ok=True)
        callback = {
            "class_path": f"{OptunaPruning.__module__}.OptunaPruning",
            "init_args": {
                "storage": spec.storage,
                "study_name": spec.name,
                "trial_id": trial._trial_id,
                "metric": spec.metric,
            },
        }
        command = [
            *lightmarl_command(),
            "fit",
            *[arg for recipe in spec.recipes for arg in ("--config", recipe)],
            *override_args({**spec.overrides, **params}),
            f"--seed_everything={spec.seed}",
            f"--trainer.default_root_dir={run_dir}",
            "--trainer.enable_progress_bar=false",
            f"--trainer.callbacks+={json.dumps(callback)}",
            "--ckpt_path=last",
        ]
        run_dir.mkdir(parents=True, exist_ok=True)
        log.info(
            "lightmarl tune: trial %d%s: %s", trial.number, "" if retried is None else f" (retries {retried})", params
        )
        with (run_dir / "tune.log").open("ab") as out:
            code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
        if code != 0:
            text = (run_dir / "tune.log").read_text(errors="replace")
            raise RuntimeError(f"trial {trial.number}: fit exited with {code}: {error_line(text)}")
        if (run_dir / PRUNED_FILE).is_file():
            raise optuna.TrialPruned()
        score = trial_score(run_dir, spec.metric, spec.mode, spec.direction)
        if score is None or math.isnan(score):
            raise RuntimeError(f"trial {trial.number}: the fit logged no {spec.metric}")
        return score

    return objective


def finished(study: Any) -> int:
    """Trials of the study that ran to their end (complete or pruned); failed ones are tried again."""
    optuna = _optuna()
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return len(study.get_trials(deepcopy=False, states=states))


def run_tune(spec: TuneSpec, *, trials: int | None = None) -> list[Path]:
    """Run trials until the study holds ``spec.trials`` finished ones (or ``trials`` more in this call); files written.

    Args:
        spec: the tune file.
        trials: run at most this many trials in this call (default: as many as the study still needs).
    """
    optuna = _optuna()
    study = open_study(spec)
    objective = _objective(spec, study)
    ran = 0
    # At most `trials` (default spec.trials) per call: a recipe whose every trial fails does not loop forever.
    while finished(study) < spec.trials and ran < (trials or spec.trials):
        # One trial per optimize call: the finished count is read again from the shared storage each time.
        study.optimize(objective, n_trials=1, catch=(RuntimeError,))
        ran += 1
    return write_outputs(spec, study, optuna)


def write_outputs(spec: TuneSpec, study: Any, optuna: Any) -> list[Path]:
    """``trials.json`` (every trial) and ``best.yaml`` (the best trial as a recipe) in ``out_dir``."""
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    rows = [
        {"number": t.number, "state": t.state.name, "value": t.value, "params": t.params,
         "intermediate": {str(k): v for k, v in t.intermediate_values.items()}}
        for t in study.get_trials(deepcopy=False)
    ]  # fmt: skip
    written = [spec.out_dir / "trials.json"]
    written[0].write_text(json.dumps({"study": spec.name, "storage": spec.storage, "trials": rows}, indent=2))
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if complete:
        best = study.best_trial
        recipe: dict[str, Any] = {}
        for path in spec.recipes:
            _merge(recipe, yaml.safe_load(Path(path).read_text()) or {})
        recipe["seed_everything"] = spec.seed
        for key, value in {**spec.overrides, **best.params}.items():
            _set_dotted(recipe, key, value)
        header = (
            f"# The best trial ({best.number}, {spec.metric} = {best.value:.6g}) of study {spec.name!r}\n"
            f"# (lightmarl tune, storage {spec.storage}): {', '.join(spec.recipes)} with its parameters.\n"
        )
        written.append(spec.out_dir / "best.yaml")
        written[-1].write_text(header + yaml.safe_dump(recipe, sort_keys=False))
    return written


def _merge(into: dict[str, Any], other: dict[str, Any]) -> None:
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _set_dotted(recipe: dict[str, Any], key: str, value: Any) -> None:
    node = recipe
    parts = key.split(".")
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value
