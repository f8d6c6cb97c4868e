"""The ``lightmarl`` command: LightningCLI over [`MARLModule`][lightmarl.training.module.MARLModule].

``lightmarl fit --config recipes/quickstart.yaml`` trains, ``lightmarl validate`` /
``lightmarl test`` play evaluation episodes; ``--print_config`` shows the resolved recipe
and any ``--model.x.y=value`` / ``--trainer.x=value`` overrides it. ``lightmarl export``
writes a run's policies for inference (`lightmarl.policies.exported`). A recipe's
``evaluation:`` section ([`EvaluationConfig`][lightmarl.evaluation.scenarios.EvaluationConfig]) names
evaluation scenarios: ``lightmarl evaluate --config recipe.yaml --ckpt_path last`` plays them and
writes a report, its plots and videos, and ``evaluation.every_n_frames`` makes ``fit`` play them
periodically (`lightmarl.training.periodic_evaluation`).

One module per job: the command table (`commands`: `COMMANDS`), parsing and its one-line errors
(`parsing`), the run directory a recipe leaves unset (`run_defaults`), ``--ckpt_path`` (`checkpoints`:
``last`` is resolved there and nowhere else), the Trainer commands (`trainer_commands`), ``evaluate``
(`evaluate`), ``export`` (`export`) and how each failure ends (`exit_codes`). `main` dispatches.

User errors (a bad recipe, a missing or unreadable checkpoint) end in one line naming the
field and a non-zero exit; ``LIGHTMARL_DEBUG=1`` shows the full traceback instead.
"""

from __future__ import annotations

import sys
import warnings

from lightmarl.cli.checkpoints import checkpoint_mixtures, read_checkpoint, resolve_last
from lightmarl.cli.commands import (
    COMMANDS,
    COMMANDS_HINT,
    DEBUG_ENV,
    TRAINER_COMMANDS,
    command_parser_kwargs,
    commands_help,
)
from lightmarl.cli.evaluate import EvaluateCLI, add_best_responses
from lightmarl.cli.exit_codes import exit_codes, one_line
from lightmarl.cli.export import export_main
from lightmarl.cli.parsing import (
    LightmarlArgumentParser,
    check_class_paths,
    check_config_files,
    join_negative_values,
    readable,
)
from lightmarl.cli.run_defaults import (
    CHECKPOINT_CLASS,
    RUNS_DIR,
    TRAINER_DEFAULTS,
    apply_run_defaults,
    check_run_name,
    run_name_of,
)
from lightmarl.cli.trainer_commands import MAX_SEED, OVERWRITE_RUN_ENV, LightmarlCLI, release_run_locks
from lightmarl.errors import ConfigError
from lightmarl.evaluation import plot_cli
from lightmarl.experiments import commands as experiment_commands
from lightmarl.training.module import MARLModule
from lightmarl.training.preemption import Preemption

__all__ = [
    "CHECKPOINT_CLASS",
    "COMMANDS",
    "COMMANDS_HINT",
    "DEBUG_ENV",
    "MAX_SEED",
    "OVERWRITE_RUN_ENV",
    "RUNS_DIR",
    "TRAINER_COMMANDS",
    "TRAINER_DEFAULTS",
    "EvaluateCLI",
    "LightmarlArgumentParser",
    "LightmarlCLI",
    "add_best_responses",
    "apply_run_defaults",
    "check_class_paths",
    "check_config_files",
    "check_run_name",
    "checkpoint_mixtures",
    "command_parser_kwargs",
    "commands_help",
    "exit_codes",
    "export_main",
    "join_negative_values",
    "main",
    "one_line",
    "read_checkpoint",
    "readable",
    "resolve_last",
    "run_name_of",
]


def main(args: list[str] | None = None) -> None:
    """``lightmarl COMMAND ...``: the console script's entry point (``args``: the arguments, default ``sys.argv[1:]``)."""
    argv = join_negative_values(sys.argv[1:] if args is None else args)
    if args is not None:
        args = argv
    else:
        sys.argv[1:] = argv  # LightningCLI reads sys.argv itself when given no args
    if argv[:1] in (["-h"], ["--help"]):
        print(commands_help(), end="")  # noqa: T201 - the command's output
        return
    if argv[:1] == ["plot"]:
        # LightningCLI's subcommands are fixed: `lightmarl plot` is dispatched before it.
        plot_cli.main(argv[1:])
        return
    if argv[:1] in (["sweep"], ["tune"]):
        # Many runs, each a `lightmarl fit` subprocess (lightmarl.experiments): dispatched before LightningCLI too.
        experiment_commands.main(argv)
        return
    preemption = Preemption()
    try:
        with exit_codes(preemption):
            _run(argv, args, preemption)
    finally:
        release_run_locks()


def _run(argv: list[str], args: list[str] | None, preemption: Preemption) -> None:
    """``export``, ``evaluate`` or a Trainer command (LightningCLI), with the arguments after the command."""
    if argv[:1] == ["export"]:
        try:
            return export_main(argv[1:])
        except (ValueError, ImportError) as err:
            raise ConfigError(str(err)) from err
    check_config_files(argv)
    if argv[:1] == ["evaluate"]:
        # Not a Trainer method, so not a LightningCLI subcommand: the recipe is parsed without one,
        # from the arguments after `evaluate` (LightningCLI warns when args and sys.argv both exist).
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*args parameter is intended.*")
            cli = EvaluateCLI(
                MARLModule,
                trainer_defaults=TRAINER_DEFAULTS,
                seed_everything_default=0,
                auto_configure_optimizers=False,
                parser_class=LightmarlArgumentParser,
                parser_kwargs=command_parser_kwargs("evaluate"),
                args=argv[1:],
                run=False,
            )
        cli.evaluate()
        return
    LightmarlCLI(
        MARLModule,
        parser_kwargs={
            "description": f"Multi-agent RL with lightmarl; {COMMANDS_HINT}.",
            **{command: command_parser_kwargs(command) for command in TRAINER_COMMANDS},
        },
        trainer_defaults={**TRAINER_DEFAULTS, "callbacks": [preemption]},
        seed_everything_default=0,
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,
        parser_class=LightmarlArgumentParser,
        args=args,
    )
