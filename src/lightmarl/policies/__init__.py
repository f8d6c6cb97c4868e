"""How the population acts: the policy contract, neural and scripted policies."""

from lightmarl.policies.base import NoOpPolicy, Policy, ScriptedPolicy, UniformRandomPolicy
from lightmarl.policies.mlp import MLPActorCritic
from lightmarl.policies.multi_agent import MultiAgentPolicy
from lightmarl.policies.qnet import QNetworkPolicy
from lightmarl.policies.recurrent import RecurrentActorCritic
from lightmarl.policies.registry import PolicyRegistry
from lightmarl.policies.scripted import SpreadToLandmarkPolicy

__all__ = [
    "MLPActorCritic",
    "MultiAgentPolicy",
    "NoOpPolicy",
    "Policy",
    "PolicyRegistry",
    "QNetworkPolicy",
    "RecurrentActorCritic",
    "ScriptedPolicy",
    "SpreadToLandmarkPolicy",
    "UniformRandomPolicy",
]
