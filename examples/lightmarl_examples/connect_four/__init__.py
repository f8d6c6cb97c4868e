"""Connect four (PettingZoo ``connect_four_v3``): its drop rules, two scripted opponents and board encoders."""

from lightmarl_examples.connect_four.afterstates import DropAfterstateEncoder
from lightmarl_examples.connect_four.heuristic import ConnectFourHeuristicPolicy
from lightmarl_examples.connect_four.search import ConnectFourSearchPolicy
from lightmarl_examples.connect_four.threats import ThreatFeaturesEncoder

__all__ = ["ConnectFourHeuristicPolicy", "ConnectFourSearchPolicy", "DropAfterstateEncoder", "ThreatFeaturesEncoder"]
