"""Evaluation scenarios as written in a recipe's ``evaluation:`` section, and their expansion into mixes.

A *scenario* is a named mix: which binding controls which agent, how many episodes, from
which seed, with mode or sampled actions, with or without a video. Three generators write many
mixes at once:

* [`HeadToHeadConfig`][lightmarl.evaluation.scenarios.HeadToHeadConfig]: every pair of a list of bindings (or every player against every
  opponent, e.g. every trained binding against every scripted or frozen one), each pair played
  with the seats swapped, on a two-sided (battle) env;
* [`ReplaceOneAgentConfig`][lightmarl.evaluation.scenarios.ReplaceOneAgentConfig]: a team, then the same team with one agent at a time handed to
  another binding; the change of the team's return is reported with an interval;
* [`ScenarioConfig`][lightmarl.evaluation.scenarios.ScenarioConfig]: one mix written out (per-env maps allowed).

`plan_scenarios` checks them against the population and the env (unknown binding, agent
not in the env, zero episodes: one line naming the field) and expands them into
`PlannedScenario` objects that `lightmarl.evaluation.suite` plays.

Examples:
    >>> config = EvaluationConfig(head_to_head=[HeadToHeadConfig(name="league", players=["a", "b", "c"], episodes=4)])
    >>> (scenario,) = plan_scenarios(config, {"a": True, "b": True, "c": False}, ["player_0", "player_1"])
    >>> [(mix.home, mix.away) for mix in scenario.mixes]
    [('a', 'b'), ('b', 'a'), ('a', 'c'), ('c', 'a'), ('b', 'c'), ('c', 'b')]
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from lightmarl.evaluation.best_response import BestResponseConfig
from lightmarl.evaluation.episodes import WinRule
from lightmarl.evaluation.statistics import IntervalMethod
from lightmarl.population import PerEnvAgentBindingMap, PolicyBindingConfig

ScenarioKind = Literal["mix", "head_to_head", "replace_one_agent"]

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_WINNERS = ("none", "highest_return", "positive_return")


#: recipe keys of the validation episodes before they joined the ``evaluation:`` section -> their keys now.
MOVED_SETTINGS = {
    "model.eval_episodes": "evaluation.validation.episodes",
    "model.eval_num_envs": "evaluation.validation.num_envs",
    "model.eval_seed": "evaluation.validation.seed",
    "model.eval_deterministic": "evaluation.validation.deterministic",
    "model.eval_winner": "evaluation.validation.winner",
    "model.eval_video_episodes": "evaluation.validation.video_episodes",
}


def moved_setting(message: str) -> str | None:
    """A parser error about a key of `MOVED_SETTINGS` as one line naming the key to use instead, else ``None``."""
    for old, new in MOVED_SETTINGS.items():
        if re.search(rf"(?<![\w.]){re.escape(old)}(?!\w)", message):
            return f"{old}: the validation episodes are set in the evaluation: section; use {new}"
    return None


@dataclass
class ValidationConfig:
    """``evaluation.validation``: the seeded episodes of the recipe's own seating that ``validation_step``
    (after every ``fit`` epoch, ``lightmarl validate``) and ``test_step`` play, logged as
    ``eval/<binding>/...`` / ``test/<binding>/...`` (`lightmarl.evaluation.validation`).

    Attributes:
        episodes: episodes per validation / test run.
        num_envs: env copies played at once (default: ``env.num_envs``).
        seed: base seed of the env copies (same start states every evaluation; rank ``r`` of a
            multi-process run adds ``1000 * r``).
        deterministic: take each policy's mode action instead of sampling. Bindings of
            continuous-action groups are then also played with sampled actions, on the same seeded
            episodes, logged with a ``_sampled`` suffix (``eval/<binding>/episode_return_sampled``).
        winner: adds ``win_rate`` / ``draw_rate`` per binding: ``highest_return`` for head-to-head
            play (the binding with the strictly highest mean return wins), ``positive_return`` for
            games that pay a positive return for a win, zero for a draw and a negative one for a
            loss, or ``none``.
        video_episodes: after each evaluation, rank 0 also plays this many episodes in one env copy
            built with ``render_mode="rgb_array"`` and writes them to
            ``<log_dir>/videos/<eval|test>_iter<iterations>.gif`` (0: no video); see
            `lightmarl.evaluation.video`.
    """

    episodes: int = 32
    num_envs: int | None = None
    seed: int = 10_000
    deterministic: bool = True
    winner: WinRule = "none"
    video_episodes: int = 0

    def __post_init__(self) -> None:
        where = "evaluation.validation"
        if isinstance(self.episodes, bool) or not isinstance(self.episodes, int) or self.episodes < 1:
            raise ValueError(f"{where}.episodes: expected a positive integer, got {self.episodes!r}")
        num_envs = self.num_envs
        if num_envs is not None and (isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1):
            raise ValueError(f"{where}.num_envs: expected a positive integer or null (the default), got {num_envs!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"{where}.seed: expected an integer, got {self.seed!r}")
        if self.winner not in _WINNERS:
            raise ValueError(f"{where}.winner: {self.winner!r} is not one of {list(_WINNERS)}")
        video = self.video_episodes
        if isinstance(video, bool) or not isinstance(video, int) or video < 0:
            raise ValueError(f"{where}.video_episodes: expected an integer >= 0, got {video!r}")


@dataclass
class ScenarioConfig:
    """One named mix.

    Attributes:
        name: the scenario's name (letters, digits, ``_.-``): metrics are logged as
            ``eval/<name>/<binding>/...``.
        agent_binding_map: binding id per agent, or ``{default: [...], per_env: {copy: [...]}}``
            (per-env copies beyond ``num_envs`` are not played).
        episodes: episodes to play.
        seed: base seed of the env copies (copy ``i`` is reset with ``seed + i``).
        deterministic: take each policy's mode action instead of sampling.
        winner: how win / draw / loss are decided (``none``, ``highest_return``, ``positive_return``).
        num_envs: env copies played at once (default: ``min(episodes, env.num_envs)``).
        video: also write a GIF of this scenario (``evaluation.video_episodes`` episodes).
    """

    name: str
    agent_binding_map: list[str] | PerEnvAgentBindingMap
    episodes: int = 32
    seed: int = 10_000
    deterministic: bool = True
    winner: WinRule = "none"
    num_envs: int | None = None
    video: bool = False


@dataclass
class HeadToHeadConfig:
    """Pairs of bindings on a two-sided env, every pair played from both sides (seats swapped).

    Attributes:
        name: the scenario's name; its payoff matrix and Elo ratings cover every pair.
        players: the bindings (default: every trainable binding).
        opponents: ``null``: every pair among ``players``; a list: every player against every
            opponent; ``frozen``: every player against every non-trainable binding (scripted,
            frozen or loaded from a checkpoint).
        sides: the agents of each of the two sides, e.g. ``[[red_0, red_1], [blue_0, blue_1]]``
            (default: a two-agent env's agents, one each).
        episodes: episodes per pair and seating (a pair plays ``2 * episodes``).
        seed: base seed of the env copies; every seating starts from the same states.
        deterministic: take each policy's mode action instead of sampling.
        winner: ``highest_return`` (the side with the higher return wins) or
            ``positive_return`` (a positive return is a win, zero a draw).
        num_envs: env copies played at once (default: ``min(episodes, env.num_envs)``).
        video: also write a GIF of the first pair's first seating.
    """

    name: str
    players: list[str] | None = None
    opponents: list[str] | Literal["frozen"] | None = None
    sides: list[list[str]] | None = None
    episodes: int = 32
    seed: int = 10_000
    deterministic: bool = True
    winner: Literal["highest_return", "positive_return"] = "highest_return"
    num_envs: int | None = None
    video: bool = False


@dataclass
class ReplaceOneAgentConfig:
    """A team, then the team with one agent handed to ``replacement``; reports the change of the team's return.

    Attributes:
        name: the scenario's name; the unchanged team is scenario ``<name>``, the team with
            agent ``a`` replaced is ``<name>/<a>_by_<replacement>``.
        replacement: the binding that takes one agent's place.
        team: binding id per agent of the unchanged team (default: the recipe's map).
        team_agents: the agents whose mean return is the team's return (default: every agent).
        agents: the agents replaced, one at a time (default: ``team_agents``).
        episodes: episodes per mix.
        seed: base seed of the env copies; every mix starts from the same states.
        deterministic: take each policy's mode action instead of sampling.
        num_envs: env copies played at once (default: ``min(episodes, env.num_envs)``).
        video: also write a GIF of the unchanged team and of each replacement.
    """

    name: str
    replacement: str
    team: list[str] | None = None
    team_agents: list[str] | None = None
    agents: list[str] | None = None
    episodes: int = 32
    seed: int = 10_000
    deterministic: bool = True
    num_envs: int | None = None
    video: bool = False


@dataclass
class EvaluationConfig:
    """The ``evaluation:`` section of a recipe: validation episodes, scenarios, generators, extra bindings, periodic evaluation.

    Attributes:
        validation: the episodes ``validation_step`` and ``test_step`` play with the recipe's own
            seating (``lightmarl validate`` / ``test``, and after every ``fit`` epoch).
        bindings: bindings that play only in evaluation, beside the recipe's: scripted
            (``class_path``), from a checkpoint (``policy_uri: run.ckpt#binding``) or an exported
            directory (``policy_uri: DIR#binding``); always frozen.
        scenarios: named mixes written out.
        head_to_head: head-to-head generators (battle envs).
        replace_one_agent: "replace one agent" generators (team envs).
        every_n_frames: during ``lightmarl fit``, evaluate every this many training frames
            (rank 0; metrics ``eval/<scenario>/<binding>/...``, so ``ModelCheckpoint(monitor=...)``
            can keep the best checkpoint); ``null``: only ``lightmarl evaluate``.
        interval: interval of the means, ``t`` or ``bootstrap``.
        confidence: coverage of every interval.
        video_episodes: episodes in each scenario's video.
        episodes: play this many episodes per mix in every scenario instead of their own counts
            (e.g. ``--evaluation.episodes 2`` for a quick check of a recipe's scenarios).
        out_dir: where ``lightmarl evaluate`` writes the report, plots and videos (default:
            ``<run dir>/evaluation``).
        exploitability: bindings whose exact exploitability and NashConv the evaluation reports
            (``report.json``'s ``exploitability``; ``eval/exploitability/<binding>``), for
            two-player zero-sum OpenSpiel games (``lightmarl.evaluation.exploitability``): each
            binding's own weights.
        best_response: approximate exploitability (`lightmarl.evaluation.best_response`):
            best responses trained by ``lightmarl evaluate`` against a frozen binding or the
            league mixture it shows, with the recipe's network and algorithm (an entry's
            ``algorithm`` changes fields of it for the best response alone), and the return they
            earn against it.
    """

    validation: ValidationConfig = field(default_factory=ValidationConfig)
    bindings: list[PolicyBindingConfig] = field(default_factory=list)
    scenarios: list[ScenarioConfig] = field(default_factory=list)
    head_to_head: list[HeadToHeadConfig] = field(default_factory=list)
    replace_one_agent: list[ReplaceOneAgentConfig] = field(default_factory=list)
    every_n_frames: int | None = None
    interval: IntervalMethod = "t"
    confidence: float = 0.95
    video_episodes: int = 1
    episodes: int | None = None
    out_dir: str | None = None
    exploitability: list[str] = field(default_factory=list)
    best_response: list[BestResponseConfig] = field(default_factory=list)

    @property
    def names_scenarios(self) -> bool:
        """Whether the section names anything for ``lightmarl evaluate`` to play besides the validation episodes."""
        return bool(
            self.scenarios or self.head_to_head or self.replace_one_agent or self.exploitability or self.best_response
        )


@dataclass(frozen=True)
class Mix:
    """One seating of a scenario: the map played and, head-to-head, who is on which side.

    Attributes:
        agent_binding_map: binding id per agent, or a per-env map.
        home: the binding on the first side (head-to-head), results are counted from its side.
        away: the binding on the second side (head-to-head).
    """

    agent_binding_map: list[str] | Mapping[str, Any]
    home: str | None = None
    away: str | None = None


@dataclass(frozen=True)
class PlannedScenario:
    """A scenario ready to play: its mixes and settings.

    Attributes:
        name: the scenario's name (metrics ``eval/<name>/...``).
        kind: ``mix``, ``head_to_head`` or ``replace_one_agent``.
        mixes: the seatings, each played for ``episodes`` episodes.
        episodes: episodes per mix.
        seed: base seed of the env copies of every mix.
        deterministic: mode actions instead of sampled ones.
        winner: the win rule.
        num_envs: env copies at once (``None``: ``min(episodes, env.num_envs)``).
        video: write a GIF of the first mix.
        team_agents: replace-one-agent: the agents whose mean return is the team's return.
        baseline: replace-one-agent: the scenario of the unchanged team (``None`` for that one).
        replaced: replace-one-agent: the agent handed to another binding.
    """

    name: str
    kind: ScenarioKind
    mixes: tuple[Mix, ...]
    episodes: int
    seed: int
    deterministic: bool
    winner: WinRule
    num_envs: int | None
    video: bool
    team_agents: tuple[str, ...] | None = None
    baseline: str | None = None
    replaced: str | None = None

    @property
    def bindings(self) -> list[str]:
        """Every binding some mix of this scenario uses, in first-use order."""
        return list(dict.fromkeys(b for mix in self.mixes for b in _map_bindings(mix.agent_binding_map)))

    def describe(self) -> dict[str, Any]:
        """The scenario's settings, as the report stores them."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "mixes": [_plain_map(mix.agent_binding_map) for mix in self.mixes],
            "episodes_per_mix": self.episodes,
            "seed": self.seed,
            "deterministic": self.deterministic,
            "winner": self.winner,
        }
        if self.team_agents is not None:
            out["team_agents"] = list(self.team_agents)
            out["baseline"] = self.baseline
            out["replaced"] = self.replaced
        return out


def _map_bindings(agent_map: list[str] | Mapping[str, Any]) -> list[str]:
    if isinstance(agent_map, Mapping):
        maps = [agent_map.get("default") or [], *(agent_map.get("per_env") or {}).values()]
        return [b for m in maps for b in m]
    return list(agent_map)


def _plain_map(agent_map: list[str] | Mapping[str, Any]) -> list[str] | dict[str, Any]:
    if isinstance(agent_map, Mapping):
        per_env = {str(k): list(v) for k, v in (agent_map.get("per_env") or {}).items()}
        default = agent_map.get("default")
        return {"default": None if default is None else list(default), "per_env": per_env}
    return list(agent_map)


def _check_common(where: str, name: str, episodes: Any, num_envs: Any) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{where}.name: {name!r} is not a scenario name; use letters, digits, '_', '.' and '-'")
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"{where}.episodes: expected a positive number of episodes, got {episodes!r}")
    if num_envs is not None and (isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1):
        raise ValueError(f"{where}.num_envs: expected a positive integer or null, got {num_envs!r}")


def _check_bindings(where: str, ids: Sequence[str], known: Mapping[str, bool]) -> None:
    for binding_id in ids:
        if binding_id not in known:
            raise ValueError(f"{where}: unknown binding {binding_id!r}; bindings are {sorted(known)}")


def _check_agents(where: str, names: Sequence[str], agents: Sequence[str]) -> None:
    for agent in names:
        if agent not in agents:
            raise ValueError(f"{where}: agent {agent!r} is not in the env; its agents are {list(agents)}")


def plan_scenarios(
    config: EvaluationConfig,
    bindings: Mapping[str, bool],
    agents: Sequence[str],
    default_map: Sequence[str] | None = None,
) -> list[PlannedScenario]:
    """Check ``config`` and expand its scenarios and generators, in the order written.

    Args:
        config: the ``evaluation:`` section.
        bindings: every binding id that can play (the recipe's and ``config.bindings``) ->
            whether it is trainable.
        agents: the env's agents (``possible_agents``).
        default_map: the recipe's map (binding per agent), the default team of
            [`ReplaceOneAgentConfig`][lightmarl.evaluation.scenarios.ReplaceOneAgentConfig].

    Raises:
        ValueError: naming the field (``evaluation.head_to_head[0].players``, ...) and the bad value.
    """
    for key, value in (
        ("every_n_frames", config.every_n_frames),
        ("video_episodes", config.video_episodes),
        ("episodes", config.episodes),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"evaluation.{key}: expected a positive integer, got {value!r}")
    if not 0.0 < config.confidence < 1.0:
        raise ValueError(
            f"evaluation.confidence: expected a number strictly between 0 and 1, got {config.confidence!r}"
        )
    planned: list[PlannedScenario] = []
    for i, scenario in enumerate(config.scenarios):
        planned.append(_plan_mix(f"evaluation.scenarios[{i}]", scenario, bindings, agents))
    for i, h2h in enumerate(config.head_to_head):
        planned.append(_plan_head_to_head(f"evaluation.head_to_head[{i}]", h2h, bindings, agents))
    for i, replace in enumerate(config.replace_one_agent):
        planned += _plan_replace_one(f"evaluation.replace_one_agent[{i}]", replace, bindings, agents, default_map)
    if config.episodes is not None:
        planned = [dataclasses.replace(scenario, episodes=config.episodes) for scenario in planned]
    names = [scenario.name for scenario in planned]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"evaluation: scenario names {repeated} are used twice; give each scenario its own name")
    return planned


def _plan_mix(
    where: str, scenario: ScenarioConfig, bindings: Mapping[str, bool], agents: Sequence[str]
) -> PlannedScenario:
    _check_common(where, scenario.name, scenario.episodes, scenario.num_envs)
    if scenario.winner not in _WINNERS:
        raise ValueError(f"{where}.winner: {scenario.winner!r} is not one of {list(_WINNERS)}")
    agent_map = scenario.agent_binding_map
    maps = (
        [agent_map.get("default"), *(agent_map.get("per_env") or {}).values()]
        if isinstance(agent_map, Mapping)
        else [agent_map]
    )
    for agent_list in maps:
        if agent_list is None:
            continue
        if len(agent_list) != len(agents):
            raise ValueError(
                f"{where}.agent_binding_map: expected one binding id per agent ({len(agents)} agents: "
                f"{list(agents)}), got {len(agent_list)} entries {list(agent_list)}"
            )
        _check_bindings(f"{where}.agent_binding_map", agent_list, bindings)
    return _planned(scenario, "mix", [Mix(agent_map)])


def _planned(config: ScenarioConfig | HeadToHeadConfig, kind: ScenarioKind, mixes: Sequence[Mix]) -> PlannedScenario:
    return PlannedScenario(
        name=config.name,
        kind=kind,
        mixes=tuple(mixes),
        episodes=config.episodes,
        seed=config.seed,
        deterministic=config.deterministic,
        winner=config.winner,
        num_envs=config.num_envs,
        video=config.video,
    )


def _plan_head_to_head(
    where: str, h2h: HeadToHeadConfig, bindings: Mapping[str, bool], agents: Sequence[str]
) -> PlannedScenario:
    _check_common(where, h2h.name, h2h.episodes, h2h.num_envs)
    if h2h.winner not in ("highest_return", "positive_return"):
        raise ValueError(f"{where}.winner: {h2h.winner!r} is not one of ['highest_return', 'positive_return']")
    players = list(h2h.players) if h2h.players is not None else [b for b, trainable in bindings.items() if trainable]
    _check_bindings(f"{where}.players", players, bindings)
    if h2h.opponents is None:
        pairs = list(itertools.combinations(dict.fromkeys(players), 2))
    else:
        opponents = (
            [b for b, trainable in bindings.items() if not trainable]
            if h2h.opponents == "frozen"
            else list(h2h.opponents)
        )
        _check_bindings(f"{where}.opponents", opponents, bindings)
        pairs = [(p, o) for p in dict.fromkeys(players) for o in dict.fromkeys(opponents) if p != o]
    if not pairs:
        raise ValueError(
            f"{where}: no pair of distinct bindings to play (players {players}, opponents {h2h.opponents!r}); "
            "a head-to-head needs two bindings"
        )
    sides = [list(side) for side in h2h.sides] if h2h.sides is not None else [[agent] for agent in agents]
    if len(sides) != 2:
        raise ValueError(
            f"{where}.sides: a head-to-head has two sides; the env has agents {list(agents)}: "
            "name the agents of each side, e.g. sides: [[agent_a], [agent_b]]"
        )
    for side in sides:
        _check_agents(f"{where}.sides", side, agents)
    covered = [a for side in sides for a in side]
    if sorted(covered) != sorted(agents):
        raise ValueError(
            f"{where}.sides: every agent of the env is on exactly one side; sides {sides}, agents {list(agents)}"
        )
    side_of = {agent: s for s, side in enumerate(sides) for agent in side}
    mixes = []
    for a, b in pairs:
        for home, away in ((a, b), (b, a)):
            mixes.append(Mix([home if side_of[agent] == 0 else away for agent in agents], home, away))
    return _planned(h2h, "head_to_head", mixes)


def _plan_replace_one(
    where: str,
    replace: ReplaceOneAgentConfig,
    bindings: Mapping[str, bool],
    agents: Sequence[str],
    default_map: Sequence[str] | None,
) -> list[PlannedScenario]:
    _check_common(where, replace.name, replace.episodes, replace.num_envs)
    _check_bindings(f"{where}.replacement", [replace.replacement], bindings)
    team = list(replace.team) if replace.team is not None else list(default_map or [])
    if len(team) != len(agents):
        raise ValueError(
            f"{where}.team: expected one binding id per agent ({len(agents)} agents: {list(agents)}), "
            f"got {len(team)} entries {team}"
        )
    _check_bindings(f"{where}.team", team, bindings)
    team_agents = list(replace.team_agents) if replace.team_agents is not None else list(agents)
    _check_agents(f"{where}.team_agents", team_agents, agents)
    replaced = list(replace.agents) if replace.agents is not None else team_agents
    _check_agents(f"{where}.agents", replaced, agents)
    if not team_agents or not replaced:
        raise ValueError(f"{where}: team_agents and agents name at least one agent each")
    settings: dict[str, Any] = {
        "episodes": replace.episodes,
        "seed": replace.seed,
        "deterministic": replace.deterministic,
        "winner": "none",
        "num_envs": replace.num_envs,
        "video": replace.video,
        "team_agents": tuple(team_agents),
    }
    planned = [PlannedScenario(name=replace.name, kind="replace_one_agent", mixes=(Mix(team),), **settings)]
    for agent in dict.fromkeys(replaced):
        changed = [replace.replacement if a == agent else b for a, b in zip(agents, team)]
        planned.append(
            PlannedScenario(
                name=f"{replace.name}/{agent}_by_{replace.replacement}",
                kind="replace_one_agent",
                mixes=(Mix(changed),),
                baseline=replace.name,
                replaced=agent,
                **settings,
            )
        )
    return planned
