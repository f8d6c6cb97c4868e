"""Every TensorDict key and row annotation lightmarl writes: the experience schema in one place.

This module sits at the bottom of the import graph and imports nothing (no torch): envs,
policies, data, algorithms, league and evaluation all spell keys through it, so renaming an
entry is one edit and a typo is an ``AttributeError`` instead of a silent missing key.

An experience TensorDict follows TorchRL's multi-agent layout: the root batch is
``[num_envs, time]`` and each agent group (named by the env, e.g. ``"agent"``) is a nested
TensorDict with batch ``[num_envs, time, agents_in_group]``. One element of a group's batch
is one *row*: one agent at one step of one env. What the env reported after the step lives
under ``(NEXT, group, ...)``. The annotation keys live inside the group TensorDict, next to
``observation`` / ``action``.
"""

from __future__ import annotations

# -- the step: what the env gives and takes (inside each group; NEXT holds the step's results) ---
NEXT = "next"
OBSERVATION = "observation"
ACTION = "action"
ACTION_MASK = "action_mask"
REWARD = "reward"
DONE = "done"
TERMINATED = "terminated"
TRUNCATED = "truncated"
#: Root entry ``[num_envs, time, *state_shape]`` (and ``(NEXT, STATE)``): the env's global state,
#: where the env config records it (``PettingZooEnvConfig.state``); e.g. the input of a QMIX mixer.
STATE = "state"
#: A step result beside ``reward`` where a transform rescaled the rewards (``RewardNorm``): the
#: env's own reward, which the collector's episode statistics report.
ENV_REWARD = "env_reward"
#: Prefix of the step results that carry a numeric field of the env's per-agent ``infos``
#: (``info/score``), where the env config names the field (``info_fields``); NaN where the
#: agent's info did not report it at that step. Evaluation reports them; experience omits them.
INFO_PREFIX = "info/"


def info_key(field: str) -> str:
    """The step-result key of the env info field ``field`` (``"score"`` -> ``"info/score"``)."""
    return INFO_PREFIX + field


# -- what policies write ---------------------------------------------------------------------
ACTION_LOG_PROB = "action_log_prob"
LOGITS = "logits"
#: Parameters of a continuous action distribution (a Normal's mean and standard deviation).
LOC = "loc"
SCALE = "scale"
STATE_VALUE = "state_value"
#: Q-values of every discrete action ``[..., n_actions]`` and the one of the action taken.
ACTION_VALUE = "action_value"
CHOSEN_ACTION_VALUE = "chosen_action_value"
#: A continuous critic's Q(s, a).
STATE_ACTION_VALUE = "state_action_value"
#: A recurrent policy's hidden state before the step, the one it produced, and the flag that
#: marks a trajectory's first row (the state restarts from zeros there).
RECURRENT_STATE = "recurrent_state"
NEXT_RECURRENT_STATE = "next_recurrent_state"
IS_INIT = "is_init"

# -- what learners write ---------------------------------------------------------------------
ADVANTAGE = "advantage"
VALUE_TARGET = "value_target"
#: Bool rows a loss may learn from (inside the group of a batch handed to a TorchRL loss).
LOSS_MASK = "loss_mask"
#: Per-transition TD error a replay loss writes (TorchRL's ``priority`` key points here).
TD_ERROR = "td_error"
#: A value-decomposition mixer's team Q and double Q's bootstrap action (under NEXT).
TEAM_ACTION_VALUE = "team_action_value"
BOOTSTRAP_ACTION = "bootstrap_action"
#: Marks on the rows of a learner's kept tail of open transitions (turn-based envs,
#: ``lightmarl.algorithms.open_transitions``): the row's reward is not yet in a closed transition,
#: and a transition starting on the row may still enter a loss.
REWARD_UNCOUNTED = "reward_uncounted"
LEARNABLE = "learnable"
#: PPO's approximate KL between the policy that collected a rollout and the updated one (a loss output).
KL_APPROX = "kl_approx"
#: Loss outputs that fit a value or Q function (PPO's critic, SAC's Q, DDPG's value, DQN/QMIX's TD loss):
#: the terms a divergence watch compares with their own early values.
CRITIC_LOSS_TERMS = ("loss_critic", "loss_qvalue", "loss_value", "loss")

# -- per-row annotations (int64 ids, bool flags), shape [num_envs, time, agents_in_group] -------
BINDING_ID = "binding_id"
LOSS_PROFILE_ID = "loss_profile_id"
IS_TRAINABLE_AGENT = "is_trainable_agent"
AGENT_ID = "agent_id"  # index of the agent in the env's ``possible_agents``
EPISODE_ID = "episode_id"  # unique per (env copy, episode) within a run and rank
ENV_INDEX = "env_index"
VALID = "valid"  # the agent was present and acted at this step

#: The annotations every experience row carries (``binding_id``, ``loss_profile_id``,
#: ``is_trainable_agent``, plus where the row comes from).
ANNOTATION_KEYS = (BINDING_ID, LOSS_PROFILE_ID, IS_TRAINABLE_AGENT, AGENT_ID, EPISODE_ID, VALID)

# -- tracing rows to their episode -------------------------------------------------------------
#: Env step of the row within its episode (0 at the episode's first step), written by the collector.
TIME_INDEX = "time_index"
#: Bool entry of padded outputs: True where the position holds a stored row.
MASK = "mask"
#: Per-row extra entries a user stores beside the experience (e.g. LSTM hidden/cell states).
EXTRAS = "extras"

# -- saved files: the ``format`` tag of files lightmarl writes (read by policies, league, inference) ---
#: the ``format`` entry of a self-describing league snapshot file (``lightmarl.league.snapshots``).
SNAPSHOT_FORMAT = "lightmarl.snapshot/1"
