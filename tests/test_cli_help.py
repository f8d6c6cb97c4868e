"""`lightmarl` reads like a tool: `--help` lists every command with its summary, each command's help
says what it is and opens with lightmarl's own options, `predict` is not offered, and every flag of
lightmarl's own commands is spelled with underscores."""

from __future__ import annotations

import re

import pytest

from lightmarl.cli import COMMANDS, TRAINER_COMMANDS, main


def help_of(capsys, *args: str) -> str:
    try:
        main([*args, "--help"])
    except SystemExit as stop:
        assert stop.code in (0, None), stop.code
    return capsys.readouterr().out


def test_the_top_level_help_lists_every_command_with_its_summary(capsys):
    text = help_of(capsys)
    assert text.startswith("usage: lightmarl COMMAND")
    listed = dict(re.findall(r"^  (\w+) +(.+)$", text.split("commands:\n", 1)[1].split("\n\n")[0], flags=re.M))
    assert listed == COMMANDS
    assert {"fit", "validate", "test", "evaluate", "export", "plot"} <= set(listed)
    assert "predict" not in listed


@pytest.mark.parametrize("command", [*TRAINER_COMMANDS, "evaluate"])
def test_a_recipe_command_says_what_it_is_and_puts_lightmarl_first(command, capsys):
    text = help_of(capsys, command)
    assert text.startswith(f"usage: lightmarl {command} --config RECIPE")
    assert COMMANDS[command][1:] in " ".join(text.split())
    assert "Lightning Trainer command line tool" not in text
    # lightmarl's options and the model's come before the ~80 lines of Lightning's Trainer flags.
    first_model = text.index("--model.env ")
    first_trainer = text.index("--trainer.accelerator ", text.index("options:"))
    assert text.index("--run_name ") < first_model < first_trainer
    assert len(text[: text.index("options:")].splitlines()) < 10


@pytest.mark.parametrize("command", ["export", "plot"])
def test_lightmarls_own_commands_say_what_they_are_and_use_underscores(command, capsys):
    text = help_of(capsys, command)
    assert text.startswith(f"usage: lightmarl {command}")
    flags = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", text))
    assert flags and not [flag for flag in flags if "-" in flag[2:]], flags


def test_predict_is_not_offered(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["predict", "--config", "recipes/quickstart.yaml"])
    assert stop.value.code == 2
    assert "unknown command 'predict'" in capsys.readouterr().err


def test_the_help_shows_cross_references_as_names_not_site_links(capsys):
    """Docstrings link as the site renders them ([`X`][lightmarl.m.X]); the terminal shows `X`."""
    text = help_of(capsys, "fit", "--config", "recipes/quickstart.yaml")
    assert "`MARLTrainer`" in text
    assert "][lightmarl." not in text.replace("\n", "").replace(" ", "")
