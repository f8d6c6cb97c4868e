"""Parsing a recipe command line: parser errors rewritten as one line, help ordered, recipe files and values checked.

Every parse error ends as one ``lightmarl: error: ...`` line naming the field, exit code 2
(`LightmarlArgumentParser`, `readable`); recipe files are read before LightningCLI sees them, so an
empty file, a file that is no mapping or a key set twice is named (`check_config_files`); a
``class_path`` that names no class is refused before anything is built (`check_class_paths`).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

import yaml
from lightning.pytorch.cli import LightningArgumentParser

from lightmarl._imports import import_object
from lightmarl.cli.commands import COMMANDS_HINT, DEBUG_ENV
from lightmarl.cli.run_defaults import apply_run_defaults, run_name_of
from lightmarl.errors import ConfigError
from lightmarl.evaluation.scenarios import moved_setting


def readable(message: str) -> str:
    """A jsonargparse / instantiation error as one line naming the field.

    A field typed ``X | None`` (e.g. ``model.algorithm``) reports a failed ``X`` as "Does not
    validate against any of the Union subtypes" followed by each subtype's error; only the
    non-``None`` one says what is wrong, so that is the one kept. Other messages lose their
    line breaks.
    """
    moved = moved_setting(message)  # a recipe key that has moved: name the new one
    if moved is not None:
        return moved
    union = "Does not validate against any of the Union subtypes"
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    if any(union in line for line in lines):
        field = lines[0].split(union)[0].strip()  # e.g. 'Parser key "model.algorithm":'
        reasons: list[str] = []
        for line in lines[lines.index("Errors:") + 1 :] if "Errors:" in lines else []:
            if line.startswith("Given value"):
                break
            if line.startswith("- "):
                reasons.append(line[2:])
            elif reasons:  # a reason continued on the next line
                reasons[-1] += " " + line
        reasons = [reason for reason in reasons if "NoneType" not in reason]
        if reasons:
            return " ".join([field, "; ".join(reasons)]).strip()
    return " ".join(lines)


_SITE_LINK = re.compile(r"\[(`[^`\]]+`)\]\[[\w.]+\]")


class LightmarlArgumentParser(LightningArgumentParser):
    """Parse errors as one line (``lightmarl: error: ...``) instead of the whole usage, exit code 2;
    help lists lightmarl's own options and the model's before Lightning's Trainer flags."""

    def format_help(self, formatter: argparse.HelpFormatter | None = None) -> str:
        groups = self._action_groups

        def lightning(group: Any) -> bool:
            dests = [action.dest for action in group._group_actions]
            return bool(dests) and all(d.split(".")[0] in ("trainer", "data") for d in dests)

        titles = {id(g): g.title for g in groups}
        for group in groups:
            dests = {action.dest.split(".")[0] for action in group._group_actions}
            if dests == {"trainer"}:
                group.title = "Lightning's Trainer (a recipe's trainer: section; lightmarl fills in its defaults)"
            elif dests == {"data"}:
                group.title = "Lightning's DataModule (unused: lightmarl collects its own rollouts)"
            elif "ckpt_path" in dests and dests <= {"ckpt_path", "weights_only"}:
                group.title = "The checkpoint"
        self._action_groups = [g for g in groups if not lightning(g)] + [g for g in groups if lightning(g)]
        # Docstrings cross-reference as the site renders them, [`X`][lightmarl.module.X]: the terminal shows `X`.
        helps = {id(a): a.help for a in self._actions}
        for action in self._actions:
            if isinstance(action.help, str):
                action.help = _SITE_LINK.sub(r"\1", action.help)
        try:
            return super().format_help(formatter)
        finally:
            for action in self._actions:
                action.help = helps[id(action)]
            self._action_groups = groups
            for group in groups:
                group.title = titles[id(group)]

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or os.environ.get(DEBUG_ENV):
            super().error(message, ex)
        if "subcommand" in message and ("invalid choice" in message or "not provided" in message):
            # LightningCLI knows only the Trainer's commands; lightmarl dispatches the others itself.
            found = re.search(r"invalid choice: '([^']*)'", message)
            given = f"unknown command {found.group(1)!r}" if found else "no command given"
            sys.stderr.write(f"lightmarl: error: {given}; {COMMANDS_HINT}\n")
            raise SystemExit(2)
        # prog is "<script> [options] fit"; the script is __main__.py when run in-process.
        command = " ".join(["lightmarl", *self.prog.replace(" [options]", "").split()[1:]])
        sys.stderr.write(f"lightmarl: error: {readable(message)} (`{command} --help` lists every option)\n")
        raise SystemExit(2)

    def _parse_common(self, cfg: Any, *args: Any, **kwargs: Any) -> Any:
        # --print_config prints while parsing, before LightmarlCLI.before_instantiate_classes fills
        # in the run layout: fill it in here too, so that the printed config is the one that runs
        # (trainer.default_root_dir: runs/<recipe>, its loggers and checkpoint), not null.
        request = getattr(self, "print_config", None)
        if isinstance(request, dict):
            config = cfg.get(request["key"]) if request.get("key") else cfg  # the subcommand's part
            if config is not None and config.get("trainer") is not None:
                if not config.get("run_name"):
                    config.run_name = run_name_of(config.get("config") or [])
                apply_run_defaults(config, config.run_name)
        return super()._parse_common(cfg, *args, **kwargs)


def check_class_paths(config: Any) -> None:
    """Refuse a ``class_path`` anywhere in the parsed recipe that names a function or another non-class
    (``os.system``) before anything is built: jsonargparse calls ``{class_path, init_args}`` values
    it finds in free-form fields (``policy_kwargs``, ``env_kwargs``) while it instantiates the recipe.
    Each extension point then checks the class's base where it builds it."""
    from jsonargparse import Namespace

    def walk(value: Any, field: str) -> None:
        if isinstance(value, Namespace):
            value = value.as_dict()
        if isinstance(value, dict):
            path = value.get("class_path")
            if isinstance(path, str) and "." in path:
                try:
                    target = import_object(path, field=f"{field}.class_path")
                except ValueError:
                    target = None  # an unimportable path is named where it is built, with its context
                if target is not None and not isinstance(target, type):
                    raise ConfigError(
                        f"{field}.class_path: {path!r} is a {type(target).__name__}, not a class; "
                        "a class_path names a class to build"
                    )
            for key, item in value.items():
                walk(item, f"{field}.{key}" if field else str(key))
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                walk(item, f"{field}[{i}]")

    walk(config, "")


def _config_files(args: list[str]) -> list[tuple[str, str]]:
    """``(flag, value)`` of every ``--config F``, ``--config=F``, ``-c F`` and ``-cF`` in ``args``."""
    found: list[tuple[str, str]] = []
    for i, arg in enumerate(args):
        for flag in ("--config", "-c"):
            if arg == flag and i + 1 < len(args):
                found.append((flag, args[i + 1]))
            elif arg.startswith(f"{flag}="):
                found.append((flag, arg[len(flag) + 1 :]))
            elif flag == "-c" and arg.startswith("-c") and len(arg) > 2 and not arg.startswith("--"):
                found.append((flag, arg[2:]))
    return found


class DuplicateKeyError(yaml.YAMLError):
    """A YAML mapping that sets one key twice."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key set twice in one mapping is an error: plain YAML keeps
    the later value without a word (a second ``model:`` section replaces the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            line = key_node.start_mark.line + 1
            if isinstance(key, str | int | float | bool) and key in seen and key != "<<":
                raise DuplicateKeyError(
                    f"key {key!r} is set twice in one mapping (lines {seen[key]} and {line}); "
                    "YAML would keep only the later value: remove one"
                )
            if isinstance(key, str | int | float | bool):
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def check_config_files(args: list[str]) -> None:
    """Fail on a recipe file that holds no settings, no mapping of them, or a key set twice, with a
    message (LightningCLI prints only 'Unexpected config', and YAML keeps a duplicate key's later value)."""
    for flag, value in _config_files(args):
        path = Path(value)
        if not path.is_file():
            continue  # jsonargparse also takes an inline YAML string, and names a missing file itself
        text = path.read_text()
        if not text.strip():
            raise ConfigError(f"{flag} {value}: the file is empty; a recipe needs at least a `model:` section")
        try:
            loaded = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader that refuses duplicate keys
        except DuplicateKeyError as err:
            raise ConfigError(f"{flag} {value}: {err}") from None
        except yaml.YAMLError as err:
            where = getattr(err, "problem_mark", None)
            at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
            reason = getattr(err, "problem", None) or type(err).__name__
            raise ConfigError(f"{flag} {value}: not valid YAML: {reason}{at}") from None
        if loaded is None:
            raise ConfigError(
                f"{flag} {value}: the file holds no settings (only comments or document markers); "
                "a recipe needs at least a `model:` section"
            )
        if not isinstance(loaded, dict):
            raise ConfigError(
                f"{flag} {value}: expected a mapping of sections (model:, trainer:, ...), "
                f"got a {type(loaded).__name__} ({' '.join(text.split())[:60]!r})"
            )


#: a negative number argparse takes for an option (it knows only ``-5`` and ``-0.5``): ``-1e9``, ``-1.5E-3``, ``-inf``.
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)[eE][+-]?\d+$|^-(inf|infinity|nan)$", re.IGNORECASE)


def join_negative_values(argv: list[str]) -> list[str]:
    """``--field -1e9`` as ``--field=-1e9``: argparse reads a value such as ``-1e9`` as an option, and
    the error then names the option before it instead of the field's value check."""
    out: list[str] = []
    for arg in argv:
        previous = out[-1] if out else ""
        if _NEGATIVE_NUMBER.match(arg) and previous.startswith("--") and "=" not in previous:
            out[-1] = f"{previous}={arg}"
        else:
            out.append(arg)
    return out
