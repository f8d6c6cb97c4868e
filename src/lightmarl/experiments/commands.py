"""``lightmarl sweep`` and ``lightmarl tune``: the command lines of `lightmarl.experiments`.

``lightmarl sweep --config sweep.yaml`` runs (or resumes) a sweep and writes its summary;
``--report`` then writes its statistics (``--report`` alone, without running, with ``--report-only``).
``lightmarl tune --config tune.yaml`` runs (or resumes) an Optuna study. A mistake in either file
ends in one line, ``lightmarl: error: ...``, exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from lightmarl.experiments.launcher import submit_sweep
from lightmarl.experiments.report import write_report
from lightmarl.experiments.runner import check_out_dir, run_sweep, write_summary
from lightmarl.experiments.spec import load_sweep
from lightmarl.experiments.tune import load_tune, run_tune

log = logging.getLogger(__name__)
#: set to 1 for full tracebacks instead of one-line errors (as for every lightmarl command).
DEBUG_ENV = "LIGHTMARL_DEBUG"


def sweep_main(argv: list[str]) -> None:
    """``lightmarl sweep --config sweep.yaml [--workers N] [--report | --report-only]``."""
    parser = argparse.ArgumentParser(
        prog="lightmarl sweep",
        description="Run every config x grid point x seed of a sweep file as a `lightmarl fit` (+ `validate`) "
        "subprocess, several at once; a second call resumes it (done runs skipped, interrupted ones resumed from "
        "their last.ckpt, failed ones tried again). Writes summary.json and summary.md (docs/howto/sweep.md).",
    )
    parser.add_argument("--config", required=True, help="the sweep YAML (docs/reference/sweep_yaml.md)")
    parser.add_argument("--workers", type=int, default=None, help="runs at once (default: the file's, else cores)")
    parser.add_argument(
        "--submit",
        action="store_true",
        help="run each pending run as a submitit job (SLURM, or a local executor) from the file's launcher: section",
    )
    parser.add_argument("--report", action="store_true", help="after the runs, write the statistics report")
    parser.add_argument("--report-only", action="store_true", help="write the report of the runs on disk; run none")
    parser.add_argument("--metric", default=None, help="the report's score metric (default: the file's score.metric)")
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap resamples of the report's intervals")
    options = parser.parse_args(argv)
    if options.workers is not None and options.workers < 1:
        parser.error(f"--workers: expected a positive integer, got {options.workers}")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    spec = load_sweep(options.config)
    check_out_dir(spec)
    if not options.report_only:
        if options.submit:
            states = submit_sweep(spec, options.config, spec.launcher, where=options.config)
        else:
            states = run_sweep(spec, workers=options.workers)
        done = sum(s.get("status") == "done" for s in states)
        print(f"lightmarl sweep: {done} of {len(states)} runs done")  # noqa: T201 - the command's output
    json_path, md_path = write_summary(spec)
    print(f"lightmarl: wrote {json_path}\nlightmarl: wrote {md_path}")  # noqa: T201
    if options.report or options.report_only:
        for path in write_report(spec, metric=options.metric, reps=options.reps):
            print(f"lightmarl: wrote {path}")  # noqa: T201
    if not options.report_only and any(s.get("status") != "done" for s in states):
        sys.exit(1)


def tune_main(argv: list[str]) -> None:
    """``lightmarl tune --config tune.yaml [--trials N]``."""
    parser = argparse.ArgumentParser(
        prog="lightmarl tune",
        description="Search a recipe's hyper-parameters with Optuna: each trial a `lightmarl fit` subprocess, the "
        "study in an RDB storage (SQLite by default) that a second call, or other workers, resume and share; the "
        "best trial written out as a recipe (docs/howto/tune.md).",
    )
    parser.add_argument("--config", required=True, help="the tune YAML (docs/reference/tune_yaml.md)")
    parser.add_argument("--trials", type=int, default=None, help="trials this call runs (default: the file's)")
    options = parser.parse_args(argv)
    if options.trials is not None and options.trials < 1:
        parser.error(f"--trials: expected a positive integer, got {options.trials}")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    spec = load_tune(options.config)
    for path in run_tune(spec, trials=options.trials):
        print(f"lightmarl: wrote {path}")  # noqa: T201


def main(argv: list[str]) -> None:
    """``lightmarl sweep ...`` / ``lightmarl tune ...`` (``argv`` starts with the command's name)."""
    command = {"sweep": sweep_main, "tune": tune_main}[argv[0]]
    try:
        command(argv[1:])
    except (ValueError, ImportError) as err:  # ConfigError is a ValueError
        if os.environ.get(DEBUG_ENV):
            raise
        print(f"lightmarl: error: {' '.join(str(err).split())}", file=sys.stderr)  # noqa: T201
        raise SystemExit(2) from None
