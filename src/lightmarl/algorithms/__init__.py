"""How the population learns: algorithms, UnitTrainers and the MARLTrainer."""

from lightmarl.algorithms.base import Algorithm, GradientStepper, PlainStepper, UnitTrainer, loss_row_mask
from lightmarl.algorithms.ddpg import DDPG, DDPGUnitTrainer
from lightmarl.algorithms.distillation import Distillation, KickstarterLoss, SlicedClonerLoss
from lightmarl.algorithms.dqn import DQN, DQNUnitTrainer
from lightmarl.algorithms.marl_trainer import IndependentMARLTrainer
from lightmarl.algorithms.ppo import PPO, PPOUnitTrainer
from lightmarl.algorithms.sac import SAC, SACUnitTrainer
from lightmarl.algorithms.value_decomposition import QMIX, VDN, ValueDecomposition, ValueDecompositionUnitTrainer

__all__ = [
    "DDPG",
    "DQN",
    "PPO",
    "QMIX",
    "SAC",
    "VDN",
    "Algorithm",
    "DDPGUnitTrainer",
    "DQNUnitTrainer",
    "Distillation",
    "GradientStepper",
    "IndependentMARLTrainer",
    "KickstarterLoss",
    "PPOUnitTrainer",
    "PlainStepper",
    "SACUnitTrainer",
    "SlicedClonerLoss",
    "UnitTrainer",
    "ValueDecomposition",
    "ValueDecompositionUnitTrainer",
    "loss_row_mask",
]
