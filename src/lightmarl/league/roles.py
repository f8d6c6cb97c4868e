"""AlphaStar's league roles: main players, main exploiters and league exploiters.

Vinyals et al. 2019, "Grandmaster level in StarCraft II using multi-agent reinforcement
learning" (Nature 575), Methods and pseudocode: main players train against the whole league
(PFSP), against each other (self-play) and against the snapshots that reveal exploits or
forgetting; main exploiters hunt the main players' weaknesses and restart from their initial
weights after each snapshot; league exploiters hunt weaknesses of the whole league and restart
with some probability. All three snapshot after one phase if they beat their reference
opponents often enough, and unconditionally after ``force_after_step`` steps.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from lightmarl.league.pfsp import PFSPWeighting, remove_monotonic_suffix
from lightmarl.league.player import (
    ActivePlayerSettings,
    BattleActivePlayer,
    HistoricalPlayer,
    Player,
    _check_probability,
)


@dataclass
class AlphaStarSettings(ActivePlayerSettings):
    """When an AlphaStar role is trained enough to be snapshotted.

    Attributes:
        strong_win_rate: after ``one_phase_step`` steps, snapshot once the win rate against
            every reference opponent (role-specific) exceeds this.
        force_after_step: steps since the last snapshot after which it is taken regardless of
            win rates; default ``2 * one_phase_step``.
    """

    strong_win_rate: float = 0.7
    force_after_step: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_probability("strong_win_rate", self.strong_win_rate)
        if self.force_after_step is not None and self.force_after_step < self.one_phase_step:
            raise ValueError(
                f"force_after_step ({self.force_after_step}) must be >= one_phase_step ({self.one_phase_step})"
            )


class _AlphaStarRole(BattleActivePlayer):
    """Snapshot rule shared by the three roles; subclasses name their reference opponents."""

    settings: AlphaStarSettings

    def _reference_opponents(self) -> list[Player]:
        """The opponents it must beat to be snapshotted early: every historical player by default."""
        return list(self._historical())

    def is_trained_enough(self) -> bool:
        passed = self.total_agent_step - self.last_enough_step
        if passed < self.settings.one_phase_step:
            return False
        force = self.settings.force_after_step or 2 * self.settings.one_phase_step
        if passed >= force:
            return True
        reference = self._reference_opponents()
        return bool(reference) and min(self._win_rates(reference)) > self.settings.strong_win_rate

    def _main_players(self) -> list[Player]:
        return [p for p in self.payoff.players if isinstance(p, MainPlayer)]

    def _opponent_or_curriculum(
        self, rng: random.Random, opponent: Player, min_win_rate: float, branch: str
    ) -> tuple[list[Player], str]:
        """``opponent`` while this player wins more than ``min_win_rate`` against it, else one of its snapshots.

        The snapshots (``variance`` PFSP, favouring even games) make a curriculum towards an
        opponent that is still too strong.
        """
        if self._win_rates([opponent])[0] > min_win_rate:
            return [opponent], branch
        lineage = self._historical([opponent.player_id])
        if not lineage:
            return [opponent], branch
        return [self._pick(rng, lineage, "variance")], f"{branch}_curriculum"


@dataclass
class MainPlayerSettings(AlphaStarSettings):
    """Opponent choice of a [`MainPlayer`][lightmarl.league.roles.MainPlayer].

    Attributes:
        pfsp_prob: probability of a PFSP opponent among all historical players.
        verification_prob: probability of checking for exploits and forgetting (falls back to
            self-play when nothing is found); self-play gets the rest.
        pfsp_weighting: PFSP weighting of the league and verification branches.
        self_play_win_rate: below this win rate against the chosen main player, play one of its
            snapshots instead (a curriculum, ``variance`` weighting).
        exploiter_win_rate: play an exploiter's snapshot when losing to one more than this often
            (win rate below it).
        forgetting_win_rate: play an own-lineage snapshot when the win rate against it is below this.
    """

    pfsp_prob: float = 0.5
    verification_prob: float = 0.15
    pfsp_weighting: PFSPWeighting = "squared"
    self_play_win_rate: float = 0.3
    exploiter_win_rate: float = 0.3
    forgetting_win_rate: float = 0.7

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_probability("pfsp_prob", self.pfsp_prob)
        _check_probability("verification_prob", self.verification_prob)
        _check_probability("pfsp_prob + verification_prob", self.pfsp_prob + self.verification_prob)


class MainPlayer(_AlphaStarRole):
    """AlphaStar's main agent: PFSP over the league, self-play, and checks against exploiters and its own past.

    Branches (probabilities from [`MainPlayerSettings`][lightmarl.league.roles.MainPlayerSettings]): ``"pfsp"`` over every historical
    player; ``"verification_exploiters"`` / ``"verification_forgetting"`` over exploiters'
    snapshots it loses to or its opponent's older snapshots it no longer beats; ``"self_play"``
    against a uniformly chosen main player, or ``"self_play_curriculum"`` against one of that
    player's snapshots when the main player is too strong. With no historical player yet, the
    PFSP branch plays self-play.
    """

    settings_class = MainPlayerSettings
    settings: MainPlayerSettings

    def __init__(self, player_id: str, settings: MainPlayerSettings | None = None, **kwargs: Any) -> None:
        """Args as `ActivePlayer`; ``settings`` typed here so that ``class_path`` configs can name its fields."""
        super().__init__(player_id, settings=settings, **kwargs)

    def _get_job_opponents(self, rng: random.Random) -> tuple[list[Player], str]:
        s = self.settings
        coin = rng.random()
        if coin < s.pfsp_prob:
            historical = self._historical()
            if historical:
                return [self._pick(rng, historical, s.pfsp_weighting)], "pfsp"
        mains = self._main_players()
        opponent = self._pick(rng, mains, None)
        if s.pfsp_prob <= coin < s.pfsp_prob + s.verification_prob:
            found = self._verification_branch(rng, opponent)
            if found is not None:
                return found
        return self._opponent_or_curriculum(rng, opponent, s.self_play_win_rate, "self_play")

    def _verification_branch(self, rng: random.Random, opponent: Player) -> tuple[list[Player], str] | None:
        s = self.settings
        exploiters = [p.player_id for p in self.payoff.players if isinstance(p, MainExploiter)]
        exploiter_snapshots = self._historical(exploiters)
        if exploiter_snapshots and min(self._win_rates(exploiter_snapshots)) < s.exploiter_win_rate:
            return [self._pick(rng, exploiter_snapshots, s.pfsp_weighting)], "verification_exploiters"
        lineage = self._historical([opponent.player_id])
        rates, lineage = remove_monotonic_suffix(self._win_rates(lineage), lineage)
        if rates and min(rates) < s.forgetting_win_rate:
            return [self._pick(rng, lineage, s.pfsp_weighting)], "verification_forgetting"
        return None


@dataclass
class MainExploiterSettings(AlphaStarSettings):
    """Opponent choice of a [`MainExploiter`][lightmarl.league.roles.MainExploiter].

    Attributes:
        main_win_rate: play the chosen main player itself while winning more than this often
            against it; otherwise one of its snapshots (``variance`` PFSP) as a curriculum.
    """

    main_win_rate: float = 0.1


class MainExploiter(_AlphaStarRole):
    """AlphaStar's main exploiter: plays the main players and resets to its initial weights after each snapshot.

    [`mutate`][lightmarl.league.player.ActivePlayer.mutate] returns [`initial_checkpoint_path`][lightmarl.league.roles.MainPlayer.initial_checkpoint_path]; the training loop saves the player's
    initial weights there before training starts and loads them back on reset.
    """

    settings_class = MainExploiterSettings
    settings: MainExploiterSettings

    def __init__(self, player_id: str, settings: MainExploiterSettings | None = None, **kwargs: Any) -> None:
        """Args as `ActivePlayer`; ``settings`` typed here so that ``class_path`` configs can name its fields."""
        super().__init__(player_id, settings=settings, **kwargs)

    def _reference_opponents(self) -> list[Player]:
        return self._main_players()

    def _get_job_opponents(self, rng: random.Random) -> tuple[list[Player], str]:
        mains = self._main_players()
        if not mains:
            raise ValueError(f"MainExploiter {self.player_id!r} needs at least one MainPlayer in the league")
        return self._opponent_or_curriculum(rng, self._pick(rng, mains, None), self.settings.main_win_rate, "main")

    def mutate(self, rng: random.Random) -> str | None:
        return self.initial_checkpoint_path


@dataclass
class LeagueExploiterSettings(AlphaStarSettings):
    """Opponent choice and reset of a [`LeagueExploiter`][lightmarl.league.roles.LeagueExploiter].

    Attributes:
        pfsp_weighting: PFSP weighting over all historical players (AlphaStar: ``linear_capped``).
        reset_prob: probability of restarting from the initial weights after a snapshot.
    """

    pfsp_weighting: PFSPWeighting = "linear_capped"
    reset_prob: float = 0.25

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_probability("reset_prob", self.reset_prob)


class LeagueExploiter(_AlphaStarRole):
    """AlphaStar's league exploiter: PFSP over every historical player; resets with probability ``reset_prob``.

    With no historical player yet it plays a uniformly chosen main player (or itself).
    """

    settings_class = LeagueExploiterSettings
    settings: LeagueExploiterSettings

    def __init__(self, player_id: str, settings: LeagueExploiterSettings | None = None, **kwargs: Any) -> None:
        """Args as `ActivePlayer`; ``settings`` typed here so that ``class_path`` configs can name its fields."""
        super().__init__(player_id, settings=settings, **kwargs)

    def _get_job_opponents(self, rng: random.Random) -> tuple[list[Player], str]:
        historical: list[HistoricalPlayer] = self._historical()
        if historical:
            return [self._pick(rng, historical, self.settings.pfsp_weighting)], "pfsp"
        mains = self._main_players()
        return [self._pick(rng, mains, None) if mains else self], "self_play"

    def mutate(self, rng: random.Random) -> str | None:
        return self.initial_checkpoint_path if rng.random() < self.settings.reset_prob else None
