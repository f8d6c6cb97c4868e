from __future__ import annotations

import pytest
import torch
from torch.distributions import Categorical
from torchrl.envs.utils import ExplorationType, set_exploration_type

from expectations import policy_rows as rows
from lightmarl.policies import (
    ScriptedPolicy,
)

SPREAD = "mpe2.simple_spread_v3.parallel_env"


class Biased(ScriptedPolicy):
    """A distribution that depends on the agent: agent i prefers action i."""

    def action_logits(self, observation, action_mask=None, agent_id=None):
        logits = torch.zeros(*observation.shape[:-1], self.group.num_actions)
        return logits.scatter(-1, agent_id.unsqueeze(-1), 1.5)


class Legacy(ScriptedPolicy):
    """Written before agent ids existed: act() without the keyword."""

    def act(self, observation, action_mask=None):
        return torch.full(observation.shape[:-1], 3, dtype=torch.int64)


def test_logits_log_prob_and_exploration_are_consistent(spread_config):
    group = spread_config.spec().groups["agent"]
    policy = Biased(group)
    with set_exploration_type(ExplorationType.RANDOM):
        sampled = policy(rows(group))["agent"]
    logits = sampled["logits"]
    assert torch.equal(logits.argmax(-1), torch.tensor(group.agent_ids).expand(512, 3))
    expected = Categorical(logits=logits).log_prob(sampled["action"])
    assert torch.allclose(sampled["action_log_prob"], expected)
    assert sampled["action"].unique().numel() == group.num_actions  # really sampled
    # Agent 0 prefers action 0 with probability e^1.5 / (e^1.5 + 4).
    share = (sampled["action"][:, 0] == 0).float().mean()
    assert abs(share - torch.softmax(logits[0, 0], -1)[0]) < 0.08
    for mode in (ExplorationType.DETERMINISTIC, ExplorationType.MODE, None):
        td = rows(group, batch=4)
        if mode is None:
            out = policy(td)["agent"]  # no context: deterministic, as TorchRL's ProbabilisticActor
        else:
            with set_exploration_type(mode):
                out = policy(td)["agent"]
        assert torch.equal(out["action"], torch.tensor(group.agent_ids).expand(4, 3))
        favourite = torch.log_softmax(out["logits"], -1).amax(-1)  # the mode's log-probability
        assert torch.allclose(out["action_log_prob"], favourite)


def test_masked_actions_are_never_taken_and_log_probs_are_renormalised(spread_config):
    group = spread_config.spec().groups["agent"]
    mask = torch.ones(512, 3, 5, dtype=torch.bool)
    mask[..., 0] = False  # agent 0's favourite is illegal
    with set_exploration_type(ExplorationType.RANDOM):
        out = Biased(group)(rows(group, mask=mask))["agent"]
    assert not (out["action"] == 0).any()
    legal = torch.log_softmax(out["logits"][..., 1:], -1)
    assert torch.allclose(out["action_log_prob"], legal.gather(-1, (out["action"] - 1).unsqueeze(-1)).squeeze(-1))


def test_agent_id_reaches_act_and_old_scripts_still_work(spread_config):
    group = spread_config.spec().groups["agent"]
    seen = {}

    class Recorder(ScriptedPolicy):
        def act(self, observation, action_mask=None, agent_id=None):
            seen["agent_id"] = agent_id
            return torch.zeros(observation.shape[:-1], dtype=torch.int64)

    Recorder(group)(rows(group, batch=2))
    assert seen["agent_id"].tolist() == [[0, 1, 2], [0, 1, 2]]
    out = Legacy(group)(rows(group, batch=2))["agent"]
    assert out["action"].eq(3).all() and out["action_log_prob"].eq(0).all()
    assert "logits" not in out.keys()
    assert not Legacy(group).has_distribution and Biased(group).has_distribution


def test_a_script_must_define_act_or_logits(spread_config):
    class Empty(ScriptedPolicy):
        pass

    with pytest.raises(TypeError, match="Empty is a ScriptedPolicy without act"):
        Empty(spread_config.spec().groups["agent"])
