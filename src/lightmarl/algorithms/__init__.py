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
from lightmarl.algorithms.distillation import Distillation, DistillationLoss, KickstarterLoss, SlicedClonerLoss
from lightmarl.algorithms.dqn import DQN, DQNUnitTrainer
from lightmarl.algorithms.magnet import Magnet, MagnetLoss
from lightmarl.algorithms.marl_trainer import IndependentMARLTrainer, MARLTrainer
from lightmarl.algorithms.off_policy import OffPolicyAlgorithm, OffPolicyUnitTrainer
from lightmarl.algorithms.on_policy import AuxiliaryLoss, AuxiliaryRows, OnPolicyAlgorithm, OnPolicyUnitTrainer
from lightmarl.algorithms.ppo import PPO, PPOUnitTrainer
from lightmarl.algorithms.rollout_rows import RolloutRows, TurnBasedRows, UpdateRows
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
    "AuxiliaryLoss",
    "AuxiliaryRows",
    "DDPGUnitTrainer",
    "DQNUnitTrainer",
    "Distillation",
    "DistillationLoss",
    "GradientStepper",
    "IndependentMARLTrainer",
    "KickstarterLoss",
    "MARLTrainer",
    "Magnet",
    "MagnetLoss",
    "MetricMeans",
    "OffPolicyAlgorithm",
    "OffPolicyUnitTrainer",
    "OnPolicyAlgorithm",
    "OnPolicyUnitTrainer",
    "PPOUnitTrainer",
    "PlainStepper",
    "RolloutRows",
    "SACUnitTrainer",
    "SlicedClonerLoss",
    "TurnBasedRows",
    "UnitTrainer",
    "UpdateRows",
    "ValueDecomposition",
    "ValueDecompositionUnitTrainer",
    "loss_row_mask",
    "optimize",
]
