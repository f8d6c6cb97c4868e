"""How the population learns: algorithms, UnitTrainers and the MARLTrainer."""

from lightmarl.algorithms.base import Algorithm, GradientStepper, PlainStepper, UnitTrainer, loss_row_mask
from lightmarl.algorithms.marl_trainer import IndependentMARLTrainer
from lightmarl.algorithms.ppo import PPO, PPOUnitTrainer

__all__ = [
    "PPO",
    "Algorithm",
    "GradientStepper",
    "IndependentMARLTrainer",
    "PPOUnitTrainer",
    "PlainStepper",
    "UnitTrainer",
    "loss_row_mask",
]
