"""How the population learns: algorithms, UnitTrainers and the MARLTrainer."""

from lightmarl.algorithms.base import (
    Algorithm,
    GradientStepper,
    MetricMeans,
    PlainStepper,
    UnitTrainer,
    loss_row_mask,
    optimize,
)
from lightmarl.algorithms.ddpg import DDPG, DDPGUnitTrainer
from lightmarl.algorithms.distillation import Distillation, KickstarterLoss, SlicedClonerLoss
from lightmarl.algorithms.dqn import DQN, DQNUnitTrainer
from lightmarl.algorithms.marl_trainer import IndependentMARLTrainer, MARLTrainer
from lightmarl.algorithms.off_policy import OffPolicyAlgorithm, OffPolicyUnitTrainer
from lightmarl.algorithms.on_policy import OnPolicyAlgorithm, OnPolicyUnitTrainer
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
    "MARLTrainer",
    "MetricMeans",
    "OffPolicyAlgorithm",
    "OffPolicyUnitTrainer",
    "OnPolicyAlgorithm",
    "OnPolicyUnitTrainer",
    "PPOUnitTrainer",
    "PlainStepper",
    "SACUnitTrainer",
    "SlicedClonerLoss",
    "UnitTrainer",
    "ValueDecomposition",
    "ValueDecompositionUnitTrainer",
    "loss_row_mask",
    "optimize",
]
