"""Evaluation episodes: per-binding returns of a population on fresh, seeded env copies."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Literal

import torch
from torchrl.envs.utils import ExplorationType

from lightmarl import keys
from lightmarl.data.rollout import RolloutLoop, RolloutStep
from lightmarl.envs.config import EnvConfig
from lightmarl.envs.spec import GroupSpec
from lightmarl.policies.base import fresh_random_streams
from lightmarl.policies.multi_agent import MultiAgentPolicy
from lightmarl.population import BindingTable

WinRule = Literal["none", "highest_return", "positive_return"]

log = logging.getLogger(__name__)


@torch.no_grad()
def evaluate_episodes(
    policy: MultiAgentPolicy,
    env_config: EnvConfig,
    num_episodes: int,
    seed: int,
    num_envs: int | None = None,
    deterministic: bool = True,
    device: torch.device | str = "cpu",
    winner: WinRule = "none",
) -> dict[str, dict[str, float]]:
    """Play ``num_episodes`` episodes and report metrics grouped by binding.

    Env copy ``i`` is reset with ``seed + i``, so two calls with the same seed see the same
    start states: scores of different policies (or checkpoints) are comparable. Copy ``i``
    plays the map of training env copy ``i`` (its ``per_env`` override, if any).

    Args:
        policy: the population to evaluate.
        env_config: the env to play in (its transforms apply, with frozen statistics: see
            ``EnvConfig.make_vector(evaluation=True)``).
        num_episodes: complete episodes to count, spread evenly over the env copies (see `EpisodeScorer`).
        seed: base seed of the env copies.
        num_envs: env copies played at once (default ``min(num_episodes, env_config.num_envs)``).
        deterministic: take each policy's mode action instead of sampling.
        device: where the policies run.
        winner: how win, draw and loss are decided, for ``win_rate`` / ``draw_rate``
            (`seat_outcomes`): ``highest_return`` (head-to-head: the side with the strictly
            highest return wins, a tie for highest is a draw; the sides are the bindings, or the
            seats when one binding plays them all), ``positive_return`` (each seat by the sign of
            its return: games that pay +1 / 0 / -1 for win / draw / loss), or ``none``.

    Returns:
        binding id -> ``episode_return`` (mean over episodes of the mean over the binding's
        agents), ``episode_return_std``, ``episode_length``, ``episodes``; with a ``winner``
        rule, ``win_rate`` and ``draw_rate``: the fractions of the seats the binding played
        (one per agent per episode) that it won or drew; and ``info/<field>`` for each of the
        env config's ``info_fields`` (`EpisodeRecord.info`) that the binding's agents
        reported, its mean over the episodes that reported it.
    """
    scorer = _play(policy, env_config, num_episodes, seed, num_envs, deterministic, device, winner)
    results, outcomes = scorer.results, scorer.outcomes
    summary = {}
    for binding, episodes in results.items():
        if not episodes:  # plays only in env copies that finished no counted episode
            continue
        r = torch.tensor([x[0] for x in episodes])
        summary[binding] = {
            "episode_return": float(r.mean()),
            "episode_return_std": float(r.std()) if len(r) > 1 else 0.0,
            "episode_length": float(sum(x[1] for x in episodes) / len(episodes)),
            "episodes": float(len(episodes)),
        }
        if winner != "none":
            played = outcomes[binding]
            summary[binding]["win_rate"] = played.count("win") / len(played)
            summary[binding]["draw_rate"] = played.count("draw") / len(played)
        for name, values in scorer.info[binding].items():
            reported = [v for v in values if not math.isnan(v)]
            if reported:
                summary[binding][keys.info_key(name)] = sum(reported) / len(reported)
    return summary


@torch.no_grad()
def play_episodes(
    policy: MultiAgentPolicy,
    env_config: EnvConfig,
    num_episodes: int,
    seed: int,
    num_envs: int | None = None,
    deterministic: bool = True,
    device: torch.device | str = "cpu",
    winner: WinRule = "none",
) -> list[EpisodeRecord]:
    """Play ``num_episodes`` episodes like [`evaluate_episodes`][lightmarl.evaluation.episodes.evaluate_episodes] and return each one's record.

    Same arguments as [`evaluate_episodes`][lightmarl.evaluation.episodes.evaluate_episodes]; the records come in the order the episodes
    finished (env copy order within a step).
    """
    return _play(policy, env_config, num_episodes, seed, num_envs, deterministic, device, winner).episodes


def _play(
    policy: MultiAgentPolicy,
    env_config: EnvConfig,
    num_episodes: int,
    seed: int,
    num_envs: int | None,
    deterministic: bool,
    device: torch.device | str,
    winner: WinRule,
) -> EpisodeScorer:
    if winner not in ("none", "highest_return", "positive_return"):
        raise ValueError(f"winner: {winner!r} is not one of ['none', 'highest_return', 'positive_return']")
    count = num_envs or min(num_episodes, env_config.num_envs)
    env = env_config.make_vector(seed=seed, num_envs=count, evaluation=True)
    table = policy.table
    unplayed = [i for i in table.per_env_maps if i >= count]
    if unplayed:
        log.warning(
            "evaluation plays %d env copies: the agent_binding_map.per_env overrides of copies %s are not played",
            count,
            unplayed,
        )
    mode = ExplorationType.DETERMINISTIC if deterministic else ExplorationType.RANDOM
    scorer = EpisodeScorer(
        table, list(env.spec.groups.values()), count, num_episodes, winner, info_fields=env.spec.info_fields
    )
    loop = RolloutLoop(env, policy, mode, device)
    try:
        # Scripted policies' own random streams start from their seeds, as in a policy built afresh.
        with fresh_random_streams(policy):
            loop.run(scorer)
    finally:
        loop.close()
    return scorer


@dataclass(frozen=True)
class EpisodeRecord:
    """One counted evaluation episode.

    Attributes:
        env_index: the env copy that played it.
        returns: binding id -> the mean return of the agents it controlled.
        lengths: binding id -> steps its agents acted (the longest of them).
        agent_returns: agent name -> its return.
        seats: binding id -> the agents it controlled, in ``possible_agents`` order.
        outcomes: binding id -> ``win`` / ``draw`` / ``loss`` where the ``winner`` rule gives
            all of the binding's seats the same outcome (absent with ``winner="none"``, and for
            a binding that won one seat and lost another, e.g. against itself).
        info: binding id -> env info field (``EnvSpec.info_fields``) -> the mean over the
            binding's agents of the value each one's info held at the last step of the episode
            that reported the field (NaN where none of them reported it).
    """

    env_index: int
    returns: dict[str, float]
    lengths: dict[str, int]
    agent_returns: dict[str, float]
    seats: dict[str, list[str]]
    outcomes: dict[str, str]
    info: dict[str, dict[str, float]] = field(default_factory=dict)


class EpisodeScorer:
    """The `StepRecorder` of evaluation: per-binding returns, lengths and outcomes.

    Counts ``num_episodes`` episodes spread evenly over the env copies: copy ``i`` counts its first
    ``num_episodes // num_envs`` episodes, one more for the first ``num_episodes % num_envs``
    copies (so with as many copies as episodes, each copy's first episode, BenchMARL's protocol).
    Counting the first episodes to finish instead would favour short episodes: copies whose
    episodes end early (a fall, a loss) finish twice before a long one finishes once.

    Args:
        table: the population's binding table.
        groups: the env's agent groups.
        num_envs: env copies stepped.
        num_episodes: episodes to count.
        winner: the win rule of [`evaluate_episodes`][lightmarl.evaluation.episodes.evaluate_episodes].
        info_fields: the env's info fields (``EnvSpec.info_fields``) to report per binding.
    """

    def __init__(
        self,
        table: BindingTable,
        groups: list[GroupSpec],
        num_envs: int,
        num_episodes: int,
        winner: WinRule,
        info_fields: tuple[str, ...] = (),
    ) -> None:
        self.table = table
        self.groups = groups
        self.num_envs = num_envs
        self.num_episodes = num_episodes
        self.winner = winner
        self.returns = {g.name: torch.zeros(num_envs, g.num_agents) for g in groups}
        self.lengths = {g.name: torch.zeros(num_envs, g.num_agents, dtype=torch.int64) for g in groups}
        #: binding id -> ``(return, length)`` per counted episode it played.
        self.results: dict[str, list[tuple[float, int]]] = {b: [] for b in table.active_ids}
        #: binding id -> ``win`` / ``draw`` / ``loss`` per seat it played in a counted episode (with a ``winner`` rule).
        self.outcomes: dict[str, list[str]] = {b: [] for b in table.active_ids}
        #: every counted episode, in the order they finished.
        self.episodes: list[EpisodeRecord] = []
        self.info_fields = tuple(info_fields)
        #: group -> info field -> the last value each (env copy, agent) reported in its episode so far.
        self.info_last = {
            g.name: {name: torch.full((num_envs, g.num_agents), float("nan")) for name in self.info_fields}
            for g in groups
        }
        #: binding id -> info field -> `EpisodeRecord.info` value per counted episode it played.
        self.info: dict[str, dict[str, list[float]]] = {
            b: {name: [] for name in self.info_fields} for b in table.active_ids
        }
        self.agent_names = table.env_spec.possible_agents
        self.finished = 0
        #: episodes each env copy counts, and has counted so far.
        self.quota = [num_episodes // num_envs + (i < num_episodes % num_envs) for i in range(num_envs)]
        self.counted = [0] * num_envs

    @property
    def done(self) -> bool:
        return self.finished >= self.num_episodes

    def record(self, step: RolloutStep) -> None:
        envs = step.envs
        for g in self.groups:
            valid = step.td.get((g.name, keys.VALID)).cpu()
            # Every reward counts, also one arriving on an agent's invalid row (a turn-based
            # game's loss lands on the winner's turn); absent agents of parallel envs get 0.
            self.returns[g.name][envs] += step.next[g.name][keys.REWARD]
            self.lengths[g.name][envs] += valid.long()
            for name, last in self.info_last[g.name].items():
                reported = step.next[g.name][keys.info_key(name)]
                last[envs] = torch.where(reported.isnan(), last[envs], reported)
        for e in (torch.nonzero(step.ended).flatten() + envs.start).tolist():
            if self.done:
                break
            if self.counted[e] >= self.quota[e]:
                for g in self.groups:
                    self.returns[g.name][e] = 0
                    self.lengths[g.name][e] = 0
                    for last in self.info_last[g.name].values():
                        last[e] = float("nan")
                continue
            self.counted[e] += 1
            self.finished += 1
            seats: list[tuple[str, float]] = []
            record = EpisodeRecord(e, {}, {}, {}, {}, {})
            for g in self.groups:
                returns, lengths = self.returns[g.name], self.lengths[g.name]
                binding_of = self.table.bindings_of_envs(g.name, self.num_envs)[e]
                for index in binding_of.unique().tolist():
                    agents = binding_of == index
                    binding_id = self.table.ids[index]
                    result = (float(returns[e, agents].mean()), int(lengths[e, agents].max()))
                    self.results[binding_id].append(result)
                    record.returns[binding_id], record.lengths[binding_id] = result
                    if self.info_fields:
                        values = {
                            name: float(last[e, agents].nanmean()) for name, last in self.info_last[g.name].items()
                        }
                        record.info[binding_id] = values
                        for name, value in values.items():
                            self.info[binding_id][name].append(value)
                for agent_id, b, r in zip(g.agent_ids, binding_of.tolist(), returns[e].tolist()):
                    record.agent_returns[self.agent_names[agent_id]] = r
                    record.seats.setdefault(self.table.ids[b], []).append(self.agent_names[agent_id])
                # A seat is an agent that acted or was paid in the episode (a turn-based game can
                # end before the second player's first turn).
                seats += [
                    (self.table.ids[b], r)
                    for b, r, n in zip(binding_of.tolist(), returns[e].tolist(), lengths[e].tolist())
                    if n > 0 or r != 0
                ]
                returns[e] = 0
                lengths[e] = 0
                for last in self.info_last[g.name].values():
                    last[e] = float("nan")
            per_binding: dict[str, set[str]] = {}
            for binding_id, outcome in seat_outcomes(seats, self.winner):
                self.outcomes[binding_id].append(outcome)
                per_binding.setdefault(binding_id, set()).add(outcome)
            record.outcomes.update({b: next(iter(o)) for b, o in per_binding.items() if len(o) == 1})
            for agents in record.seats.values():
                agents.sort(key=self.agent_names.index)
            self.episodes.append(record)


def seat_outcomes(seats: list[tuple[str, float]], winner: WinRule) -> list[tuple[str, str]]:
    """``(binding id, "win" / "draw" / "loss")`` of every seat of one episode, in order.

    Counted per seat so that neither a draw nor a mirror match lies. ``positive_return``: a
    seat's own return decides (``> 0`` win, ``0`` draw, ``< 0`` loss), so a drawn game is a draw
    for both sides, not a loss for both. ``highest_return``: the sides are the bindings (the
    mean return of their seats) and the side with the strictly highest return wins, a tie for
    highest draws; where one binding plays every seat (against itself) the sides are the seats,
    so a decided game is one seat won and one lost, not a game won.

    Args:
        seats: ``(binding id, return)`` of every agent that played the episode.
        winner: the rule (``none``: no outcomes).
    """
    if winner == "none" or not seats:
        return []
    if winner == "positive_return":
        return [(b, "win" if r > 0 else "loss" if r < 0 else "draw") for b, r in seats]
    sides: dict[str, list[float]] = {}
    for b, r in seats:
        sides.setdefault(b, []).append(r)
    if len(sides) > 1:
        side_return = {b: sum(rs) / len(rs) for b, rs in sides.items()}
        scores, side_scores = [side_return[b] for b, _ in seats], list(side_return.values())
    else:
        scores = side_scores = [r for _, r in seats]
    best = max(side_scores)
    top = "win" if side_scores.count(best) == 1 else "draw"
    return [(b, top if s == best else "loss") for (b, _), s in zip(seats, scores)]
