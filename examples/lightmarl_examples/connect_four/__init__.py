"""Connect four (PettingZoo ``connect_four_v3``): its drop rules, a scripted opponent and board encoders."""

from lightmarl_examples.connect_four.afterstates import DropAfterstateEncoder
from lightmarl_examples.connect_four.heuristic import ConnectFourHeuristicPolicy
from lightmarl_examples.connect_four.threats import ThreatFeaturesEncoder

__all__ = ["ConnectFourHeuristicPolicy", "DropAfterstateEncoder", "ThreatFeaturesEncoder"]
