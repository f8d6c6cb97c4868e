"""League training (AlphaStar, Vinyals et al. 2019): who plays whom, and when snapshots join the league.

Pure Python + torch: players and roles, the shared payoff, PFSP, the league manager and the
snapshot store. Ratings live in [`lightmarl.ratings`][lightmarl.ratings], shared with evaluation.
"""

from lightmarl.league.jobs import Job, LaunchCount
from lightmarl.league.manager import (
    LeagueManager,
    LeagueRole,
    PayoffSettings,
    PretrainedSpec,
    RatingSettings,
    SnapshotEvent,
)
from lightmarl.league.meta import (
    LinearMetaSolver,
    MetaSolver,
    MetaStrategyPlayer,
    MetaStrategySettings,
    NashMetaSolver,
    PFSPMetaSolver,
    UniformMetaSolver,
)
from lightmarl.league.payoff import BattleRecordDict, BattleSharedPayoff, SharedPayoff, SoloSharedPayoff
from lightmarl.league.pfsp import WEIGHTINGS, PFSPWeighting, pfsp, remove_monotonic_suffix
from lightmarl.league.player import (
    ActivePlayer,
    ActivePlayerSettings,
    BattleActivePlayer,
    HistoricalPlayer,
    Player,
    PopulationBasedPlayer,
    PopulationBasedSettings,
    SelfPlayPlayer,
    SelfPlaySettings,
    SoloActivePlayer,
)
from lightmarl.league.roles import (
    AlphaStarSettings,
    LeagueExploiter,
    LeagueExploiterSettings,
    MainExploiter,
    MainExploiterSettings,
    MainPlayer,
    MainPlayerSettings,
)
from lightmarl.league.run import Exchange, LeagueRun, LeagueSettings, OneProcess
from lightmarl.league.snapshots import SnapshotStore, detached_copy

__all__ = [
    "WEIGHTINGS",
    "ActivePlayer",
    "ActivePlayerSettings",
    "AlphaStarSettings",
    "BattleActivePlayer",
    "BattleRecordDict",
    "BattleSharedPayoff",
    "Exchange",
    "HistoricalPlayer",
    "Job",
    "LaunchCount",
    "LeagueExploiter",
    "LeagueExploiterSettings",
    "LeagueManager",
    "LeagueRole",
    "LeagueRun",
    "LeagueSettings",
    "LinearMetaSolver",
    "MainExploiter",
    "MainExploiterSettings",
    "MainPlayer",
    "MainPlayerSettings",
    "MetaSolver",
    "MetaStrategyPlayer",
    "MetaStrategySettings",
    "NashMetaSolver",
    "OneProcess",
    "PFSPMetaSolver",
    "PFSPWeighting",
    "PayoffSettings",
    "Player",
    "PopulationBasedPlayer",
    "PopulationBasedSettings",
    "PretrainedSpec",
    "RatingSettings",
    "SelfPlayPlayer",
    "SelfPlaySettings",
    "SharedPayoff",
    "SnapshotEvent",
    "SnapshotStore",
    "SoloActivePlayer",
    "SoloSharedPayoff",
    "UniformMetaSolver",
    "detached_copy",
    "pfsp",
    "remove_monotonic_suffix",
]
