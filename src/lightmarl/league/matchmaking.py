"""Who plays in each env copy: league jobs per copy, seats, and a bounded set of resident opponents.

A training run steps ``num_copies`` env copies (over every process). Each copy plays one
[`Job`][lightmarl.league.jobs.Job] per episode: copy ``g`` launches jobs for active player
``g mod players``, and when its episode ends the result goes to
[`LeagueManager.finish_job`][lightmarl.league.manager.LeagueManager.finish_job] and the copy gets its next job, in the same call. So a copy
never mixes two opponents in one episode, and different copies of one vector play different
opponents at once.

Seats alternate: in copy ``g`` the ``k``-th job puts the player in seat ``(g + k) mod 2``, so
every player plays both seats equally often and results are counted per seat.

Opponents act through bindings: a live active player through its own (trainable) binding, a
historical player through one of a fixed pool of frozen *opponent slot* bindings whose weights
are loaded from its snapshot file. Slots are shared by every process, so at most
``len(slot_bindings)`` snapshots are resident however large the league grows. A slot holding
an opponent some copy still plays is never reloaded. A job that needs a snapshot while every
slot is busy *drains* the least recently used slot (no new game may use it, so it frees once
its games end and the next snapshot can load there), is cancelled and drawn again, up to
``max_redraws`` times, after which the copy plays one unrecorded episode against the player
itself. Without draining, a vector of many copies keeps every slot busy forever and the first
snapshots loaded stay the only ones played. Copies whose episodes end at the same step are
released together before any is seated again (`Matchmaker.episodes_ended`), for the same
reason.

Under ``lightmarl fit`` the league decides between rollouts, not at every env step
(`Matchmaker.rollout_ended`): every copy holds, besides its current seating, one *on deck*
(drawn at the last rollout boundary, its snapshot already loaded). Where a copy's episode ends
during a rollout, the copy starts its on-deck seating at once, with no word from the league; a
copy that ends further episodes in the same rollout plays that seating's game again (a job of
several games). After the rollout, the league records every episode in the order they ended
(step, then copy), finishes the jobs that copies left, and draws the next on-deck seatings. So
processes exchange results once per rollout, and 1 and N processes record the same games.

Pure Python: the Lightning side (`lightmarl.training.league`) turns `Seating` into
binding maps and weight loads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, cast

from lightmarl._imports import import_object
from lightmarl.league.jobs import Job
from lightmarl.league.manager import LeagueManager
from lightmarl.league.payoff import SoloSharedPayoff
from lightmarl.league.player import HistoricalPlayer

Result = Literal["win", "draw", "loss"]
#: what an episode gives the league: a battle result, or a solo player's episode return.
EpisodeResult = Result | float
#: ``fn(own_return, opponent_return) -> "win" | "draw" | "loss"``, from the job's player's side.
OutcomeFn = Callable[[float, float], str]

RESULTS: tuple[Result, ...] = ("win", "draw", "loss")
#: the branch counted for an episode that no job could be seated for (every opponent slot busy).
FALLBACK = "fallback"


def outcome_from_returns(own_return: float, opponent_return: float) -> Result:
    """The default outcome: the seat with the higher episode return wins; equal returns draw."""
    if own_return > opponent_return:
        return "win"
    if own_return < opponent_return:
        return "loss"
    return "draw"


def resolve_outcome(outcome: str | OutcomeFn) -> OutcomeFn:
    """An outcome function from its import path (or itself)."""
    fn = import_object(outcome, field="league.outcome") if isinstance(outcome, str) else outcome
    if not callable(fn):
        raise ValueError(f"league.outcome: {outcome!r} is not callable; expected fn(own_return, opponent_return)")
    return fn


@dataclass(frozen=True)
class Seating:
    """What one env copy plays until its episode ends.

    Attributes:
        copy: the copy's index over every process (``rank * envs_per_process + local index``).
        job_id: the league job (``-1``: an unrecorded fallback episode of the player against itself).
        player_id: the active player whose job it is.
        opponent_id: its opponent (the player itself in self-play).
        seat: the player's seat (0 or 1); the opponent sits in the other.
        player_binding: the binding that acts for the player.
        opponent_binding: the binding that acts for the opponent: an active player's own binding
            or an opponent slot.
        load: a snapshot file to load into ``opponent_binding`` before the episode starts
            (``None``: the slot already holds it, or the opponent is live).
    """

    copy: int
    job_id: int
    player_id: str
    opponent_id: str
    seat: int
    player_binding: str
    opponent_binding: str
    load: str | None = None


class Matchmaker:
    """Hands every env copy a job per episode and records each finished episode in the league.

    Args:
        manager: the league.
        player_bindings: active player id -> the trainable binding that acts for it.
        slot_bindings: the frozen bindings that hold historical opponents (at most this many
            snapshots are resident at once).
        num_copies: env copies over every process.
        outcome: ``fn(own_return, opponent_return)`` or its import path.
        max_redraws: new draws for a job whose snapshot finds every slot busy.
    """

    def __init__(
        self,
        manager: LeagueManager,
        player_bindings: Mapping[str, str],
        slot_bindings: list[str],
        num_copies: int,
        outcome: str | OutcomeFn = outcome_from_returns,
        max_redraws: int = 8,
    ) -> None:
        active = [p.player_id for p in manager.active_players]
        if sorted(player_bindings) != sorted(active):
            raise ValueError(f"league: bindings given for players {sorted(player_bindings)}, the league has {active}")
        if num_copies < len(active):
            raise ValueError(
                f"league: {num_copies} env copies (over every process) for {len(active)} active players; "
                "each player needs at least one copy to play its jobs in"
            )
        #: solo league (no opponents): one seat, every result an episode return.
        self.solo = isinstance(manager.payoff, SoloSharedPayoff)
        if not slot_bindings and not self.solo:
            raise ValueError("league.max_resident: need at least one opponent slot")
        self.manager = manager
        self.player_bindings = dict(player_bindings)
        self.slot_bindings = list(slot_bindings)
        self.num_copies = num_copies
        self.outcome = resolve_outcome(outcome)
        self.max_redraws = max_redraws
        self.launcher = [active[g % len(active)] for g in range(num_copies)]
        self.seatings: list[Seating | None] = [None] * num_copies
        #: what each copy plays after its current episode (`rollout_ended`'s protocol).
        self.on_deck: list[Seating | None] = [None] * num_copies
        #: results of the games each copy played in its current job, until the copy leaves the job.
        self.games: list[list[EpisodeResult]] = [[] for _ in range(num_copies)]
        self.jobs_started = [0] * num_copies
        self.slots: list[str | None] = [None] * len(slot_bindings)  # historical player id per slot
        self._slot_used = [0] * len(slot_bindings)  # a clock value per slot: least recently used first
        self._clock = 0
        self._draining: set[int] = set()  # slots that take no new game until their games end
        #: player id -> seat -> result -> count (every recorded episode, not decayed).
        self.seat_results: dict[str, list[dict[str, int]]] = {
            p: [dict.fromkeys(RESULTS, 0) for _ in range(2)] for p in active
        }
        #: player id -> branch of the job (the rule that chose the opponent) -> episodes launched;
        #: ``FALLBACK`` counts the unrecorded episodes against the player itself.
        self.jobs_by_branch: dict[str, dict[str, int]] = {p: {} for p in active}

    # -- assignments --------------------------------------------------------------------
    def start(self) -> list[Seating]:
        """A seating for every copy that has none (all of them at the start of a run)."""
        return [self._next(g) for g in range(self.num_copies) if self.seatings[g] is None]

    def fill_on_deck(self) -> list[Seating]:
        """An on-deck seating for every copy that has none (in copy order); returns them."""
        return [self._next(g, on_deck=True) for g in range(self.num_copies) if self.on_deck[g] is None]

    def playing_after(self, copy: int, ends: int) -> Seating:
        """What copy ``copy`` plays after ``ends`` episode ends since the last `rollout_ended` (no change made)."""
        seating = self.on_deck[copy] if ends > 0 and self.on_deck[copy] is not None else self.seatings[copy]
        if seating is None:
            raise ValueError(f"env copy {copy} has no job: call start() first")
        return seating

    def rollout_ended(self, ended: Sequence[tuple[int, Sequence[float]]]) -> list[tuple[Seating, EpisodeResult | None]]:
        """Record the episodes that ended during one rollout; copies that ended one start their on-deck seating.

        Each copy's first episode end of the rollout finishes its job (with the results of all
        its games) and makes its on-deck seating the current one, as the copy did when it
        happened; later ends are further games of that seating. Draw the next on-deck
        seatings with `fill_on_deck` afterwards.

        Args:
            ended: ``(copy, seat_returns)`` per episode, in the order they ended (step, then copy).

        Returns:
            Per episode, the seating it was played under and its result (``None`` for an
            unrecorded fallback game).
        """
        played: list[tuple[Seating, EpisodeResult | None]] = []
        for copy, seat_returns in ended:
            seating = self.seatings[copy]
            if seating is None:
                raise ValueError(f"env copy {copy} has no job: call start() first")
            result = self._result(seating, seat_returns)
            if result is not None:
                self.games[copy].append(result)
            played.append((seating, result))
            if self.on_deck[copy] is not None:  # the copy left its job at this episode end
                self._finish(copy)
                self.seatings[copy], self.on_deck[copy] = self.on_deck[copy], None
        return played

    def advance(self, copies: Sequence[int]) -> None:
        """Mirror `rollout_ended`'s switches without recording: ``copies`` ended an episode in the rollout.

        For a process that mirrors the seatings of the league it does not hold (a DDP rank other than 0).
        """
        for copy in copies:
            if self.on_deck[copy] is not None:
                self.seatings[copy], self.on_deck[copy] = self.on_deck[copy], None
                self.games[copy] = []

    def _finish(self, copy: int) -> None:
        """Finish the copy's current job with the results of its games (none for a fallback game)."""
        seating = self.seatings[copy]
        assert seating is not None
        if seating.job_id >= 0:
            self.manager.finish_job(seating.job_id, self.games[copy])
        self.games[copy] = []
        self.seatings[copy] = None

    def episode_ended(self, copy: int, seat_returns: Sequence[float]) -> tuple[EpisodeResult | None, Seating]:
        """Record the episode copy ``copy`` just finished and give it the next seating.

        Args:
            copy: the copy.
            seat_returns: the episode's return of each seat (summed over the seat's agents; one
                seat in a solo league).

        Returns:
            ``(result, seating)``: the result from the player's side (its episode return in a
            solo league; ``None`` for an unrecorded fallback episode), and what the copy plays next.
        """
        return self.episodes_ended([(copy, seat_returns)])[0]

    def episodes_ended(
        self, ended: Sequence[tuple[int, Sequence[float]]]
    ) -> list[tuple[EpisodeResult | None, Seating]]:
        """`episode_ended` for every copy whose episode ended at the same step.

        All of them are recorded and released before any is seated again, so the slots their
        opponents held are free for the next draws (in a vector whose episodes end together, as
        in one-step games, releasing one copy at a time would leave every slot busy).
        """
        results = [self._record(copy, seat_returns) for copy, seat_returns in ended]
        return [(result, self._next(copy)) for result, (copy, _) in zip(results, ended)]

    def _record(self, copy: int, seat_returns: Sequence[float]) -> EpisodeResult | None:
        seating = self.seatings[copy]
        if seating is None:
            raise ValueError(f"env copy {copy} has no job: call start() first")
        result = self._result(seating, seat_returns)
        if self.solo or seating.job_id >= 0:
            self.manager.finish_job(seating.job_id, [] if result is None else [result])
        self.seatings[copy] = None
        return result

    def _result(self, seating: Seating, seat_returns: Sequence[float]) -> EpisodeResult | None:
        """One game's result from the player's side (counted per seat); ``None`` for a fallback game."""
        if self.solo:
            return float(seat_returns[0])
        if seating.job_id < 0:
            return None
        own, other = seat_returns[seating.seat], seat_returns[1 - seating.seat]
        outcome = self.outcome(float(own), float(other))
        if outcome not in RESULTS:
            raise ValueError(f"league.outcome returned {outcome!r}; expected one of {list(RESULTS)}")
        self.seat_results[seating.player_id][seating.seat][outcome] += 1
        return cast(Result, outcome)

    def _next(self, copy: int, on_deck: bool = False) -> Seating:
        player_id = self.launcher[copy]
        seat = 0 if self.solo else (copy + self.jobs_started[copy]) % 2
        self.jobs_started[copy] += 1
        for _ in range(1 + self.max_redraws):
            job = self.manager.get_job(player_id)
            if job is None:
                raise RuntimeError(f"league: player {player_id!r} has no free job slot for env copy {copy}")
            seating = self._seat(copy, job, seat)
            if seating is not None:
                branch = job.branch
                break
            self.manager.cancel_job(job)
        else:  # every slot busy with opponents other copies play: one unrecorded game against itself
            binding = self.player_bindings[player_id]
            seating = Seating(copy, -1, player_id, player_id, seat, binding, binding)
            branch = FALLBACK
        counts = self.jobs_by_branch[player_id]
        counts[branch] = counts.get(branch, 0) + 1
        if on_deck:
            self.on_deck[copy] = seating
        else:
            self.seatings[copy] = seating
        return seating

    def _seat(self, copy: int, job: Job, seat: int) -> Seating | None:
        binding = self.player_bindings[job.player_id]
        if self.solo and not job.opponent_ids:
            return Seating(copy, job.job_id, job.player_id, job.player_id, seat, binding, binding)
        if len(job.opponent_ids) != 1:
            raise ValueError(
                f"league: job {job.job_id} of {job.player_id!r} has opponents {list(job.opponent_ids)}; "
                "league training in an env plays one opponent per job"
            )
        (opponent_id,) = job.opponent_ids
        if opponent_id in self.player_bindings:
            return Seating(
                copy, job.job_id, job.player_id, opponent_id, seat, binding, self.player_bindings[opponent_id]
            )
        opponent = self.manager.get_player(opponent_id)
        assert isinstance(opponent, HistoricalPlayer)
        slot, load = self._slot_for(opponent)
        if slot is None:
            return None
        return Seating(copy, job.job_id, job.player_id, opponent_id, seat, binding, self.slot_bindings[slot], load)

    def _slot_for(self, opponent: HistoricalPlayer) -> tuple[int | None, str | None]:
        """The slot that holds ``opponent`` (loading it into a free one if needed), and the file to load.

        ``(None, None)`` when the opponent cannot be seated now: its slot is draining, or every
        slot is busy (the least recently used one then starts draining).
        """
        self._clock += 1
        if opponent.player_id in self.slots:
            slot = self.slots.index(opponent.player_id)
            if slot in self._draining:
                return None, None
            self._slot_used[slot] = self._clock
            return slot, None
        busy = {s.opponent_binding for s in [*self.seatings, *self.on_deck] if s is not None}
        free = [k for k, binding in enumerate(self.slot_bindings) if binding not in busy]
        if not free:
            if not self._draining:
                self._draining.add(min(range(len(self.slots)), key=lambda k: self._slot_used[k]))
            return None, None
        slot = min(free, key=lambda k: (k not in self._draining, self.slots[k] is not None, self._slot_used[k]))
        self._draining.discard(slot)
        self.slots[slot] = opponent.player_id
        self._slot_used[slot] = self._clock
        return slot, opponent.checkpoint_path

    # -- state --------------------------------------------------------------------------
    def win_rates_by_seat(self, player_id: str) -> list[float]:
        """The player's (undecayed) score per seat: wins plus half the draws, over recorded games."""
        rates = []
        for counts in self.seat_results[player_id]:
            games = sum(counts.values())
            rates.append((counts["win"] + 0.5 * counts["draw"]) / games if games else float("nan"))
        return rates

    def state_dict(self) -> dict[str, Any]:
        """The league's state and every copy's seating (plain Python: loads with ``weights_only``)."""
        return {
            "manager": self.manager.state_dict(),
            "seatings": [
                None if s is None else {**asdict(s), "load": s.load and self.manager.state_path(s.load)}
                for s in self.seatings
            ],
            "on_deck": [
                None if s is None else {**asdict(s), "load": s.load and self.manager.state_path(s.load)}
                for s in self.on_deck
            ],
            "games": [list(g) for g in self.games],
            "jobs_started": list(self.jobs_started),
            "slots": list(self.slots),
            "slot_used": list(self._slot_used),
            "clock": self._clock,
            "draining": sorted(self._draining),
            "seat_results": {p: [dict(c) for c in seats] for p, seats in self.seat_results.items()},
            "jobs_by_branch": {p: dict(counts) for p, counts in self.jobs_by_branch.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore `state_dict` into a matchmaker built from the same config."""
        if len(state["seatings"]) != self.num_copies or len(state["slots"]) != len(self.slots):
            raise ValueError(
                f"league state has {len(state['seatings'])} env copies and {len(state['slots'])} opponent slots; "
                f"this run has {self.num_copies} and {len(self.slots)} (num_envs x processes and max_resident "
                "must match to resume)"
            )
        self.manager.load_state_dict(state["manager"])
        self.seatings, self.on_deck = (
            [
                None if s is None else Seating(**{**s, "load": s["load"] and self.manager.restored_path(s["load"])})
                for s in saved
            ]
            for saved in (state["seatings"], state.get("on_deck", [None] * self.num_copies))
        )
        self.games = [list(g) for g in state.get("games", [[] for _ in range(self.num_copies)])]
        self.jobs_started = [int(n) for n in state["jobs_started"]]
        self.slots = list(state["slots"])
        self._slot_used = [int(n) for n in state["slot_used"]]
        self._clock = int(state["clock"])
        self._draining = {int(k) for k in state.get("draining", [])}
        self.seat_results = {p: [dict(c) for c in seats] for p, seats in state["seat_results"].items()}
        # A state saved before branches were counted starts them from zero.
        saved = state.get("jobs_by_branch", {})
        self.jobs_by_branch = {p: {str(b): int(n) for b, n in saved.get(p, {}).items()} for p in self.seat_results}
