"""The command table: every ``lightmarl`` command with its summary (`COMMANDS`), and the help built from it."""

from __future__ import annotations

#: every command with its one-line summary, as `lightmarl --help` lists them: LightningCLI's
#: (`TRAINER_COMMANDS`) and those `main` dispatches itself. A new command is one entry here.
COMMANDS: dict[str, str] = {
    "fit": "train a recipe's population until model.max_frames env steps; writes runs/<recipe>/",
    "validate": "play evaluation.validation.episodes seeded episodes with a checkpoint's policies, logged as eval/...",
    "test": "the same episodes as validate, logged as test/...",
    "evaluate": "play the recipe's evaluation: scenarios; write report.json, summary.md, plots and videos",
    "export": "write a run's policies for inference (safetensors or ONNX), without optimizer or trainer state",
    "plot": "draw learning curves, payoff heatmaps and return distributions from runs and reports",
    "sweep": "run recipes x overrides x seeds as fit + validate runs, resumable, with a summary and an rliable report",
    "tune": "search a recipe's hyper-parameters with Optuna in a study database; write the best trial as a recipe",
}
#: the commands that run a Lightning ``Trainer`` method through LightningCLI (``predict`` is not one:
#: a population acts through ``lightmarl.load_population``, docs/howto/export.md).
TRAINER_COMMANDS = ("fit", "validate", "test")
COMMANDS_HINT = f"the commands are {', '.join(COMMANDS)} (`lightmarl COMMAND --help` lists its options)"
#: set to 1 for full tracebacks instead of one-line user errors.
DEBUG_ENV = "LIGHTMARL_DEBUG"


def commands_help() -> str:
    """``lightmarl --help``: every command of `COMMANDS` with its summary."""
    width = max(len(name) for name in COMMANDS) + 2
    rows = "\n".join(f"  {name:<{width}}{summary}" for name, summary in COMMANDS.items())
    return (
        "usage: lightmarl COMMAND [options]\n\n"
        "Multi-agent RL populations on PyTorch Lightning, TorchRL and TensorDict: train, evaluate and ship\n"
        "the policies a YAML recipe names.\n\n"
        f"commands:\n{rows}\n\n"
        "`lightmarl COMMAND --help` lists a command's options. Example:\n"
        "  lightmarl fit --config recipes/quickstart.yaml\n"
        "  lightmarl validate --config recipes/quickstart.yaml --ckpt_path last\n"
    )


def command_parser_kwargs(command: str) -> dict[str, str]:
    """What the help of a recipe command (`TRAINER_COMMANDS` and ``evaluate``) opens with."""
    extra = " [--out DIR]" if command == "evaluate" else ""
    return {
        "prog": f"lightmarl {command}",
        "usage": f"lightmarl {command} --config RECIPE [--model.FIELD VALUE ...] [--trainer.FIELD VALUE ...] "
        f"[--ckpt_path last|FILE]{extra}",
        "description": f"{COMMANDS[command][0].upper()}{COMMANDS[command][1:]}. lightmarl's own options come first, "
        "then the model's (a recipe's model: section), then Lightning's Trainer (its trainer: section).",
    }
