"""Run a sweep: every run an ordinary ``lightmarl fit`` (then ``validate``) subprocess, several at once, resumably.

Each run has its own directory ``<out_dir>/runs/<config>/seed_<n>/`` (``trainer.default_root_dir``)
holding what ``lightmarl fit`` writes there (checkpoints, loggers), its log ``sweep.log`` (both
commands' output, appended attempt by attempt) and its state ``sweep_run.json``:

- ``done``: fit and validate succeeded; a restarted sweep skips it;
- ``failed``: a command exited with an error; the summary shows its error line, the other runs go on,
  and a restarted sweep tries it again (from its ``last.ckpt`` where it has one);
- ``running`` or ``interrupted``: the sweep was stopped (SIGTERM, Ctrl-C, a killed job); a restarted sweep
  resumes it with ``--ckpt_path last`` (lightmarl's exact resume; a run without a checkpoint yet
  starts over).

The state records what the run was made with (its recipes' contents, its overrides, its seed). A run
directory whose state records other settings than the sweep now gives that run (a recipe edited, an
override changed) is refused before anything runs (`check_run_settings`): skipping it would report the
old settings' result as the new one's, and resuming it would train on with the old settings' checkpoint.
Move or delete the directory, or give the sweep another ``out_dir``.

Every fit is started with ``--ckpt_path last``, so a fresh run and an interrupted one take the same
command. SIGTERM or Ctrl-C to ``lightmarl sweep`` forwards SIGTERM to the runs in progress: each writes
a final checkpoint and stops (`lightmarl.training.preemption`). Each subprocess runs with one
torch thread (``OMP_NUM_THREADS=1``); ``workers`` runs go at once, by default one per physical core.

When the sweep ends, ``summary.json`` and ``summary.md`` in ``out_dir`` list every run: its config,
seed, status, frames (``counters/frames`` of its last checkpoint), wall time (the sum over its
attempts) and final metrics (those ``lightmarl validate`` logged).
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lightmarl.errors import ConfigError
from lightmarl.experiments.spec import RunSpec, SweepSpec, override_args
from lightmarl.policies.loading import load_torch_file
from lightmarl.policies.run_checkpoints import counters_of

log = logging.getLogger(__name__)

STATE_FILE = "sweep_run.json"
LOG_FILE = "sweep.log"
#: the CSV logger folder of ``lightmarl validate`` in a run directory (its metrics are the run's final ones).
VALIDATE_DIR = "sweep_validate"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
#: exit codes of a run stopped by a signal (lightmarl's preemption exit codes and a killed process).
_STOPPED_CODES = {-signal.SIGTERM, -signal.SIGINT, -signal.SIGKILL, 128 + signal.SIGTERM, 128 + signal.SIGINT, 130}


def lightmarl_command() -> list[str]:
    """The ``lightmarl`` console script beside this Python, else the CLI run by this Python."""
    script = Path(sys.executable).with_name("lightmarl")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from lightmarl.cli import main; main()"]


def physical_cores() -> int:
    """Physical CPU cores of this machine (Linux ``/proc/cpuinfo``; elsewhere the logical count)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return os.cpu_count() or 1
    cores, physical = set(), "0"
    for line in text.splitlines():
        if line.startswith("physical id"):
            physical = line.split(":", 1)[1].strip()
        elif line.startswith("core id"):
            cores.add((physical, line.split(":", 1)[1].strip()))
    return len(cores) or os.cpu_count() or 1


def run_directory(spec: SweepSpec, run: RunSpec) -> Path:
    """The run directory of ``run``: ``<out_dir>/runs/<run_id>`` (its ``trainer.default_root_dir``)."""
    return spec.out_dir / "runs" / run.run_id


def run_settings(run: RunSpec) -> dict[str, Any]:
    """What a run's result depends on, as its state records it: the recipes by content, the overrides, the seed."""
    return json.loads(
        json.dumps(
            {
                "recipes": {recipe: file_digest(recipe) for recipe in run.recipes},
                "overrides": run.overrides,
                "seed": run.seed,
            }
        )
    )


def file_digest(path: str | Path) -> str | None:
    """The SHA-256 of a file's bytes; ``None`` for a missing file (its ``lightmarl fit`` says so)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def changed_settings(state: dict[str, Any], run: RunSpec) -> list[str]:
    """How the settings a run directory's state records differ from ``run``'s: one phrase per difference."""
    now = run_settings(run)
    # States written before the settings were recorded name the recipes and overrides, not the recipes' contents.
    recorded = state.get("settings") or {
        "recipes": {recipe: now["recipes"].get(recipe) for recipe in state.get("recipes", [])},
        "overrides": state.get("overrides", {}),
        "seed": state.get("seed"),
    }
    changes = []
    if list(recorded["recipes"]) != list(now["recipes"]):
        changes.append(f"recipes {list(recorded['recipes'])} → {list(now['recipes'])}")
    else:
        changes += [
            f"{recipe} edited" for recipe, digest in now["recipes"].items() if recorded["recipes"][recipe] != digest
        ]
    old, new = recorded["overrides"], now["overrides"]
    for key in [*old, *(k for k in new if k not in old)]:
        if old.get(key) != new.get(key):
            changes.append(f"{key}: {_shown(old, key)} → {_shown(new, key)}")
    if recorded["seed"] != now["seed"]:
        changes.append(f"seed {recorded['seed']} → {now['seed']}")
    return changes


def _shown(overrides: dict[str, Any], key: str) -> str:
    if key not in overrides:
        return "(unset)"
    text = json.dumps(overrides[key])
    return text if len(text) <= 120 else text[:117] + "..."


def check_run_settings(spec: SweepSpec, runs: Sequence[RunSpec] | None = None) -> None:
    """Refuse, in one error naming each, the runs whose directory holds a run made with other settings.

    Args:
        spec: the sweep.
        runs: the runs to check (default: all of the sweep's).
    """
    stale = []
    for run in spec.runs() if runs is None else runs:
        state = read_state(run_directory(spec, run))
        changes = changed_settings(state, run) if state else []
        if changes:
            stale.append(f"{run.run_id} ({'; '.join(changes)})")
    if stale:
        raise ConfigError(
            f"{spec.out_dir / 'runs'} holds runs made with other settings than the sweep gives them now: "
            f"{', '.join(stale)}. Move or delete them to run the new settings, or give the sweep another out_dir"
        )


def fit_command(run: RunSpec, run_dir: Path) -> list[str]:
    """``lightmarl fit`` of one run, resuming from its ``last.ckpt`` where there is one."""
    return [
        *lightmarl_command(),
        "fit",
        *[arg for recipe in run.recipes for arg in ("--config", recipe)],
        *override_args(run.overrides),
        f"--seed_everything={run.seed}",
        f"--trainer.default_root_dir={run_dir}",
        "--trainer.enable_progress_bar=false",
        "--ckpt_path=last",
    ]


def validate_command(run: RunSpec, run_dir: Path) -> list[str]:
    """``lightmarl validate`` of one run's ``last.ckpt``, its metrics in a CSV file of its own (`VALIDATE_DIR`)."""
    logger = {
        "class_path": "lightning.pytorch.loggers.CSVLogger",
        "init_args": {"save_dir": str(run_dir), "name": VALIDATE_DIR, "version": 0},
    }
    return [
        *lightmarl_command(),
        "validate",
        *[arg for recipe in run.recipes for arg in ("--config", recipe)],
        *override_args(run.overrides),
        f"--seed_everything={run.seed}",
        f"--trainer.default_root_dir={run_dir}",
        "--trainer.enable_progress_bar=false",
        f"--trainer.logger={json.dumps(logger)}",
        "--ckpt_path=last",
    ]


def read_state(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / STATE_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None  # a state file cut short by a kill: the run is resumed from its checkpoint


def write_state(run_dir: Path, state: dict[str, Any]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f"{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(run_dir / STATE_FILE)  # atomic: a kill leaves the old state or the new one


def last_checkpoint(run_dir: Path) -> Path | None:
    found = [p for p in run_dir.rglob("last*.ckpt") if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def checkpoint_frames(run_dir: Path) -> float | None:
    """``counters/frames`` of the run's newest last checkpoint (the frames it trained on, over all env copies and ranks)."""
    path = last_checkpoint(run_dir)
    if path is None:
        return None
    try:
        checkpoint = load_torch_file(path, field="sweep run")
    except ValueError:
        return None
    counters = counters_of(checkpoint)
    return float(counters[0]) if counters is not None else None


def validate_metrics(run_dir: Path) -> dict[str, float]:
    """The metrics ``lightmarl validate`` logged for the run (the last value of each)."""
    path = run_dir / VALIDATE_DIR / "version_0" / "metrics.csv"
    metrics: dict[str, float] = {}
    if not path.is_file():
        return metrics
    with path.open() as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                if key not in ("epoch", "step") and value not in (None, ""):
                    metrics[key] = float(value)
    return metrics


def metrics_files(run_dir: Path) -> list[Path]:
    """The ``metrics.csv`` files ``lightmarl fit`` wrote in a run directory, oldest first (a resumed run adds a version)."""
    found = [p for p in run_dir.rglob("metrics.csv") if VALIDATE_DIR not in p.relative_to(run_dir).parts]
    return sorted(found, key=lambda p: p.stat().st_mtime)


def metric_rows(run_dir: Path) -> list[dict[str, float]]:
    """Every row ``lightmarl fit`` logged to CSV in a run directory, in order: file by file (`metrics_files`), row by row.

    A row holds the metrics logged at one step with a value (the empty cells of the CSV are left out),
    so a caller reads a whole logged series, e.g. ``[(row["counters/frames"], row["eval/main/win_rate"]) ...]``.
    The rows of ``lightmarl validate`` (`VALIDATE_DIR`) are not among them.

    Args:
        run_dir: the run directory (`run_directory`).
    """
    rows: list[dict[str, float]] = []
    for path in metrics_files(run_dir):
        with path.open() as f:
            for row in csv.DictReader(f):
                rows.append({key: float(value) for key, value in row.items() if key and value not in (None, "")})
    return rows


def fit_metrics(run_dir: Path) -> dict[str, float]:
    """The last value of every ``eval/...`` metric ``lightmarl fit`` logged (its periodic validation)."""
    metrics: dict[str, float] = {}
    for row in metric_rows(run_dir):
        metrics.update({key: value for key, value in row.items() if key.startswith("eval/")})
    return metrics


def error_line(text: str) -> str:
    """The line of a command's output that says why it failed: lightmarl's one-line error, else the last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("lightmarl: error:"):
            return line
    for line in reversed(lines):
        if not line.startswith(("[rank", "Traceback")) and "Warning" not in line:
            return line
    return lines[-1] if lines else "(no output)"


class SweepRunner:
    """Runs the runs of a `SweepSpec` (see the module doc).

    Args:
        spec: the sweep.
        workers: runs at once (default: the sweep's ``workers``, else one per physical core).
        env: extra environment variables for every subprocess.
        on_event: called with ``(run_id, event)`` when a run starts, resumes, finishes or fails.
    """

    def __init__(
        self,
        spec: SweepSpec,
        *,
        workers: int | None = None,
        env: dict[str, str] | None = None,
        on_event: Callable[[str, str], None] | None = None,
    ) -> None:
        self.spec = spec
        self.workers = workers or spec.workers or physical_cores()
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **(env or {})}
        self.on_event = on_event or (lambda run_id, event: log.info("lightmarl sweep: %s %s", run_id, event))
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._live: set[subprocess.Popen[bytes]] = set()

    def stop(self, *, wait_s: float = 0.0) -> None:
        """Start no new run, and SIGTERM the runs in progress (each writes a final checkpoint).

        Args:
            wait_s: wait up to this long for them to end.
        """
        self._stop.set()
        with self._lock:
            live = [process for process in self._live if process.poll() is None]
        for process in live:
            process.terminate()
        deadline = time.monotonic() + wait_s
        for process in live:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("lightmarl sweep: a run did not stop within %.0f s of SIGTERM", wait_s)

    def run(self, runs: Sequence[RunSpec] | None = None) -> list[dict[str, Any]]:
        """Run ``runs`` (default: all of the sweep's), at most ``workers`` at once; the state of each, in order.

        Args:
            runs: a subset of the sweep's runs (e.g. one per submitted job).
        """
        runs = list(self.spec.runs() if runs is None else runs)
        if not runs:
            return []
        check_run_settings(self.spec, runs)  # all of them before any starts
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(runs)))) as pool:
            futures = [pool.submit(self.run_one, run) for run in runs]
            try:
                return [future.result() for future in futures]
            except BaseException:
                # Ctrl-C: the queued runs must not start while the pool winds down.
                self.stop()
                raise

    def run_one(self, run: RunSpec) -> dict[str, Any]:
        """One run: skipped when done, else fit (resuming) and validate; its final state."""
        run_dir = run_directory(self.spec, run)
        check_run_settings(self.spec, [run])
        state = read_state(run_dir) or {}
        if state.get("status") == "done":
            self.on_event(run.run_id, "already done")
            return state
        if self._stop.is_set():
            return state or self._fresh_state(run)
        state = {**self._fresh_state(run), **{k: state[k] for k in ("attempts", "wall_s") if k in state}}
        resumed = last_checkpoint(run_dir) is not None
        state["attempts"] = [*state.get("attempts", []), {"started": time.time(), "resumed": resumed}]
        state["status"] = "running"
        write_state(run_dir, state)
        self.on_event(run.run_id, "resumes from its last checkpoint" if resumed else "starts")
        started = time.perf_counter()
        commands = [("fit", fit_command(run, run_dir))]
        if self.spec.validate:
            commands.append(("validate", validate_command(run, run_dir)))
        status, error = "done", None
        for name, command in commands:
            if name == "validate":
                shutil.rmtree(run_dir / VALIDATE_DIR, ignore_errors=True)  # a failed attempt's file, if any
            code, output = self._call(command, run_dir, name)
            if code != 0:
                stopped = code in _STOPPED_CODES or self._stop.is_set()
                status = "interrupted" if stopped else "failed"
                error = f"{name} exited with {code}: {error_line(output)}"
                break
        took = time.perf_counter() - started
        state["attempts"][-1].update(wall_s=took, status=status)
        state.update(
            status=status,
            error=error,
            wall_s=state.get("wall_s", 0.0) + took,
            frames=checkpoint_frames(run_dir),
            metrics=(validate_metrics(run_dir) if self.spec.validate else fit_metrics(run_dir))
            if status == "done"
            else {},
        )
        write_state(run_dir, state)
        self.on_event(run.run_id, status if error is None else f"{status}: {error}")
        return state

    def _fresh_state(self, run: RunSpec) -> dict[str, Any]:
        return {
            "run_id": run.run_id,
            "config": run.config,
            "method": run.method,
            "task": run.task,
            "seed": run.seed,
            "recipes": list(run.recipes),
            "overrides": run.overrides,
            "settings": run_settings(run),
            "status": "pending",
            "error": None,
            "attempts": [],
            "wall_s": 0.0,
            "frames": None,
            "metrics": {},
        }

    def _call(self, command: list[str], run_dir: Path, name: str) -> tuple[int, str]:
        """Run one command with its output appended to the run's log; its exit code and this attempt's output."""
        run_dir.mkdir(parents=True, exist_ok=True)
        log_path = run_dir / LOG_FILE
        with log_path.open("ab") as out:
            start = out.tell()
            out.write(f"\n# lightmarl sweep: {name}: {shlex.join(command)}\n".encode())
            out.flush()
            with self._lock:
                if self._stop.is_set():
                    return -signal.SIGTERM, "stopped before it started"
                process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=self.env)
                self._live.add(process)
            try:
                code = process.wait()
            finally:
                with self._lock:
                    self._live.discard(process)
        with log_path.open("rb") as f:
            f.seek(start)
            output = f.read().decode(errors="replace")
        return code, output


def run_sweep(spec: SweepSpec, *, workers: int | None = None) -> list[dict[str, Any]]:
    """Run every run of ``spec`` (SIGTERM and Ctrl-C stop it resumably) and write its summary; the runs' states.

    Args:
        spec: the sweep.
        workers: runs at once (default: the sweep's ``workers``, else one per physical core).
    """
    runner = SweepRunner(spec, workers=workers)
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        runner.stop()

    in_main_thread = threading.current_thread() is threading.main_thread()
    if in_main_thread:
        signal.signal(signal.SIGTERM, on_sigterm)
    try:
        states = runner.run()
    except KeyboardInterrupt:
        runner.stop()
        raise
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
        write_summary(spec)
    return states


def collect_states(spec: SweepSpec) -> list[dict[str, Any]]:
    """Every run of the sweep with its state on disk (``pending`` where it has not started)."""
    states = []
    for run in spec.runs():
        state = read_state(run_directory(spec, run))
        if state is None:
            state = {"run_id": run.run_id, "config": run.config, "method": run.method, "task": run.task}
            state.update(seed=run.seed, status="pending", error=None, wall_s=0.0, frames=None, metrics={})
        state["run_dir"] = str(run_directory(spec, run))
        states.append(state)
    return states


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value).replace("|", "\\|")


def summary_markdown(spec: SweepSpec, states: Sequence[dict[str, Any]]) -> str:
    """The summary table: one row per run with its config, seed, status, frames, wall time and final metrics."""
    metric_names = sorted({name for s in states for name in (s.get("metrics") or {})})
    counts: dict[str, int] = {}
    for s in states:
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    header = ["run", "method", "task", "seed", "status", "frames", "wall s", *metric_names]
    lines = [
        f"# Sweep {spec.name}",
        "",
        ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) + f" of {len(states)} runs.",
        "",
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
    ]
    for s in states:
        metrics = s.get("metrics") or {}
        row = [s["run_id"], s["method"], s["task"], s["seed"], s["status"], s.get("frames"), s.get("wall_s")]
        lines.append("| " + " | ".join(_cell(v) for v in [*row, *(metrics.get(m) for m in metric_names)]) + " |")
    failed = [s for s in states if s.get("error")]
    if failed:
        lines += ["", "## Errors", ""]
        lines += [f"- `{s['run_id']}` ({s['status']}): {s['error']}" for s in failed]
    return "\n".join(lines) + "\n"


def write_summary(spec: SweepSpec) -> tuple[Path, Path]:
    """``summary.json`` and ``summary.md`` in the sweep's ``out_dir``, from the runs' states on disk."""
    states = collect_states(spec)
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    for s in states:
        counts[s["status"]] = counts.get(s["status"], 0) + 1
    summary = {"sweep": spec.name, "out_dir": str(spec.out_dir), "counts": counts, "runs": states}
    json_path = spec.out_dir / SUMMARY_JSON
    json_path.write_text(json.dumps(summary, indent=2))
    md_path = spec.out_dir / SUMMARY_MD
    md_path.write_text(summary_markdown(spec, states))
    return json_path, md_path


def check_out_dir(spec: SweepSpec) -> None:
    """Fail in one line when the sweep's ``out_dir`` cannot hold run directories."""
    if spec.out_dir.exists() and not spec.out_dir.is_dir():
        raise ConfigError(f"out_dir: {str(spec.out_dir)!r} is a file; name a directory for the sweep's runs")
    try:
        spec.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"out_dir: cannot create {str(spec.out_dir)!r} ({err.strerror or err})") from err
