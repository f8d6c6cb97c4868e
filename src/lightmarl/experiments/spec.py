"""The sweep YAML: base recipes × a grid of overrides × seeds, and the runs it expands to.

A sweep file (docs/reference/sweep_yaml.md has every field)::

    name: spread_lr
    seeds: [0, 1, 2]
    workers: 2
    overrides: {model.max_frames: 20000}          # every run
    configs:
      - name: mappo
        recipe: recipes/quickstart.yaml
        task: simple_spread
      - name: ippo
        recipe: recipes/ippo_simple_spread.yaml
        task: simple_spread
    grid:                                          # every config × every combination
      model.algorithm.init_args.lr: [0.001, 0.003]
    score:
      metric: eval/main/episode_return
      normalize: {simple_spread: {random: -60.0, reference: -20.0}}

expands to 2 configs × 2 learning rates × 3 seeds = 12 runs. An override is a recipe key in dotted
form and its value; it becomes ``--key=value`` on the ``lightmarl fit`` command line, so any key
``lightmarl fit --help`` lists can be swept. Relative recipe paths and ``out_dir`` are read from
the working directory ``lightmarl sweep`` runs in, as ``--config`` is.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lightmarl.errors import ConfigError

#: where sweeps go by default, relative to the working directory: ``sweeps/<name>/``.
SWEEPS_DIR = "sweeps"
_TOP_LEVEL = {"name", "out_dir", "seeds", "workers", "validate", "overrides", "configs", "grid", "score", "launcher"}
_CONFIG_KEYS = {"name", "recipe", "task", "method", "overrides"}
_SCORE_KEYS = {"metric", "normalize"}
_SAFE = re.compile(r"[^A-Za-z0-9._=-]+")


@dataclass(frozen=True)
class ConfigSpec:
    """One base configuration of a sweep: its recipe files and the overrides it adds.

    Attributes:
        name: unique within the sweep; names the run folders.
        recipes: the ``--config`` files, in order (later ones override earlier ones).
        task: the task (env) the config runs on, for statistics across tasks (default: the first recipe's stem).
        method: the label statistics group runs by (default: ``name``); configs of one method on several
            tasks share it.
        overrides: recipe key (dotted) -> value, added after the sweep's common overrides.
    """

    name: str
    recipes: tuple[str, ...]
    task: str
    method: str
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScoreSpec:
    """What a run's result is for the statistics (`lightmarl.experiments.report`).

    Attributes:
        metric: the validation metric that scores a run (``None``: the report's caller names it, or the first
            ``eval/*/episode_return`` metric the runs logged).
        normalize: task -> ``(random score, reference score)``; a task named here is scored as
            ``(x - random) / (reference - random)``.
    """

    metric: str | None = None
    normalize: dict[str, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class RunSpec:
    """One run of a sweep: a config, one grid point and one seed.

    Attributes:
        run_id: ``<config label>/seed_<seed>``, unique; also the run directory under ``<out_dir>/runs``.
        config: the config's label: its name, and the grid point (``lr=0.001``) where there is a grid.
        method: the statistics label (the config's method and the grid point).
        task: the config's task.
        seed: ``seed_everything`` of the run.
        recipes: the ``--config`` files.
        overrides: every override of the run, the sweep's, the config's and the grid point's, in that order.
    """

    run_id: str
    config: str
    method: str
    task: str
    seed: int
    recipes: tuple[str, ...]
    overrides: dict[str, Any]


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep file (see the module doc).

    Attributes:
        name: the sweep's name (default: the file's stem).
        out_dir: where run directories, the summary and the report go (default ``sweeps/<name>``).
        seeds: the seeds every config × grid point runs with.
        workers: runs at once (``None``: one per physical core).
        validate: run ``lightmarl validate --ckpt_path last`` after each fit; its metrics are the run's final ones.
        overrides: recipe key -> value for every run.
        configs: the base configurations.
        grid: recipe key -> values; every combination is applied to every config.
        score: what scores a run in the report.
        launcher: the ``launcher`` section, for ``lightmarl sweep --submit`` (`lightmarl.experiments.launcher`).
    """

    name: str
    out_dir: Path
    seeds: tuple[int, ...]
    workers: int | None
    validate: bool
    overrides: dict[str, Any]
    configs: tuple[ConfigSpec, ...]
    grid: dict[str, list[Any]]
    score: ScoreSpec
    launcher: dict[str, Any] = field(default_factory=dict)

    def runs(self) -> list[RunSpec]:
        """Every run, config by config, grid point by grid point, seed by seed."""
        keys = list(self.grid)
        points = [dict(zip(keys, values)) for values in itertools.product(*(self.grid[k] for k in keys))]
        runs = []
        for config in self.configs:
            for point in points:
                label = grid_label(point)
                name = f"{config.name}__{label}" if label else config.name
                method = f"{config.method} {label}" if label else config.method
                for seed in self.seeds:
                    runs.append(
                        RunSpec(
                            run_id=f"{name}/seed_{seed}",
                            config=name,
                            method=method,
                            task=config.task,
                            seed=seed,
                            recipes=config.recipes,
                            overrides={**self.overrides, **config.overrides, **point},
                        )
                    )
        return runs


def grid_label(point: dict[str, Any]) -> str:
    """``{"model.algorithm.init_args.lr": 0.001, "model.gamma": 0.9}`` -> ``lr=0.001,gamma=0.9`` (file-name safe)."""
    parts = [f"{key.rsplit('.', 1)[-1]}={format_value(value)}" for key, value in point.items()]
    return _SAFE.sub("_", ",".join(parts))


def format_value(value: Any) -> str:
    """A value as ``lightmarl fit`` reads it after ``--key=``: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def override_args(overrides: dict[str, Any]) -> list[str]:
    """``--key=value`` arguments of ``lightmarl fit`` for ``overrides``."""
    return [f"--{key}={format_value(value)}" for key, value in overrides.items()]


def parse_override_args(args: Sequence[str], *, where: str = "overrides") -> dict[str, str]:
    """The overrides of ``--key=value`` arguments (`override_args` the other way): ``{key: value}``, values as written.

    A value stays the string given, so `override_args` hands it to ``lightmarl fit`` unchanged.

    Args:
        args: ``lightmarl fit`` arguments such as ``--model.env.num_envs=8``.
        where: what gave them, for the message of a `ConfigError`.
    """
    overrides: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not key.startswith("--") or not sep or len(key) < 3:
            raise ConfigError(f"{where}: {arg!r} is not a --key=value argument of lightmarl fit")
        overrides[key[2:]] = value
    return overrides


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping of recipe keys to values, got {value!r}")
    for key in value:
        if not isinstance(key, str) or not key or key.startswith("-"):
            raise ConfigError(f"{where}: {key!r} is not a recipe key (write it dotted, without --: model.max_frames)")
    return dict(value)


def _unknown(given: dict[str, Any], known: set[str], where: str) -> None:
    extra = sorted(set(given) - known)
    if extra:
        raise ConfigError(f"{where}: unknown field {extra[0]!r}; the fields are {', '.join(sorted(known))}")


def _launcher(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(
            f"{where}: launcher: expected a mapping with folder:, cluster: and parameters:, got {value!r}"
        )
    return dict(value)


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and check a sweep file; every mistake is a `ConfigError` naming the field.

    Args:
        path: the sweep YAML.
    """
    path = Path(path)
    raw = read_config_file(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"--config {path}: expected a mapping with configs: and seeds:, got {type(raw).__name__}")
    return parse_sweep(raw, default_name=path.stem, where=str(path))


def read_config_file(path: Path) -> Any:
    """The YAML of a sweep or tune file named by ``--config``, or a `ConfigError` saying why not."""
    if not path.is_file():
        raise ConfigError(f"--config {str(path)!r}: no such file")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"--config {path}: not valid YAML ({type(err).__name__})") from None


def parse_sweep(raw: dict[str, Any], *, default_name: str, where: str) -> SweepSpec:
    """A `SweepSpec` from a sweep file's mapping (`load_sweep`).

    Args:
        raw: the YAML mapping.
        default_name: the name when ``name`` is unset.
        where: the file, for messages.
    """
    _unknown(raw, _TOP_LEVEL, where)
    name = str(raw.get("name") or default_name)
    seeds = raw.get("seeds", [0])
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        seeds = [seeds]
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    ):
        raise ConfigError(f"{where}: seeds: expected a list of integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"{where}: seeds: {seeds!r} repeats a seed")
    if any(not 0 <= s < 2**32 for s in seeds):
        raise ConfigError(f"{where}: seeds: {seeds!r}: every seed must be from 0 to 2**32 - 1")
    workers = raw.get("workers")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise ConfigError(
            f"{where}: workers: expected a positive integer or null (one per physical core), got {workers!r}"
        )
    validate = raw.get("validate", True)
    if not isinstance(validate, bool):
        raise ConfigError(f"{where}: validate: expected true or false, got {validate!r}")
    configs_raw = raw.get("configs")
    if not isinstance(configs_raw, list) or not configs_raw:
        raise ConfigError(f"{where}: configs: expected a list of {{name, recipe}} entries, got {configs_raw!r}")
    configs: list[ConfigSpec] = []
    for i, entry in enumerate(configs_raw):
        at = f"{where}: configs[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{at}: expected a mapping with name: and recipe:, got {entry!r}")
        _unknown(entry, _CONFIG_KEYS, at)
        config_name = entry.get("name")
        if not isinstance(config_name, str) or not config_name or _SAFE.search(config_name):
            raise ConfigError(f"{at}.name: expected a name of letters, digits, '.', '_', '-', got {config_name!r}")
        if config_name in {c.name for c in configs}:
            raise ConfigError(f"{at}.name: {config_name!r} names two configs")
        recipes = entry.get("recipe")
        recipes = [recipes] if isinstance(recipes, str) else recipes
        if not isinstance(recipes, list) or not recipes or not all(isinstance(r, str) for r in recipes):
            raise ConfigError(f"{at}.recipe: expected a recipe file or a list of them, got {entry.get('recipe')!r}")
        for recipe in recipes:
            if not Path(recipe).is_file():
                raise ConfigError(f"{at}.recipe: {recipe!r}: no such file (relative to {Path.cwd()})")
        configs.append(
            ConfigSpec(
                name=config_name,
                recipes=tuple(recipes),
                task=str(entry.get("task") or Path(recipes[0]).stem),
                method=str(entry.get("method") or config_name),
                overrides=_mapping(entry.get("overrides"), f"{at}.overrides"),
            )
        )
    grid = _mapping(raw.get("grid"), f"{where}: grid")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}: grid.{key}: expected a non-empty list of values, got {values!r}")
    score_raw = raw.get("score") or {}
    if not isinstance(score_raw, dict):
        raise ConfigError(f"{where}: score: expected a mapping with metric: and normalize:, got {score_raw!r}")
    _unknown(score_raw, _SCORE_KEYS, f"{where}: score")
    metric = score_raw.get("metric")
    if metric is not None and not isinstance(metric, str):
        raise ConfigError(f"{where}: score.metric: expected a metric name, got {metric!r}")
    normalize: dict[str, tuple[float, float]] = {}
    for task, bounds in (score_raw.get("normalize") or {}).items():
        try:
            low, high = float(bounds["random"]), float(bounds["reference"])
        except (TypeError, KeyError, ValueError):
            raise ConfigError(
                f"{where}: score.normalize.{task}: expected {{random: number, reference: number}}, got {bounds!r}"
            ) from None
        if low == high:
            raise ConfigError(f"{where}: score.normalize.{task}: random and reference are both {low}")
        normalize[str(task)] = (low, high)
    unknown_tasks = sorted(set(normalize) - {c.task for c in configs})
    if unknown_tasks:
        raise ConfigError(f"{where}: score.normalize: {unknown_tasks[0]!r} is the task of no config")
    out_dir = raw.get("out_dir") or f"{SWEEPS_DIR}/{name}"
    return SweepSpec(
        name=name,
        out_dir=Path(str(out_dir)),
        seeds=tuple(seeds),
        workers=workers,
        validate=validate,
        overrides=_mapping(raw.get("overrides"), f"{where}: overrides"),
        configs=tuple(configs),
        grid=grid,
        score=ScoreSpec(metric=metric, normalize=normalize),
        launcher=_launcher(raw.get("launcher"), where),
    )
