"""How the population learns: algorithms, UnitTrainers and the MARLTrainer."""

from lightmarl.algorithms.base import Algorithm, GradientStepper, PlainStepper, UnitTrainer, loss_row_mask
from lightmarl.algorithms.distillation import Distillation, KickstarterLoss, SlicedClonerLoss
from lightmarl.algorithms.dqn import DQN, DQNUnitTrainer
from lightmarl.algorithms.marl_trainer import IndependentMARLTrainer
from lightmarl.algorithms.ppo import PPO, PPOUnitTrainer

__all__ = [
    "DQN",
    "PPO",
    "Algorithm",
    "DQNUnitTrainer",
    "Distillation",
    "GradientStepper",
    "IndependentMARLTrainer",
    "KickstarterLoss",
    "PPOUnitTrainer",
    "PlainStepper",
    "SlicedClonerLoss",
    "UnitTrainer",
    "loss_row_mask",
]
