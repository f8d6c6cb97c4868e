"""Win rates of the connect-four league's main player (``recipes/league_connect_four.yaml``).

Loads the main binding from a run's checkpoint and plays 400 games (200 moving first, 200 moving
second) against each of three opponents:

- ``random``: :class:`~lightmarl.policies.UniformRandomPolicy` (a uniformly random legal column);
- ``first_snapshot``: the main player's own first league snapshot (the file the league wrote
  under ``<run>/league/``), sampling from its policy so that games vary;
- ``heuristic``: :class:`~lightmarl_examples.connect_four.ConnectFourHeuristicPolicy` (win if
  possible, else block, else random), which the league never trained against.

The main player takes its greedy (mode) action. Games are played by
:func:`lightmarl.evaluation.evaluate_episodes` (``winner="positive_return"``: connect four pays
+1 / 0 / -1) and summarized by :mod:`lightmarl.evaluation.statistics`: the score counts a draw
as half a win, with a 95% bootstrap interval over the per-game scores, and the win / draw / loss rates
have Wilson intervals, also per seat. The same matches are played by the untrained main player
(the initial weights the league saved as ``<player>_init.pt``).

    python benchmarks/league_connect_four.py runs/league_connect_four
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tensordict import TensorDictBase
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lightmarl.envs import PettingZooEnvConfig
from lightmarl.envs.spec import GroupSpec
from lightmarl.evaluation import evaluate_episodes
from lightmarl.evaluation.statistics import OutcomeSummary, ValueSummary, summarize_outcomes, summarize_values
from lightmarl.inference import load_population, read_artifact
from lightmarl.league import SnapshotStore
from lightmarl.policies import MultiAgentPolicy, Policy, UniformRandomPolicy
from lightmarl.population import BindingTable, PolicyBinding
from lightmarl_examples.connect_four import ConnectFourHeuristicPolicy

CONNECT_FOUR = PettingZooEnvConfig(env_fn="pettingzoo.classic.connect_four_v3.env", num_envs=20)
#: connect four's agents: ``player_0`` moves first.
SEATS = ("player_0", "player_1")
PLAYER, OPPONENT = "player", "opponent"
#: a game's score from the player's side: a draw is half a win.
SCORES = {"win": 1.0, "draw": 0.5, "loss": 0.0}


class Sampled(Policy):
    """Acts with ``policy`` sampling from its distribution, whatever exploration mode the caller set.

    Two greedy policies on a deterministic board play the same game every time; sampling the
    opponent's moves makes each of the 200 games per seat a different one.

    Args:
        policy: the policy whose actions are sampled.
    """

    def __init__(self, policy: Policy) -> None:
        super().__init__(policy.group)
        self.policy = policy

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        with set_exploration_type(ExplorationType.RANDOM):
            return self.policy(tensordict)


@dataclass(frozen=True)
class MatchResult:
    """The player's games against one opponent.

    Attributes:
        outcomes: ``"win"`` / ``"draw"`` / ``"loss"`` per game, from the player's side.
        seats: the seat the player took in each game (``player_0`` moves first).
    """

    outcomes: list[str]
    seats: list[str]

    @property
    def score(self) -> ValueSummary:
        """Mean score per game (win 1, draw 0.5, loss 0) with its 95% bootstrap interval (it stays in [0, 1])."""
        return summarize_values([SCORES[o] for o in self.outcomes], interval="bootstrap")

    @property
    def rates(self) -> OutcomeSummary:
        """Win / draw / loss rates with Wilson intervals, overall and per seat."""
        return summarize_outcomes(self.outcomes, self.seats)


def play_match(
    player: Policy,
    opponent: Policy,
    games: int,
    seed: int,
    env_config: PettingZooEnvConfig = CONNECT_FOUR,
) -> MatchResult:
    """``games`` games of ``player`` (greedy) against ``opponent``, half of them in each seat.

    Each seat's games are one :func:`~lightmarl.evaluation.evaluate_episodes` call with every
    env copy seated the same way, so exactly ``games / 2`` games are played first and
    ``games / 2`` second (env copies reset with ``seed + i`` in both halves).

    Args:
        player: the policy being measured.
        opponent: the other side (scripted policies sample with their own generators).
        games: games in all; must be even.
        seed: base seed of the env copies.
        env_config: the connect-four env (its ``num_envs`` copies play at once).
    """
    if games < 2 or games % 2:
        raise ValueError(f"games: expected an even number >= 2 (half in each seat), got {games!r}")
    spec = env_config.spec()
    bindings = [
        PolicyBinding(id=PLAYER, class_path=_class_path(player), trainable=False),
        PolicyBinding(id=OPPONENT, class_path=_class_path(opponent), trainable=False),
    ]
    outcomes: list[str] = []
    seats: list[str] = []
    for seat in SEATS:
        seating = [PLAYER if agent == seat else OPPONENT for agent in spec.possible_agents]
        table = BindingTable(bindings, spec, seating)
        population = MultiAgentPolicy({PLAYER: player, OPPONENT: opponent}, table)
        played = evaluate_episodes(
            population, env_config, games // 2, seed=seed, winner="positive_return", deterministic=True
        )[PLAYER]
        n = int(played["episodes"])
        # The rates are counts over the n seats the player took (one per game): exact integers back.
        wins, draws = round(played["win_rate"] * n), round(played["draw_rate"] * n)
        outcomes += ["win"] * wins + ["draw"] * draws + ["loss"] * (n - wins - draws)
        seats += [seat] * n
    return MatchResult(outcomes, seats)


def _class_path(policy: Policy) -> str:
    return f"{type(policy).__module__}.{type(policy).__qualname__}"


def first_snapshot(snapshot_dir: str | Path, player_id: str) -> Path:
    """The earliest snapshot file ``<player_id>_<agent steps>.pt`` the league wrote for ``player_id``.

    Raises:
        ValueError: when the folder holds no snapshot of that player.
    """
    pattern = re.compile(rf"{re.escape(player_id)}_(\d+)\.pt")
    found = [
        (int(m.group(1)), p) for p in Path(snapshot_dir).glob(f"{player_id}_*.pt") if (m := pattern.fullmatch(p.name))
    ]
    if not found:
        raise ValueError(f"no snapshot of {player_id!r} in {str(snapshot_dir)!r} (files {player_id}_<steps>.pt)")
    return min(found)[1]


#: classes from examples/ that recipes/league_connect_four.yaml names (a checkpoint is data: lightmarl
#: builds only its own policy classes and the ones its caller allows, see lightmarl.trust).
ALLOWED_CLASSES = ("lightmarl_examples.connect_four.ThreatFeaturesEncoder",)


def load_policy(checkpoint: str | Path, binding: str, weights: str | Path | None = None) -> Policy:
    """The policy of ``binding`` from a training checkpoint, optionally with other ``weights`` (a snapshot file)."""
    policies = load_population(checkpoint, allow=ALLOWED_CLASSES).bindings
    if binding not in policies:
        raise ValueError(f"{str(checkpoint)!r} has no binding {binding!r}; it has {sorted(policies)}")
    policy = policies[binding]
    if weights is not None:
        policy.load_state_dict(SnapshotStore(max_resident=0).load(weights))  # bare or self-describing files
    return policy.eval()


def opponents(group: GroupSpec, snapshot: Policy, seed: int) -> dict[str, Policy]:
    """The three opponents, by name; scripted ones seeded with ``seed``."""
    return {
        "random": UniformRandomPolicy(group, seed=seed),
        "first_snapshot": Sampled(snapshot),
        "heuristic": ConnectFourHeuristicPolicy(group, seed=seed),
    }


def markdown_rows(label: str, results: Mapping[str, MatchResult]) -> list[str]:
    """One table row per opponent: score with its interval, and win / draw / loss counts per seat."""
    rows = []
    for name, result in results.items():
        score, rates = result.score, result.rates
        by_seat = " / ".join(
            f"{rates.by_seat[s].win.count}-{rates.by_seat[s].draw.count}-{rates.by_seat[s].loss.count}"
            for s in SEATS
            if s in rates.by_seat
        )
        rows.append(
            f"| {label} | {name} | **{score.mean:.3f}** [{score.ci_low:.3f}, {score.ci_high:.3f}] "
            f"| {rates.win.rate:.3f} [{rates.win.ci_low:.3f}, {rates.win.ci_high:.3f}] | {rates.draw.rate:.3f} "
            f"| {by_seat} | {rates.n} |"
        )
    return rows


def main(args: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the run directory (runs/league_connect_four)")
    parser.add_argument("--checkpoint", type=Path, help="default: <run>/checkpoints/last.ckpt")
    parser.add_argument("--binding", default="main", help="the main player's binding")
    parser.add_argument("--player", default="main_default_0", help="the main player's league id")
    parser.add_argument("--games", type=int, default=400, help="games per opponent, half in each seat")
    parser.add_argument("--seed", type=int, default=20_000, help="env copies are reset with seed + i")
    parser.add_argument("--opponent-seed", type=int, default=1, help="seed of the scripted opponents")
    options = parser.parse_args(args)
    checkpoint = options.checkpoint or options.run / "checkpoints" / "last.ckpt"
    snapshot_dir = options.run / "league"
    snapshot_path = first_snapshot(snapshot_dir, options.player)
    state = read_artifact(checkpoint, field="--checkpoint").counters
    print(
        f"{checkpoint}: {state['frames']} frames, {state['iterations']} iterations; first snapshot {snapshot_path.name}"
    )
    snapshot = load_policy(checkpoint, options.binding, snapshot_path)
    print(
        "| main player | opponent | score (draw = ½) [95% CI] | win rate [95% CI] | draw rate | W-D-L first / second | games |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for label, weights in (("untrained", snapshot_dir / f"{options.player}_init.pt"), ("trained", None)):
        player = load_policy(checkpoint, options.binding, weights)
        start = time.perf_counter()
        results = {
            name: play_match(player, opponent, options.games, options.seed)
            for name, opponent in opponents(player.group, snapshot, options.opponent_seed).items()
        }
        for row in markdown_rows(label, results):
            print(row)
        print(f"<!-- {label}: {time.perf_counter() - start:.0f} s -->")


if __name__ == "__main__":
    main()
