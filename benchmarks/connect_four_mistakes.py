"""Why the connect-four league's main player loses to the heuristic: its tactical mistakes, counted.

Plays ``--games`` games (half moving first) of the main player (greedy) against
:class:`~lightmarl_examples.connect_four.ConnectFourHeuristicPolicy` on a batched board of its own
(the observations and rules of PettingZoo's ``connect_four_v3``: ``[6 rows, top first, 7
columns, 2]``, channel 0 the mover's pieces) and checks every move of the main player:

- **missed win**: it could complete four and played elsewhere;
- **missed block**: the opponent had exactly one immediate win, the player had none, and it did
  not play that column;
- **played under**: no immediate threat before its move, but its piece makes the cell above it a
  win for the opponent (it lifted the opponent onto its own threat);
- **double threat**: the opponent had two or more immediate wins (nothing blocks them all).

Each lost game is put down to its decisive move: the player's last move before the heuristic's
win, classified as above, or "no legal escape" when every legal move lost. The same counts for
the heuristic itself (it never misses a win or a single block, by construction; it does play
under threats) show what an opponent that only tracks immediate wins looks like.

    python benchmarks/connect_four_mistakes.py runs/league_connect_four --checkpoint CKPT --games 400
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lightmarl.inference import load_population
from lightmarl.policies import Policy
from lightmarl_examples.connect_four import ConnectFourHeuristicPolicy, rules

ROWS, COLUMNS = 6, 7
#: mistake kinds, in the order reports list them.
KINDS = ("missed_win", "missed_block", "played_under", "double_threat")


def landing_rows(boards: torch.Tensor) -> torch.Tensor:
    """``[B, 7]``: the row a piece dropped in each column lands on (the lowest empty cell; -1: full)."""
    return rules.landing_rows(boards == 0)


def has_four(pieces: torch.Tensor) -> torch.Tensor:
    """``[B]``: the 0/1 boards ``pieces`` (``[B, 6, 7]``) hold four in a row."""
    return rules.has_four(pieces)


def drop(boards: torch.Tensor, columns: torch.Tensor, piece: int | torch.Tensor) -> torch.Tensor:
    """A copy of ``boards`` with ``piece`` dropped into ``columns`` (one per board; the column must not be full)."""
    out = boards.clone()
    index = torch.arange(boards.shape[0])
    out[index, landing_rows(boards)[index, columns], columns] = torch.as_tensor(piece, dtype=boards.dtype)
    return out


def winning_columns(boards: torch.Tensor, piece: int | torch.Tensor) -> torch.Tensor:
    """``[B, 7]`` bool: dropping ``piece`` (per board or one for all) into the column completes four."""
    owner = torch.as_tensor(piece, dtype=boards.dtype).expand(boards.shape[0]).view(-1, 1, 1)
    return rules.winning_drops(boards == owner, boards == 0)


def observe(boards: torch.Tensor, piece: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mover's observation ``[B, 6, 7, 2]`` (own pieces, then the opponent's) and action mask ``[B, 7]``."""
    own = boards == piece.view(-1, 1, 1)
    theirs = (boards != 0) & ~own
    return torch.stack([own, theirs], -1).float(), landing_rows(boards) >= 0


def act(policy: Policy, boards: torch.Tensor, piece: torch.Tensor, greedy: bool) -> torch.Tensor:
    """``policy``'s column for each board, the mover holding ``piece``."""
    observation, mask = observe(boards, piece)
    group = policy.group.name
    td = TensorDict({group: {"observation": observation, "action_mask": mask}}, batch_size=[boards.shape[0]])
    mode = ExplorationType.DETERMINISTIC if greedy else ExplorationType.RANDOM
    with torch.no_grad(), set_exploration_type(mode):
        return policy(td).get((group, "action")).long().view(-1)


def classify(boards: torch.Tensor, piece: torch.Tensor, columns: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per board, which mistake (if any) playing ``columns`` with ``piece`` is: ``KINDS`` -> ``[B]`` bool.

    Also ``"allowed"``: after the move the opponent has an immediate win, and ``"forced"``: every
    legal move allows one (or the opponent had a double threat).
    """
    other = 3 - piece
    index = torch.arange(boards.shape[0])
    mine, theirs = winning_columns(boards, piece), winning_columns(boards, other)
    could_win, threats = mine.any(-1), theirs.sum(-1)
    after = drop(boards, columns, piece)
    won = mine[index, columns]
    allowed = ~won & winning_columns(after, other).any(-1)
    # Could any legal move have avoided giving the opponent an immediate win?
    legal = landing_rows(boards) >= 0
    safe_exists = could_win.clone()
    for column in range(COLUMNS):
        ok = legal[:, column] & ~safe_exists
        if ok.any():
            trial = drop(boards[ok], torch.full((int(ok.sum()),), column), piece[ok])
            safe_exists[ok] = ~winning_columns(trial, other[ok]).any(-1)
    return {
        "missed_win": could_win & ~won,
        "missed_block": ~could_win & (threats == 1) & ~theirs[index, columns],
        "played_under": ~could_win & (threats == 0) & allowed,
        "double_threat": ~could_win & (threats >= 2),
        "allowed": allowed,
        "forced": allowed & ~safe_exists,
        "could_win": could_win,
        "threats": threats,
    }


def decisive_kind(kinds: dict[str, torch.Tensor], i: int) -> str:
    """What board ``i``'s move was, if the opponent wins next: the mistake, or ``no_legal_escape``."""
    for kind in ("missed_win", "missed_block", "double_threat"):
        if kinds[kind][i]:
            return kind
    if kinds["forced"][i]:
        return "no_legal_escape"  # e.g. the only block lands under a second threat
    return "played_under" if kinds["allowed"][i] else "clean"


@dataclass
class MistakeCounts:
    """One side's moves and mistakes over a set of games.

    Attributes:
        moves: moves played.
        chances: per kind, the moves where the mistake was possible (a win to take, one threat
            to block, a quiet position that a move can spoil, a double threat faced).
        mistakes: per kind, the mistakes made.
        lost_by: lost games by the kind of the losing side's last move.
        outcomes: ``win`` / ``draw`` / ``loss`` counts from this side's view.
    """

    moves: int = 0
    chances: Counter[str] = field(default_factory=Counter)
    mistakes: Counter[str] = field(default_factory=Counter)
    lost_by: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)


def play_games(
    player: Policy, opponent: Policy, games: int, player_piece: int, greedy: bool = True
) -> tuple[MistakeCounts, MistakeCounts]:
    """``games`` games with ``player`` holding ``player_piece`` (1 moves first); counts for both sides."""
    boards = torch.zeros(games, ROWS, COLUMNS, dtype=torch.int8)
    active = torch.ones(games, dtype=torch.bool)
    last_kind: list[list[str]] = [["clean", "clean"] for _ in range(games)]
    counts = (MistakeCounts(), MistakeCounts())  # the player's, the opponent's
    mover = 1
    while active.any():
        rows = active.nonzero().view(-1)
        sub = boards[rows]
        piece = torch.full((len(rows),), mover, dtype=torch.int8)
        side = 0 if mover == player_piece else 1
        columns = act(player if side == 0 else opponent, sub, piece, greedy)
        kinds = classify(sub, piece, columns)
        could_win, threats = kinds["could_win"], kinds["threats"]
        tally = counts[side]
        tally.moves += len(rows)
        tally.chances["missed_win"] += int(could_win.sum())
        tally.chances["missed_block"] += int((~could_win & (threats == 1)).sum())
        tally.chances["played_under"] += int((~could_win & (threats == 0)).sum())
        tally.chances["double_threat"] += int((~could_win & (threats >= 2)).sum())
        for kind in KINDS:
            tally.mistakes[kind] += int(kinds[kind].sum())
        for i, game in enumerate(rows.tolist()):
            last_kind[game][side] = decisive_kind(kinds, i)
        boards[rows] = drop(sub, columns, piece)
        won = has_four(boards[rows] == mover)
        full = (boards[rows] != 0).all(-1).all(-1)
        for i, game in enumerate(rows.tolist()):
            if won[i]:
                counts[side].outcomes["win"] += 1
                counts[1 - side].outcomes["loss"] += 1
                counts[1 - side].lost_by[last_kind[game][1 - side]] += 1
            elif full[i]:
                counts[0].outcomes["draw"] += 1
                counts[1].outcomes["draw"] += 1
        active[rows[won | full]] = False
        mover = 3 - mover
    return counts


def merge(a: MistakeCounts, b: MistakeCounts) -> MistakeCounts:
    return MistakeCounts(
        a.moves + b.moves,
        a.chances + b.chances,
        a.mistakes + b.mistakes,
        a.lost_by + b.lost_by,
        a.outcomes + b.outcomes,
    )


def report(name: str, counts: MistakeCounts) -> list[str]:
    """Markdown lines: outcomes, mistake rates per chance, and what the lost games were lost by."""
    games = sum(counts.outcomes.values())
    o = counts.outcomes
    lines = [f"**{name}**: {games} games, W-D-L {o['win']}-{o['draw']}-{o['loss']}, {counts.moves} moves", ""]
    lines += ["| mistake | made / chances | rate |", "| --- | --- | --- |"]
    for kind in KINDS:
        made, chances = counts.mistakes[kind], counts.chances[kind]
        rate = "" if kind == "double_threat" else f"{made / chances:.3f}" if chances else "-"
        lines.append(f"| {kind} | {made} / {chances} | {rate} |")
    lost = sum(counts.lost_by.values())
    lines += [
        "",
        "losses by the last move before the opponent's win: "
        + ", ".join(f"{kind} {n} ({n / lost:.0%})" for kind, n in counts.lost_by.most_common())
        if lost
        else "no losses",
        "",
    ]
    return lines


#: classes from examples/ that recipes/league_connect_four.yaml names (a checkpoint is data: lightmarl
#: builds only its own policy classes and the ones its caller allows, see lightmarl.trust).
ALLOWED_CLASSES = ("lightmarl_examples.connect_four.ThreatFeaturesEncoder",)


def main(args: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the run directory (runs/league_connect_four)")
    parser.add_argument("--checkpoint", type=Path, help="default: <run>/checkpoints/last.ckpt")
    parser.add_argument("--binding", default="main", help="the main player's binding")
    parser.add_argument("--games", type=int, default=400, help="games, half in each seat")
    parser.add_argument("--seed", type=int, default=1, help="seed of the heuristic's generator")
    options = parser.parse_args(args)
    if options.games < 2 or options.games % 2:
        parser.error(f"--games: expected an even number >= 2, got {options.games}")
    checkpoint = options.checkpoint or options.run / "checkpoints" / "last.ckpt"
    policies = load_population(checkpoint, allow=ALLOWED_CLASSES).bindings
    if options.binding not in policies:
        parser.error(f"{str(checkpoint)!r} has no binding {options.binding!r}; it has {sorted(policies)}")
    player: Policy = policies[options.binding].eval()
    heuristic = ConnectFourHeuristicPolicy(player.group, seed=options.seed)
    first = play_games(player, heuristic, options.games // 2, player_piece=1)
    second = play_games(player, heuristic, options.games // 2, player_piece=2)
    print(f"{checkpoint}\n")
    print("\n".join(report("main player (greedy)", merge(first[0], second[0]))))
    print("\n".join(report("heuristic", merge(first[1], second[1]))))


if __name__ == "__main__":
    main()
