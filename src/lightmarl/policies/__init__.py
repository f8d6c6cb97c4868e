"""How the population acts: the policy contract, neural and scripted policies."""

from lightmarl.policies.base import NoOpPolicy, Policy, ScriptedPolicy, StackableActor, UniformRandomPolicy
from lightmarl.policies.continuous import DeterministicActorCritic, SACActorCritic
from lightmarl.policies.distributions import MultiCategorical
from lightmarl.policies.encoders import CNNEncoder, FlattenEncoder, ImpalaCNNEncoder, MLPEncoder
from lightmarl.policies.mlp import CentralizedValueNetwork, MLPActorCritic
from lightmarl.policies.multi_agent import MultiAgentPolicy
from lightmarl.policies.policy_dict import PolicyDict
from lightmarl.policies.qnet import QNetworkPolicy
from lightmarl.policies.recurrent import RecurrentActorCritic
from lightmarl.policies.registry import PolicyRegistry

__all__ = [
    "CNNEncoder",
    "CentralizedValueNetwork",
    "DeterministicActorCritic",
    "FlattenEncoder",
    "ImpalaCNNEncoder",
    "MLPActorCritic",
    "MLPEncoder",
    "MultiAgentPolicy",
    "MultiCategorical",
    "NoOpPolicy",
    "Policy",
    "PolicyDict",
    "PolicyRegistry",
    "QNetworkPolicy",
    "RecurrentActorCritic",
    "SACActorCritic",
    "ScriptedPolicy",
    "StackableActor",
    "UniformRandomPolicy",
]
