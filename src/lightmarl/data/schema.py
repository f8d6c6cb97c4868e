"""Names of the entries every experience row carries.

An experience TensorDict follows TorchRL's multi-agent layout: the root batch is
``[num_envs, time]`` and each agent group (named by the env, e.g. ``"agent"``) is a
nested TensorDict with batch ``[num_envs, time, agents_in_group]``. One element of a
group's batch is one *row*: one agent at one step of one env. The annotation keys below
live inside the group TensorDict, next to ``observation`` / ``action``.
"""

from __future__ import annotations

OBSERVATION = "observation"
ACTION = "action"
ACTION_MASK = "action_mask"
ACTION_LOG_PROB = "action_log_prob"
LOGITS = "logits"
STATE_VALUE = "state_value"
REWARD = "reward"
DONE = "done"
TERMINATED = "terminated"
TRUNCATED = "truncated"
# Root entry [num_envs, time, *state_shape] (and ("next", STATE)): the env's global state, where
# the env config records it (``PettingZooEnvConfig.state``); e.g. the input of a QMIX mixer.
STATE = "state"
# A step result beside ``reward`` (not an experience entry) where a transform rescaled the rewards
# (``RewardNorm``): the env's own reward, which the collector's episode statistics report.
ENV_REWARD = "env_reward"

# Per-row annotations (int64 ids, bool flags), shape [num_envs, time, agents_in_group].
BINDING_ID = "binding_id"
LOSS_PROFILE_ID = "loss_profile_id"
IS_TRAINABLE_AGENT = "is_trainable_agent"
AGENT_ID = "agent_id"  # index of the agent in the env's ``possible_agents``
EPISODE_ID = "episode_id"  # unique per (env copy, episode) within a run and rank
ENV_INDEX = "env_index"
VALID = "valid"  # the agent was present and acted at this step

ANNOTATION_KEYS = (BINDING_ID, LOSS_PROFILE_ID, IS_TRAINABLE_AGENT, AGENT_ID, EPISODE_ID, VALID)
