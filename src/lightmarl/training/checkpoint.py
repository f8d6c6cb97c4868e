"""The checkpoint schema of a [`MARLModule`][lightmarl.training.module.MARLModule]: what a Lightning checkpoint
and a league snapshot file carry besides Lightning's own state, and how a resumed run reads it back.

A checkpoint's ``lightmarl`` entry (`CHECKPOINT_KEY`) holds

* ``population``: the saved population's description
  ([`SavedPopulation.to_dict`][lightmarl.policies.artifact.SavedPopulation.to_dict]), the same layout an export
  and a league snapshot carry, so that ``policy_uri``, ``lightmarl export`` and ``load_population``
  read a checkpoint with the one reader (`lightmarl.policies.artifact.read_artifact`);
* ``iteration_shape``: what an iteration was made of (a resume with another shape is checked against
  the frame budget);
* ``trainers``: the learners' state (optimizers are Lightning's).

The weights are Lightning's ``state_dict`` (``population.policies.<binding>.*``); the league's state,
and each process's RNG streams and replay buffers, have entries of their own.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any, cast

import torch

from lightmarl.envs.transforms import load_transforms_state_dict
from lightmarl.errors import ConfigError
from lightmarl.policies.artifact import CHECKPOINT_KEY, POPULATION_KEY, SavedPopulation, Snapshot
from lightmarl.policies.base import Policy
from lightmarl.training.league import CHECKPOINT_KEY as LEAGUE_CHECKPOINT_KEY
from lightmarl.training.resume import CHECKPOINT_KEY as RESUME_CHECKPOINT_KEY

if TYPE_CHECKING:  # the module whose schema this is imports this one
    from lightmarl.training.module import MARLModule


def describe_binding(module: MARLModule, binding_id: str) -> dict[str, Any]:
    """How to rebuild one binding's policy: class path, keyword arguments, shared modules, group
    and whether it trains (plain data)."""
    return {
        **cast(Policy, module.population.policy_of(binding_id)).origin,
        "group": module.table.group_of_binding.get(binding_id),
        "trainable": module.table.binding(binding_id).trainable,
    }


def _env_description(module: MARLModule) -> dict[str, Any]:
    return {
        **module.env_config.describe(),
        "possible_agents": list(module.env_spec.possible_agents),
        "turn_based": module.env_spec.turn_based,
        "base_groups": {n: dataclasses.asdict(g) for n, g in module.env_base_spec.groups.items()},
    }


def _transforms(module: MARLModule) -> list[dict[str, Any]]:
    # Settings and running statistics (e.g. ObservationNorm's): `validate` uses them frozen, an export alone.
    return [{**t.describe(), "state": t.state_dict()} for t in module.env_config.transforms]


def describe_population(module: MARLModule) -> SavedPopulation:
    """The module's population as a checkpoint saves it (weights left out: they are Lightning's ``state_dict``).

    A league's opponent slots are left out: they hold whichever snapshot was last loaded into them, and
    the snapshots themselves are listed; an agent a slot played goes to its group's first binding.
    """
    league = module.league
    slots = set(league.slot_ids) if league is not None else set()
    bindings = {}
    for binding_id in module.policies:
        entry = describe_binding(module, binding_id)
        if entry["group"] is not None and binding_id not in slots:
            bindings[binding_id] = entry
    possible = list(module.env_spec.possible_agents)
    default = dict(zip(possible, module.table.agent_binding_map))
    per_env = {k: dict(zip(possible, v)) for k, v in module.table.per_env_maps.items()}
    if slots:
        first: dict[str, str] = {}
        for binding_id, entry in bindings.items():
            for agent in module.env_spec.groups[entry["group"]].agents:
                first.setdefault(agent, binding_id)
        default = {agent: b if b in bindings else first.get(agent, b) for agent, b in default.items()}
        per_env = {}  # the league's seatings of each copy
    snapshots: list[Snapshot] = []
    mixtures: dict[str, dict[str, float]] = {}
    if league is not None and league.matchmaker is not None:
        # Every player's binding has the same class and kwargs (the league checks it), as have its
        # opponent slots: the first trainable binding describes every snapshot.
        trainable = [b for b, entry in bindings.items() if entry.get("trainable", True)]
        template = copy.deepcopy(bindings[trainable[0] if trainable else next(iter(bindings))])
        template.pop("input_transforms", None)
        manager = league.manager
        snapshots = [
            Snapshot(p.player_id, p.parent_id, {**template, "trainable": False}, manager.state_path(p.checkpoint_path))
            for p in manager.historical_players
        ]
        mixtures = league.shown_mixtures()
    return SavedPopulation(
        bindings=bindings,
        groups={name: dataclasses.asdict(group) for name, group in module.env_spec.groups.items()},
        shared_modules=module.shared.describe(),
        transforms=_transforms(module),
        env=_env_description(module),
        agent_binding_map={"default": default, "per_env": per_env},
        counters={"frames": module.frames, "iterations": module.iterations},
        snapshots=snapshots,
        mixtures=mixtures,
    )


def snapshot_description(module: MARLModule, binding_id: str) -> dict[str, Any]:
    """What a league snapshot file of ``binding_id`` carries besides its weights: the population of that
    one binding (class, kwargs, group spec, shared modules, env, transforms with their statistics as now)."""
    entry = describe_binding(module, binding_id)
    entry.pop("trainable", None)
    group = module.env_spec.groups[entry["group"]]
    population = SavedPopulation(
        bindings={binding_id: entry},
        groups={group.name: dataclasses.asdict(group)},
        shared_modules={
            n: s for n, s in module.shared.describe().items() if n in entry.get("shared_modules", {}).values()
        },
        transforms=_transforms(module),
        env=_env_description(module),
        agent_binding_map={"default": {a: binding_id for a in group.agents}, "per_env": {}},
        counters={"frames": module.frames, "iterations": module.iterations},
    )
    return {POPULATION_KEY: population.to_dict()}


def save_checkpoint(module: MARLModule, checkpoint: dict[str, Any]) -> None:
    """Add the module's entries to a Lightning checkpoint (`MARLModule.on_save_checkpoint`)."""
    checkpoint[CHECKPOINT_KEY] = {
        POPULATION_KEY: describe_population(module).to_dict(),
        "iteration_shape": module.budget.iteration_shape(),
        "trainers": module.marl_trainer.state_dict() if module.marl_trainer is not None else {},
    }
    if module.league is not None and module.league.matchmaker is not None:
        checkpoint[LEAGUE_CHECKPOINT_KEY] = module.league.state_dict()
    if module._collector is not None:  # fit: every process's RNG streams, env copies and replay buffers
        checkpoint[RESUME_CHECKPOINT_KEY] = module._resume.save(
            module._collector,
            module.marl_trainer,
            module.league,
            module.device,
            module.trainer.strategy,
            policies=dict(module.policies.items()),
        )


def load_checkpoint(module: MARLModule, checkpoint: dict[str, Any]) -> None:
    """Put a checkpoint's entries back (`MARLModule.on_load_checkpoint`); Lightning loads the weights.

    Raises:
        ConfigError: one line naming what does not fit, for another recipe's or a damaged checkpoint.
    """
    try:
        _load(module, checkpoint)
    except ConfigError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as err:
        detail = err if isinstance(err, ValueError) else f"{type(err).__name__}: {err}"
        raise ConfigError(f"--ckpt_path: the checkpoint's state does not fit this run ({detail})") from err


def _load(module: MARLModule, checkpoint: dict[str, Any]) -> None:
    run = checkpoint[CHECKPOINT_KEY]
    population = SavedPopulation.from_dict(run.get(POPULATION_KEY), field="--ckpt_path")
    module.frames = population.counters["frames"]
    module.iterations = population.counters["iterations"]
    if module.marl_trainer is not None:  # fit: the budget left, in the frames an iteration now takes
        module.budget.check_resume(run.get("iteration_shape"), frames=module.frames, iterations=module.iterations)
    load_transforms_state_dict(
        module.env_config.transforms,
        [{"transform": t["class_path"].rsplit(".", 1)[-1], "state": t["state"]} for t in population.transforms],
    )
    # `fit --ckpt_path` restores after setup("fit") built the trainers (and their target networks
    # from the still random policy): their saved state replaces that now. `validate` has no trainers.
    if module.marl_trainer is not None:
        module.marl_trainer.load_state_dict(run.get("trainers", {}))
    league = module.league
    if league is not None and league.matchmaker is not None and LEAGUE_CHECKPOINT_KEY in checkpoint:
        league.load_state_dict(checkpoint[LEAGUE_CHECKPOINT_KEY])
    if module.marl_trainer is not None:  # fit: this process's part, put back as the run starts
        module._resume.load(
            checkpoint.get(RESUME_CHECKPOINT_KEY), module.global_rank, module.trainer.world_size, module.marl_trainer
        )


def check_checkpoint_fits(module: MARLModule, state_dict: Any, *, field: str) -> None:
    """Raise a [`ConfigError`][lightmarl.errors.ConfigError] naming what differs when ``state_dict`` cannot load into ``module``.

    (Lightning's strict load raises a multi-line ``RuntimeError``, or TensorDict's "key sets don't match".)
    """
    own = module.state_dict()
    if not isinstance(state_dict, dict):
        raise ConfigError(f"{field}: the checkpoint's state_dict is not a table of tensors")
    problems = []
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    shapes = [
        f"{key} is {list(state_dict[key].shape)} in the checkpoint, {list(value.shape)} in the recipe"
        for key, value in own.items()
        if isinstance(value, torch.Tensor)
        and isinstance(state_dict.get(key), torch.Tensor)
        and state_dict[key].shape != value.shape
    ]
    for label, items in (("shapes differ", shapes), ("missing", missing), ("unexpected", unexpected)):
        if items:
            more = f" and {len(items) - 2} more" if len(items) > 2 else ""
            problems.append(f"{label}: {'; '.join(items[:2])}{more}")
    if problems:
        raise ConfigError(
            f"{field}: the checkpoint does not fit this recipe's population (another env, policy class or "
            f"policy_kwargs?): {'; '.join(problems)}"
        )
