"""Training a fresh best response against a frozen policy or mixture (approximate exploitability).

`measure_best_response` runs one ``evaluation.best_response`` entry
(`BestResponseConfig`): for each run it builds a
`BestResponseModule` (a `MARLModule` whose population is
one trainable ``best_response`` binding, of the recipe's network, and one frozen binding per
member of the target), trains it with Lightning's ``Trainer`` for the frame budget, then plays
it against the target and, in a two-player zero-sum OpenSpiel game, computes its exact
expected return against the target beside the target's exact exploitability.

Each env copy plays one member of the target from one seat per episode; when its episode ends
it draws the next member with the members' weights and takes the other seat (the map of a copy
changes only at its episode boundaries, as in a league). The best response learns with the network
binding's algorithm, with the entry's ``algorithm`` fields changed (`best_response_algorithm`).
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np
import torch
from lightning.pytorch import Trainer, seed_everything

from lightmarl.algorithms.base import Algorithm
from lightmarl.data.collector import StepHook
from lightmarl.data.rollout import RolloutStep
from lightmarl.errors import ConfigError
from lightmarl.evaluation.best_response import BestResponseConfig, BestResponseRun, network_of, summarize_runs
from lightmarl.evaluation.episodes import play_episodes
from lightmarl.evaluation.exploitability import expected_returns, measure, mixture_policy, openspiel_game_of
from lightmarl.evaluation.exploitability import tabular_policy as spiel_tabular_policy
from lightmarl.evaluation.suite import preserved_rng
from lightmarl.policies.base import Policy
from lightmarl.policies.multi_agent import MultiAgentPolicy
from lightmarl.population import BindingTable, PolicyBinding
from lightmarl.training.module import MARLModule

log = logging.getLogger(__name__)

#: the binding id of the best response being trained.
BEST_RESPONSE = "best_response"
#: prefix of the frozen bindings that play the target's members.
MEMBER_PREFIX = "target_"


class BestResponseModule(MARLModule):
    """A `MARLModule` that trains ``best_response`` against frozen members drawn per episode.

    Args:
        members: the target's member bindings (frozen, ``target_<k>``), in order.
        weights: each member's probability of being drawn for an episode.
        seats: the env's agents of each of the two seats.
        draw_seed: seed of the member draws.
        **kwargs: the `MARLModule` arguments (``agent_binding_map`` set by `initial_map`).
    """

    def __init__(
        self,
        *,
        members: Sequence[str],
        weights: Sequence[float],
        seats: Sequence[Sequence[str]],
        draw_seed: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.members = list(members)
        self.weights = np.asarray(weights, dtype=np.float64) / float(np.sum(weights))
        self.seats = [list(s) for s in seats]
        self._draws = np.random.default_rng(draw_seed)
        self._seat = {int(i): int(i) % 2 for i in range(self.env_config.num_envs)}
        self._member = {}
        per_env = self.table.per_env_maps
        for i in range(self.env_config.num_envs):
            agents = per_env.get(i, self.table.agent_binding_map)
            self._member[i] = next(b for b in agents if b != BEST_RESPONSE)

    def step_hook(self) -> StepHook | None:
        return self._next_episodes

    def _next_episodes(self, step: RolloutStep) -> None:
        """Copies whose episode ended: the other seat, a new member drawn with the weights."""
        ended = torch.nonzero(step.ended).flatten().tolist()
        if not ended:
            return
        for j in ended:
            copy = step.envs.start + j
            self._seat[copy] = 1 - self._seat[copy]
            self._member[copy] = self.members[int(self._draws.choice(len(self.members), p=self.weights))]
        agents = list(self.env_spec.possible_agents)
        per_env = {i: seating(agents, self.seats, self._seat[i], self._member[i]) for i in self._seat}
        self.table.set_agent_binding_map({"default": per_env[0], "per_env": per_env})


def seating(agents: Sequence[str], seats: Sequence[Sequence[str]], seat: int, member: str) -> list[str]:
    """The map of one env copy: the best response on ``seats[seat]``, ``member`` on the other seat."""
    return [BEST_RESPONSE if agent in seats[seat] else member for agent in agents]


def initial_map(
    agents: Sequence[str],
    seats: Sequence[Sequence[str]],
    members: Sequence[str],
    num_envs: int,
    weights: np.ndarray,
    rng,
) -> dict[str, Any]:
    """Copy ``i`` starts on seat ``i % 2`` against member ``i`` (every member gets a policy), later
    copies against drawn members."""
    per_env = {}
    for i in range(num_envs):
        member = members[i] if i < len(members) else members[int(rng.choice(len(members), p=weights))]
        per_env[i] = seating(agents, seats, i % 2, member)
    return {"default": per_env[0], "per_env": per_env}


def two_seats(agents: Sequence[str]) -> list[list[str]]:
    """The first half of the agents and the second half (a two-seat game's seats)."""
    half = len(agents) // 2
    return [list(agents[:half]), list(agents[half:])]


def best_response_algorithm(config: BestResponseConfig, algorithm: Algorithm) -> Algorithm:
    """``algorithm`` (the network binding's) with the fields of ``config.algorithm`` changed: a new one.

    Raises:
        ConfigError: an unknown field, a value of the wrong kind, or one the algorithm's checks refuse,
            naming ``evaluation.best_response[<name>].algorithm.<field>``.
    """
    return _with_fields(algorithm, config.algorithm, f"evaluation.best_response[{config.name!r}].algorithm")


def check_best_response_algorithms(module: MARLModule, configs: Sequence[BestResponseConfig]) -> None:
    """Build every entry's algorithm once (`best_response_algorithm`), before any checkpoint is read or episode played.

    Raises:
        ConfigError: as `best_response_algorithm`.
    """
    recipe = {b.id: b.trainable for b in module.table.bindings}
    for config in configs:
        network = network_of(config, recipe)
        if config.algorithm and network is not None:
            best_response_algorithm(config, module.algorithm_of(network))


def _with_fields(settings: Any, changes: Mapping[str, Any], where: str) -> Any:
    """A copy of the dataclass ``settings`` with ``changes``; a mapping changes a nested dataclass's fields."""
    fields = {f.name: f for f in dataclasses.fields(settings) if f.init}
    values = {}
    for key, value in changes.items():
        if key not in fields:
            raise ConfigError(
                f"{where}.{key}: {type(settings).__name__} has no field {key!r}; its fields: {sorted(fields)}"
            )
        current = getattr(settings, key)
        if isinstance(value, Mapping) and dataclasses.is_dataclass(current):
            value = _with_fields(current, value, f"{where}.{key}")
        elif not _same_kind(current, value, str(fields[key].type)):
            raise ConfigError(
                f"{where}.{key}: {value!r} does not fit the field ({fields[key].type}; the recipe's value: {current!r})"
            )
        values[key] = value
    try:
        return dataclasses.replace(settings, **values)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: {err}") from None


def _same_kind(current: Any, value: Any, annotation: str) -> bool:
    """Whether ``value`` can replace ``current`` in a field annotated ``annotation`` (types the YAML gives)."""
    if value is None:
        return "None" in annotation
    if isinstance(current, bool) or isinstance(value, bool):
        return (isinstance(current, bool) and isinstance(value, bool)) or (current is None and "bool" in annotation)
    if isinstance(current, int) or (current is None and annotation.startswith("int")):
        return isinstance(value, int)
    if isinstance(current, float) or (current is None and "float" in annotation):
        return isinstance(value, (int, float))
    if isinstance(current, str):
        return isinstance(value, str)
    # A nested setting the recipe leaves out (``null``) cannot be built from a mapping here.
    return not isinstance(value, Mapping) and (current is None or isinstance(value, type(current)))


def measure_best_response(
    module: MARLModule,
    config: BestResponseConfig,
    bindings: Mapping[str, PolicyBinding],
    mixtures: Mapping[str, Sequence[tuple[Mapping[str, torch.Tensor], float]]] | None = None,
    confidence: float = 0.95,
    root_dir: str | None = None,
) -> dict[str, Any]:
    """Train ``config.runs`` best responses against the target and summarise them (the report's block).

    Args:
        module: the recipe's module, with the evaluated weights loaded.
        config: the measurement.
        bindings: every binding by id (the recipe's and ``evaluation.bindings``).
        mixtures: binding id -> the league mixture it shows (each member's weights and meta weight).
        confidence: coverage of the intervals.
        root_dir: where the trainings may write (default: a temporary folder).

    Raises:
        ValueError: an env without two seats of one group, or a network binding without ``class_path``.
    """
    agents = list(module.env_spec.possible_agents)
    if len(agents) < 2 or len(agents) % 2 or len({module.env_spec.group_of(a).name for a in agents}) != 1:
        raise ValueError(
            f"evaluation.best_response[{config.name!r}]: the env's agents {agents} do not form two seats of one "
            "agent group (a two-sided game)"
        )
    seats = two_seats(agents)
    recipe = {b.id: b.trainable for b in module.table.bindings}
    network = bindings[cast(str, network_of(config, recipe))]
    if network.class_path is None:
        raise ValueError(
            f"evaluation.best_response[{config.name!r}].network: binding {network.id!r} has no class_path to "
            "build a fresh network from"
        )
    members: list[tuple[dict[str, Any], Mapping[str, torch.Tensor] | None, float]] = []
    target = bindings[config.target]
    shown = (mixtures or {}).get(config.target) if config.mixture else None
    spec = {"class_path": target.class_path, "policy_uri": target.policy_uri, "policy_kwargs": target.policy_kwargs}
    if shown:
        members = [(spec, weights, float(w)) for weights, w in shown]
        described = {"binding": config.target, "policy": f"league mixture of {len(shown)}"}
    elif config.target in module.policies and any(True for _ in module.policies[config.target].parameters()):
        members = [(spec, module.get_weights(config.target), 1.0)]
        described = {"binding": config.target, "policy": "weights"}
    else:
        members = [(spec, None, 1.0)]
        described = {"binding": config.target, "policy": target.class_path or str(target.policy_uri)}
    runs = []
    exact = None
    root = root_dir or tempfile.mkdtemp(prefix="lightmarl_best_response_")
    for run in range(config.runs):
        with preserved_rng():
            result, exact = _one_run(module, config, network, members, seats, config.seed + run, f"{root}/run_{run}")
        runs.append(result)
    return summarize_runs(config, runs, described, confidence, exact)


def _spiel_of(module: MARLModule) -> Any:
    try:
        return openspiel_game_of(module.env_config)
    except (ValueError, ImportError):
        return None


def _member_bindings(members: Sequence[tuple[dict[str, Any], Any, float]]) -> list[dict[str, Any]]:
    return [
        {"id": f"{MEMBER_PREFIX}{k}", **{key: v for key, v in spec.items() if v is not None}, "trainable": False}
        for k, (spec, _, _) in enumerate(members)
    ]


def _one_run(
    module: MARLModule,
    config: BestResponseConfig,
    network: PolicyBinding,
    members: Sequence[tuple[dict[str, Any], Mapping[str, torch.Tensor] | None, float]],
    seats: list[list[str]],
    seed: int,
    root: str,
) -> tuple[BestResponseRun, float | None]:
    """Train one best response and play it against the target; also the target's exact exploitability
    (``None`` outside two-player zero-sum OpenSpiel games)."""
    seed_everything(seed, workers=False, verbose=False)
    ids = [f"{MEMBER_PREFIX}{k}" for k in range(len(members))]
    weights = np.asarray([w for _, _, w in members], dtype=np.float64)
    weights = weights / weights.sum()
    num_envs = max(config.num_envs or module.env_config.num_envs, len(members))
    env = dataclasses.replace(cast(Any, module.env_config), num_envs=num_envs)
    rng = np.random.default_rng(seed)
    agents = list(module.env_spec.possible_agents)
    best = {"id": BEST_RESPONSE, "class_path": network.class_path, "policy_kwargs": dict(network.policy_kwargs)}
    br = BestResponseModule(
        members=ids,
        weights=weights,
        seats=seats,
        draw_seed=seed + 1,
        env=env,
        policy_bindings=[best, *_member_bindings(members)],  # type: ignore[list-item]
        agent_binding_map=initial_map(agents, seats, ids, num_envs, weights, rng),
        algorithm=best_response_algorithm(config, module.algorithm_of(network.id)),
        rollout_steps=config.rollout_steps or module.rollout_steps,
        max_frames=config.frames,
        iterations_per_epoch=10**9,
        cpu_threads=module.cpu_threads,
        seed=seed,
    )
    for binding_id, (_, state, _) in zip(ids, members):
        if state is not None:
            br.set_weights(binding_id, dict(state))
    started = time.perf_counter()
    Trainer(
        max_epochs=-1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        accelerator="cpu",
        devices=1,
        default_root_dir=root,
    ).fit(br)
    train_seconds = time.perf_counter() - started
    returns, seat_of = _play_against(br, config, seats, ids, weights, seed)
    exact_return = exact_greedy = exploitability = None
    spiel = _spiel_of(module)
    group = module.env_spec.group_of(agents[0]).name
    try:
        target_tables = (
            [spiel_tabular_policy(spiel, br.policies[b].eval(), group) for b in ids] if spiel is not None else None
        )
    except TypeError:  # a target whose action probabilities cannot be read (e.g. a scripted rule)
        target_tables = None
    if spiel is not None and target_tables is not None:
        own = spiel_tabular_policy(spiel, br.policies[BEST_RESPONSE].eval(), group)
        exact_return = float(expected_returns(spiel, own, target_tables) @ weights)
        own.action_probability_array[:] = _greedy(own.action_probability_array)
        exact_greedy = float(expected_returns(spiel, own, target_tables) @ weights)
        shown = target_tables[0] if len(target_tables) == 1 else mixture_policy(spiel, target_tables, list(weights))
        exploitability = measure(spiel, shown).exploitability
    log.info(
        "best response %s (seed %d): %.4f over %d episodes after %d frames (%.0f s)",
        config.name,
        seed,
        float(np.mean(returns)),
        len(returns),
        br.frames,
        train_seconds,
    )
    return BestResponseRun(seed, br.frames, returns, seat_of, exact_return, exact_greedy, train_seconds), exploitability


def _greedy(probs: np.ndarray) -> np.ndarray:
    """Each row's most probable action with probability 1 (rows of legal actions with positive mass)."""
    out = np.zeros_like(probs)
    out[np.arange(len(probs)), probs.argmax(-1)] = 1.0
    return out


def _play_against(
    br: BestResponseModule,
    config: BestResponseConfig,
    seats: list[list[str]],
    members: list[str],
    weights: np.ndarray,
    seed: int,
) -> tuple[list[float], list[int]]:
    """``config.episodes`` episodes of the trained best response against the target, sampled as both play:
    each env copy's first episode, member and seat drawn independently for every copy."""
    agents = list(br.env_spec.possible_agents)
    rng = np.random.default_rng(seed + 2)
    chunk = max(1, min(config.episodes, 512))
    returns: list[float] = []
    seat_of: list[int] = []
    policies = {b: cast(Policy, br.policies[b].eval()) for b in [BEST_RESPONSE, *members]}
    bindings = [br.table.binding(b) for b in policies]
    played = 0
    with torch.no_grad():
        while played < config.episodes:
            count = min(chunk, config.episodes - played)
            seat = rng.integers(0, 2, size=count)
            drawn = rng.choice(len(members), size=count, p=weights)
            per_env = {i: seating(agents, seats, int(seat[i]), members[int(drawn[i])]) for i in range(count)}
            table = BindingTable(bindings, br.env_spec, {"default": per_env[0], "per_env": per_env}, num_envs=count)
            used = set(table.group_of_binding)
            population = MultiAgentPolicy({b: p for b, p in policies.items() if b in used}, table)
            torch.manual_seed(config.eval_seed + played)
            records = play_episodes(
                population, br.env_config, 4 * count, config.eval_seed + played, num_envs=count, deterministic=False
            )
            first: dict[int, float] = {}
            for record in records:
                if record.env_index not in first:
                    first[record.env_index] = record.returns[BEST_RESPONSE]
            if len(first) < count:
                log.warning(
                    "best response %s: %d of %d env copies finished no episode in %d episodes; they are left out",
                    config.name,
                    count - len(first),
                    count,
                    4 * count,
                )
            for i in sorted(first):
                returns.append(first[i])
                seat_of.append(int(seat[i]))
            played += count
    return returns, seat_of
