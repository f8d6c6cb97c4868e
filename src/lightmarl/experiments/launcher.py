"""A sweep on a cluster through submitit: one job per run, SLURM options from the sweep file, requeued on preemption.

``lightmarl sweep --config sweep.yaml --submit`` submits every run that is not done as a job of
`submitit.AutoExecutor` and waits for them; the sweep file's ``launcher`` section sets it up::

    launcher:
      folder: sweeps/spread/submitit      # submitit's job files and logs (default <out_dir>/submitit)
      cluster: slurm                      # slurm, local (a subprocess per job) or debug (in this process)
      parameters:                         # AutoExecutor.update_parameters: generic and slurm_* keys
        timeout_min: 120
        cpus_per_task: 1
        slurm_partition: cpu
        slurm_additional_parameters: {requeue: true}

Each job runs its run as `SweepRunner` would (fit with
``--ckpt_path last``, then validate) and writes the same ``sweep_run.json``, so ``lightmarl sweep``
without ``--submit`` (or ``--report-only``) sees the same runs. On preemption or timeout submitit calls
`SweepJob.checkpoint`: the run's fit gets SIGTERM, writes a final checkpoint and stops, and
the job is requeued with the same arguments, so the requeued job resumes that run from its
``last.ckpt`` (lightmarl's exact resume). submitit is imported when a job is submitted
(``pip install 'lightmarl[experiments]'``).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightmarl.errors import ConfigError
from lightmarl.experiments.runner import SweepRunner, check_run_settings, collect_states
from lightmarl.experiments.spec import SweepSpec, load_sweep

log = logging.getLogger(__name__)

HAS_SUBMITIT = importlib.util.find_spec("submitit") is not None
_LAUNCHER_KEYS = {"folder", "cluster", "parameters"}
_CLUSTERS = {"slurm", "local", "debug"}
#: seconds a preempted job waits for its fit to write its final checkpoint.
STOP_WAIT_S = 120.0


def launcher_settings(raw: Any, spec: SweepSpec, *, where: str) -> tuple[Path, str | None, dict[str, Any]]:
    """``(folder, cluster, parameters)`` from a sweep file's ``launcher`` section (``None``: submitit's choice)."""
    raw = raw or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: launcher: expected a mapping with folder:, cluster: and parameters:, got {raw!r}")
    unknown = sorted(set(raw) - _LAUNCHER_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: launcher: unknown field {unknown[0]!r}; the fields are folder, cluster, parameters"
        )
    cluster = raw.get("cluster")
    if cluster is not None and cluster not in _CLUSTERS:
        raise ConfigError(f"{where}: launcher.cluster: expected one of {', '.join(sorted(_CLUSTERS))}, got {cluster!r}")
    parameters = raw.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise ConfigError(
            f"{where}: launcher.parameters: expected a mapping of executor parameters, got {parameters!r}"
        )
    return Path(str(raw.get("folder") or spec.out_dir / "submitit")), cluster, dict(parameters)


class SweepJob:
    """One run of a sweep as a submitit job: picklable, and requeued on preemption (see the module doc).

    Args:
        sweep_file: the sweep YAML (absolute, or relative to ``cwd``).
        run_id: the run.
        cwd: the working directory the sweep's relative paths are read from.
    """

    def __init__(self, sweep_file: str, run_id: str, cwd: str) -> None:
        self.sweep_file = sweep_file
        self.run_id = run_id
        self.cwd = cwd
        self._runner: SweepRunner | None = None

    def __call__(self) -> dict[str, Any]:
        os.chdir(self.cwd)
        spec = load_sweep(self.sweep_file)
        (run,) = [r for r in spec.runs() if r.run_id == self.run_id]
        self._runner = SweepRunner(spec, workers=1)
        return self._runner.run_one(run)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit's preemption / timeout hook: stop the run with a final checkpoint, then requeue this job."""
        import submitit

        if self._runner is not None:
            self._runner.stop(wait_s=STOP_WAIT_S)
        return submitit.helpers.DelayedSubmission(SweepJob(self.sweep_file, self.run_id, self.cwd), *args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        return {"sweep_file": self.sweep_file, "run_id": self.run_id, "cwd": self.cwd, "_runner": None}


def submit_sweep(
    spec: SweepSpec, sweep_file: str, launcher: Any, *, wait: bool = True, where: str = "sweep"
) -> list[dict[str, Any]]:
    """Submit every run of ``spec`` that is not done as a submitit job; with ``wait``, wait for them all.

    Args:
        spec: the sweep.
        sweep_file: its YAML (each job reads it again).
        launcher: the file's ``launcher`` section.
        wait: block until every job ended (a failed run is in its state file, as with ``lightmarl sweep``).
        where: the file, for messages.
    """
    if not HAS_SUBMITIT:
        raise ImportError("lightmarl sweep --submit needs submitit: pip install 'lightmarl[experiments]'")
    import submitit

    folder, cluster, parameters = launcher_settings(launcher, spec, where=where)
    check_run_settings(spec)  # before any job is queued
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    try:
        executor.update_parameters(name=f"lightmarl-{spec.name}", **parameters)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: launcher.parameters: {' '.join(str(err).split())}") from None
    done = {s["run_id"] for s in collect_states(spec) if s.get("status") == "done"}
    pending = [run for run in spec.runs() if run.run_id not in done]
    cwd = str(Path.cwd())
    jobs: Sequence[Any] = []
    if pending:
        with executor.batch():
            jobs = [executor.submit(SweepJob(str(Path(sweep_file).resolve()), run.run_id, cwd)) for run in pending]
    for run, job in zip(pending, jobs):
        log.info("lightmarl sweep: %s submitted as job %s", run.run_id, job.job_id)
    if wait:
        for job in jobs:
            while not job.done():
                time.sleep(1.0)
            if job.state not in ("DONE", "COMPLETED", "FINISHED"):
                log.info("lightmarl sweep: job %s ended %s", job.job_id, job.state)
    return collect_states(spec)
