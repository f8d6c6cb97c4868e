"""Playing a recipe's evaluation scenarios: policies, episodes, statistics, report, logged metrics, videos.

`EvaluationSuite` checks an [`EvaluationConfig`][lightmarl.evaluation.scenarios.EvaluationConfig]
against the population and the env when it is built (before any env step), and
`EvaluationSuite.run` plays every planned scenario and returns an
`EvaluationResult`: the versioned JSON report (`lightmarl.evaluation.report`) and
the flat ``eval/<scenario>/<binding>/<metric>`` values for Lightning's loggers.
`write_outputs` writes the report, its Markdown summary and its PNGs.

Evaluation leaves the caller's state as it found it: the recipe's neural policies are played
as copies, scripted ones are built afresh (their own generators start from their seeds in every
evaluation), every scenario plays in env copies of its own, and the torch, numpy and Python
random streams are restored afterwards (`preserved_rng`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from lightmarl.envs.config import EnvConfig
from lightmarl.evaluation.best_response import check_best_response
from lightmarl.evaluation.episodes import EpisodeRecord, play_episodes
from lightmarl.evaluation.exploitability import (
    OpenSpielGame,
    measure,
    mixture_policy,
    openspiel_game_of,
    tabular_policy,
)
from lightmarl.evaluation.head_to_head import Game
from lightmarl.evaluation.plots import file_stem, plot_report
from lightmarl.evaluation.report import Report, build_report, markdown_summary, write_report
from lightmarl.evaluation.scenarios import EvaluationConfig, PlannedScenario, plan_scenarios
from lightmarl.evaluation.statistics import ScenarioEpisodes, difference_interval, summarize_values
from lightmarl.evaluation.video import write_evaluation_video
from lightmarl.policies.base import Policy, ScriptedPolicy
from lightmarl.policies.multi_agent import MultiAgentPolicy
from lightmarl.policies.registry import PolicyRegistry
from lightmarl.population import BindingTable, PolicyBinding
from lightmarl.population.bindings import DEFAULT_LOSS_PROFILE, as_binding
from lightmarl.trust import recipe_class_paths

log = logging.getLogger(__name__)


@contextlib.contextmanager
def preserved_rng(devices: Sequence[torch.device] = ()) -> Iterator[None]:
    """Run the block with the torch (CPU and ``devices``' CUDA), numpy and Python random streams restored after it."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    cuda = [d.index if d.index is not None else torch.cuda.current_device() for d in devices if d.type == "cuda"]
    try:
        with torch.random.fork_rng(devices=cuda):
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


@dataclass
class EvaluationResult:
    """What one evaluation produced.

    Attributes:
        report: the JSON-ready report (schema ``report.schema.json``).
        logs: ``eval/<scenario>/<binding>/<metric>`` (and ``eval/<scenario>/team/...``) -> value.
        videos: scenario name -> the video written.
    """

    report: Report
    logs: dict[str, float]
    videos: dict[str, Path] = field(default_factory=dict)


class EvaluationSuite:
    """A recipe's evaluation scenarios, checked and ready to play.

    Args:
        config: the ``evaluation:`` section.
        env_config: the recipe's env.
        bindings: the recipe's bindings (the ``evaluation.bindings`` join them, frozen).
        default_map: the recipe's agent -> binding map (the default team of replace-one-agent).

    Raises:
        ValueError: a bad scenario (unknown binding, agent not in the env, zero episodes, a mix
            a binding cannot play), naming the field.
    """

    def __init__(
        self,
        config: EvaluationConfig,
        env_config: EnvConfig,
        bindings: Sequence[PolicyBinding],
        default_map: Sequence[str] | None = None,
    ) -> None:
        self.config = config
        self.env_config = env_config
        self.env_spec = env_config.spec()
        extra = []
        for i, spec in enumerate(config.bindings):
            try:
                extra.append(dataclasses.replace(as_binding(dict(spec)), trainable=False))
            except ValueError as err:
                raise ValueError(f"evaluation.bindings[{i}]: {err}") from None
        known = {b.id for b in bindings}
        clash = sorted(known & {b.id for b in extra})
        if clash:
            raise ValueError(f"evaluation.bindings: ids {clash} are already bindings of the recipe; rename them")
        # Evaluation runs no loss: every binding carries the default profile.
        self.bindings = {b.id: dataclasses.replace(b, loss_profile=DEFAULT_LOSS_PROFILE) for b in [*bindings, *extra]}
        trainable = {b.id: b.trainable for b in self.bindings.values()}
        self.scenarios = plan_scenarios(config, trainable, self.env_spec.possible_agents, default_map)
        self._spiel: OpenSpielGame | None = None
        if config.exploitability:
            unknown = [b for b in config.exploitability if b not in self.bindings]
            if unknown:
                raise ValueError(
                    f"evaluation.exploitability: bindings {unknown} are not bindings of the recipe or of "
                    f"evaluation.bindings ({sorted(self.bindings)})"
                )
            try:
                self._spiel = openspiel_game_of(env_config)
            except (ValueError, ImportError) as err:
                raise ValueError(f"evaluation.exploitability: {err}") from None
        check_best_response(config.best_response, {b.id: b.trainable for b in bindings}, [b.id for b in extra])
        # Each mix builds its table now: a binding that controls agents of two groups, a per-env
        # index out of range, ... fail before training.
        self._tables = {
            (scenario.name, i): self._table(scenario, i)
            for scenario in self.scenarios
            for i in range(len(scenario.mixes))
        }
        # Evaluation-only policy_uri bindings are loaded once now: a file that is missing or does not
        # fit the env fails before any checkpoint is read or episode played. (Each run builds its own.)
        self._allowed = recipe_class_paths(list(self.bindings.values()))
        loaded = {b.id for b in extra if b.policy_uri is not None}
        for table in self._tables.values():
            for binding_id, group in sorted(table.group_of_binding.items()):
                if binding_id in loaded:
                    try:
                        PolicyRegistry(self.env_config.transforms, self._allowed).get(
                            self.bindings[binding_id], self.env_spec.groups[group]
                        )
                    except ValueError as err:
                        raise ValueError(f"evaluation.bindings: {err}") from None

    def _table(self, scenario: PlannedScenario, index: int) -> BindingTable:
        mix = scenario.mixes[index]
        used = scenario.bindings
        try:
            return BindingTable(
                [self.bindings[b] for b in used],
                self.env_spec,
                mix.agent_binding_map,  # type: ignore[arg-type]
                num_envs=self._num_envs(scenario),
            )
        except ValueError as err:
            raise ValueError(f"evaluation scenario {scenario.name!r}: {err}") from None

    def _num_envs(self, scenario: PlannedScenario) -> int:
        return scenario.num_envs or min(scenario.episodes, self.env_config.num_envs)

    @property
    def names(self) -> list[str]:
        """The planned scenarios' names."""
        return [scenario.name for scenario in self.scenarios]

    def _policies(self, live: Mapping[str, nn.Module], device: torch.device) -> dict[tuple[str, str], Policy]:
        """(binding id, group) -> policy for every binding the scenarios use: copies of the live neural
        policies, fresh builds of the others (scripted policies, evaluation bindings)."""
        used = {(b, group) for table in self._tables.values() for b, group in table.group_of_binding.items()}
        copied = {
            b: p
            for b, p in live.items()
            if not isinstance(p, ScriptedPolicy) and (b, cast(Policy, p).group.name) in used
        }
        # One deepcopy of them all: modules shared between bindings stay shared in the copies.
        clones = cast(dict[str, Policy], dict(copy.deepcopy(nn.ModuleDict(copied)).items()) if copied else {})
        policies = {(b, p.group.name): p for b, p in clones.items()}
        # Loaded policies see inputs as in their own runs; files name only classes the recipe allows.
        registry = PolicyRegistry(self.env_config.transforms, self._allowed)
        for binding_id, group in sorted(used - set(policies)):
            if binding_id in live and self.bindings[binding_id].trainable:
                raise ValueError(
                    f"evaluation: trainable binding {binding_id!r} plays agents of group {group!r} in a scenario, "
                    "but it learns for another group"
                )
            policies[(binding_id, group)] = registry.get(self.bindings[binding_id], self.env_spec.groups[group])
        for policy in policies.values():
            policy.to(device).eval().requires_grad_(False)
        return policies

    def run(
        self,
        live: Mapping[str, nn.Module],
        device: torch.device | str = "cpu",
        step_count: int = 0,
        run: str = "seed_0",
        video_dir: str | Path | None = None,
        metadata: Mapping[str, Any] | None = None,
        mixtures: Mapping[str, Sequence[tuple[Mapping[str, torch.Tensor], float]]] | None = None,
    ) -> EvaluationResult:
        """Play every scenario and summarise it.

        Args:
            live: binding id -> the recipe's current policy (e.g. ``module.policies``); read, never changed.
            device: where the policies act.
            step_count: frames the policies were trained for (stored in the report).
            run: the run's name in the report (``seed_<training seed>``).
            video_dir: where scenarios with ``video: true`` write ``<scenario>.gif`` (``None``: no videos).
            metadata: free-form context stored in the report.
            mixtures: binding id -> the league mixture it shows (each member's weights for the
                binding's policy, and its meta weight): ``evaluation.exploitability`` measures the
                mixture of such a binding, as training did, and reports its live weights' beside it.
        """
        device = torch.device(device)
        with preserved_rng([device]), torch.no_grad():
            policies = self._policies(live, device)
            episodes: dict[str, ScenarioEpisodes] = {}
            games: dict[str, list[Game]] = {}
            team_returns: dict[str, list[float]] = {}
            videos: dict[str, Path] = {}
            for scenario in self.scenarios:
                records: list[tuple[int, EpisodeRecord]] = []
                for i in range(len(scenario.mixes)):
                    table = self._tables[(scenario.name, i)]
                    population = MultiAgentPolicy(
                        {b: policies[(b, group)] for b, group in table.group_of_binding.items()}, table
                    )
                    torch.manual_seed(scenario.seed)  # sampled actions: the same draws in every evaluation
                    played = play_episodes(
                        population,
                        self.env_config,
                        scenario.episodes,
                        scenario.seed,
                        num_envs=self._num_envs(scenario),
                        deterministic=scenario.deterministic,
                        device=device,
                        winner=scenario.winner,
                    )
                    records += [(i, record) for record in played]
                    if i == 0 and scenario.video and video_dir is not None:
                        videos[scenario.name] = write_evaluation_video(
                            population,
                            self.env_config,
                            Path(video_dir) / f"{file_stem(scenario.name)}.gif",
                            num_episodes=self.config.video_episodes,
                            seed=scenario.seed,
                            deterministic=scenario.deterministic,
                            device=device,
                        )
                episodes[scenario.name] = scenario_episodes(scenario, [r for _, r in records])
                if scenario.kind == "head_to_head":
                    games[scenario.name] = head_to_head_games(scenario, records)
                if scenario.team_agents is not None:
                    team_returns[scenario.name] = [
                        float(np.mean([record.agent_returns[a] for a in scenario.team_agents])) for _, record in records
                    ]
        teams = {
            scenario.name: team_summary(scenario, team_returns, self.config.confidence)
            for scenario in self.scenarios
            if scenario.team_agents is not None
        }
        with torch.no_grad():
            exploitability = self._exploitability(live, device, mixtures or {})
        report = build_report(
            episodes,
            env_name=self.env_config.name,
            head_to_head_games=games,
            run=run,
            step_count=step_count,
            confidence=self.config.confidence,
            interval=self.config.interval,
            metadata=metadata,
            setups={scenario.name: scenario.describe() for scenario in self.scenarios},
            teams=teams,
        )
        if exploitability:
            report["exploitability"] = exploitability
        return EvaluationResult(report, report_logs(report), videos)

    def _exploitability(
        self,
        live: Mapping[str, nn.Module],
        device: torch.device,
        mixtures: Mapping[str, Sequence[tuple[Mapping[str, torch.Tensor], float]]],
    ) -> dict[str, dict[str, Any]]:
        """``evaluation.exploitability``: binding -> exact exploitability and NashConv of its policy
        (of the league mixture it shows, where ``mixtures`` has one)."""
        if self._spiel is None:
            return {}
        out = {}
        registry = PolicyRegistry()
        for binding_id in self.config.exploitability:
            policy = live.get(binding_id)
            group = (
                cast(Policy, policy).group.name
                if policy is not None
                else next(iter(self.env_spec.groups))  # an OpenSpiel env has one group
            )
            if policy is None:
                policy = registry.get(self.bindings[binding_id], self.env_spec.groups[group]).to(device)
            value = measure(self._spiel, tabular_policy(self._spiel, policy, group))
            out[binding_id] = {
                "game": self._spiel.name,
                "exploitability": value.exploitability,
                "nash_conv": value.nash_conv,
            }
            members = mixtures.get(binding_id)
            if members:
                scratch = copy.deepcopy(policy)
                tables = []
                for weights, _ in members:
                    scratch.load_state_dict(weights)
                    tables.append(tabular_policy(self._spiel, scratch, group))
                mixed = measure(self._spiel, mixture_policy(self._spiel, tables, [w for _, w in members]))
                out[binding_id] = {
                    "game": self._spiel.name,
                    "policy": f"league mixture of {len(members)}",
                    "exploitability": mixed.exploitability,
                    "nash_conv": mixed.nash_conv,
                    "live_exploitability": value.exploitability,
                }
        return out


def scenario_episodes(scenario: PlannedScenario, records: Sequence[EpisodeRecord]) -> ScenarioEpisodes:
    """Per-binding episode lists of a scenario's records; outcomes (and seats) for bindings that have one in every episode."""
    returns: dict[str, list[float]] = {}
    lengths: dict[str, list[float]] = {}
    outcomes: dict[str, list[str | None]] = {}
    seats: dict[str, list[str]] = {}
    info: dict[str, dict[str, list[float]]] = {}
    for record in records:
        for binding_id, value in record.returns.items():
            returns.setdefault(binding_id, []).append(value)
            lengths.setdefault(binding_id, []).append(float(record.lengths[binding_id]))
            outcomes.setdefault(binding_id, []).append(record.outcomes.get(binding_id))
            seats.setdefault(binding_id, []).append("+".join(record.seats[binding_id]))
            for name, field_value in record.info.get(binding_id, {}).items():
                info.setdefault(binding_id, {}).setdefault(name, []).append(field_value)
    decided = {b: [str(o) for o in o_list] for b, o_list in outcomes.items() if all(o is not None for o in o_list)}
    if scenario.winner == "none" or not decided:
        return ScenarioEpisodes(returns, lengths, info=info or None)
    return ScenarioEpisodes(returns, lengths, decided, {b: seats[b] for b in decided}, info=info or None)


def head_to_head_games(scenario: PlannedScenario, records: Sequence[tuple[int, EpisodeRecord]]) -> list[Game]:
    """``(home, away, home's result)`` of every decided episode of a head-to-head scenario, in the order played."""
    games: list[Game] = []
    for i, record in records:
        home, away = scenario.mixes[i].home, scenario.mixes[i].away
        if home is not None and away is not None and home in record.outcomes:
            games.append((home, away, record.outcomes[home]))
    return games


def team_summary(scenario: PlannedScenario, team_returns: Mapping[str, Sequence[float]], confidence: float) -> dict:
    """The team block of a replace-one-agent scenario: agents, team return and, against the baseline, its change."""
    own = team_returns[scenario.name]
    out: dict[str, Any] = {
        "agents": list(scenario.team_agents or ()),
        "baseline": scenario.baseline,
        "replaced": scenario.replaced,
        "episode_return": summarize_values(own, confidence).to_dict(),
        "change": None,
    }
    if scenario.baseline is not None:
        out["change"] = difference_interval(own, team_returns[scenario.baseline], confidence).to_dict()
    return out


def report_logs(report: Mapping[str, Any]) -> dict[str, float]:
    """The report's headline numbers as ``eval/<scenario>/<binding>/<metric>`` for Lightning's loggers (undefined ones left out)."""
    logs: dict[str, float | None] = {}
    for name, scenario in report["scenarios"].items():
        prefix = f"eval/{name}"
        for binding, summary in scenario["bindings"].items():
            ret = summary["episode_return"]
            logs[f"{prefix}/{binding}/episode_return"] = ret["mean"]
            logs[f"{prefix}/{binding}/episode_return_ci_low"] = ret["ci_low"]
            logs[f"{prefix}/{binding}/episode_return_ci_high"] = ret["ci_high"]
            logs[f"{prefix}/{binding}/episode_length"] = summary["episode_length"]["mean"]
            logs[f"{prefix}/{binding}/episodes"] = ret["n"]
            if summary["outcomes"] is not None:
                for outcome in ("win", "draw", "loss"):
                    logs[f"{prefix}/{binding}/{outcome}_rate"] = summary["outcomes"][outcome]["rate"]
            for field_name, value in summary["info"].items():
                logs[f"{prefix}/{binding}/info/{field_name}"] = value["mean"]
        if scenario["head_to_head"] is not None:
            for binding, elo in scenario["head_to_head"]["elo"].items():
                logs[f"{prefix}/{binding}/elo"] = elo
        team = scenario.get("team")
        if team is not None:
            logs[f"{prefix}/team/episode_return"] = team["episode_return"]["mean"]
            if team["change"] is not None:
                for key in ("difference", "ci_low", "ci_high"):
                    logs[f"{prefix}/team/return_change{'' if key == 'difference' else '_' + key}"] = team["change"][key]
    for binding, value in report.get("exploitability", {}).items():
        logs[f"eval/exploitability/{binding}"] = value["exploitability"]
        logs[f"eval/nash_conv/{binding}"] = value["nash_conv"]
    return {key: float(value) for key, value in logs.items() if value is not None}


def write_outputs(result: EvaluationResult, out_dir: str | Path) -> list[Path]:
    """Write ``report.json``, ``summary.md`` and the report's PNGs (returns, payoff heatmaps) to ``out_dir``."""
    out_dir = Path(out_dir)
    written = [write_report(result.report, out_dir / "report.json")]
    summary = out_dir / "summary.md"
    summary.write_text(markdown_summary(result.report))
    written.append(summary)
    written += plot_report(result.report, out_dir)
    return written
