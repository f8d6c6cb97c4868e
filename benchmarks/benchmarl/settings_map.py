"""Every BenchMARL 1.5.2 setting and what it is in lightmarl: the data compare.py runs by.

BenchMARL configures a run on four axes (``conf/experiment/base_experiment.yaml``,
``conf/algorithm/<name>.yaml``, ``conf/model/layers/mlp.yaml`` for both the policy (``model``) and
the critic (``critic_model``), ``conf/task/vmas/<name>.yaml``). :data:`BENCHMARL_DEFAULTS` holds
their keys and default values as released in BenchMARL 1.5.2 (names and values only, no code);
:data:`RULES` says, for each key, which lightmarl setting takes its value (:class:`To`), that
lightmarl has no such knob and behaves as one value of it does (:class:`Fixed`: any other value
is refused, so a comparison never silently differs), or why it does not touch learning
(:class:`Ignored`). :data:`PINNED` lists the lightmarl settings that BenchMARL has no key for,
set to what BenchMARL's code does. :func:`lightmarl_settings` turns a BenchMARL configuration
into lightmarl's settings for one algorithm and task; :func:`cli_overrides` into ``lightmarl fit``
arguments.

``python benchmarks/benchmarl/settings_map.py`` prints the table of docs/reference/benchmarl_settings.md.
"""

from __future__ import annotations

import argparse
import copy
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: BenchMARL's algorithm names -> (lightmarl family, critic, whether lightmarl learns from joint
#: transitions of the whole group). A per-row learner (local critic, DQN) samples agent rows, so
#: BenchMARL's batch of env steps is ``n_agents`` times as many rows there.
ALGORITHMS: dict[str, tuple[str, str, bool]] = {
    "mappo": ("ppo", "centralized", True),
    "ippo": ("ppo", "local", True),
    "maddpg": ("ddpg", "centralized", True),
    "iddpg": ("ddpg", "local", False),
    "masac": ("sac", "centralized", True),
    "isac": ("sac", "local", False),
    "qmix": ("qmix", "none", True),
    "vdn": ("vdn", "none", True),
    "iql": ("dqn", "none", False),
}
#: lightmarl's algorithm and policy class of each family.
FAMILY_CLASSES: dict[str, tuple[str, str]] = {
    "ppo": ("lightmarl.algorithms.PPO", "lightmarl.policies.MLPActorCritic"),
    "ddpg": ("lightmarl.algorithms.DDPG", "lightmarl.policies.DeterministicActorCritic"),
    "sac": ("lightmarl.algorithms.SAC", "lightmarl.policies.SACActorCritic"),
    "qmix": ("lightmarl.algorithms.QMIX", "lightmarl.policies.qnet.QNetworkPolicy"),
    "vdn": ("lightmarl.algorithms.VDN", "lightmarl.policies.qnet.QNetworkPolicy"),
    "dqn": ("lightmarl.algorithms.DQN", "lightmarl.policies.qnet.QNetworkPolicy"),
}
#: BenchMARL's action kinds per family as lightmarl runs them (``None``: both, continuous preferred).
ACTIONS: dict[str, bool | None] = {"ppo": None, "ddpg": True, "sac": True, "qmix": False, "vdn": False, "dqn": False}
OFF_POLICY = ("ddpg", "sac", "qmix", "vdn", "dqn")
VALUE_BASED = ("qmix", "vdn", "dqn")

_PPO = {
    "share_param_critic": True,
    "clip_epsilon": 0.2,
    "entropy_coef": 0.0,
    "critic_coef": 1.0,
    "loss_critic_type": "l2",
    "lmbda": 0.9,
    "scale_mapping": "biased_softplus_1.0",
    "use_tanh_normal": True,
    "minibatch_advantage": False,
}
_DDPG = {"share_param_critic": True, "loss_function": "l2", "delay_value": True, "use_tanh_mapping": True}
_SAC = {
    "share_param_critic": True,
    "num_qvalue_nets": 2,
    "loss_function": "l2",
    "delay_qvalue": True,
    "target_entropy": "auto",
    "discrete_target_entropy_weight": 0.2,
    "alpha_init": 1.0,
    "min_alpha": None,
    "max_alpha": None,
    "fixed_alpha": False,
    "scale_mapping": "biased_softplus_1.0",
    "use_tanh_normal": True,
}
_MLP = {
    "name": "mlp",
    "num_cells": [256, 256],
    "layer_class": "torch.nn.Linear",
    "activation_class": "torch.nn.Tanh",
    "activation_kwargs": None,
    "norm_class": None,
    "norm_kwargs": None,
    "num_feature_dims": 1,
}

#: BenchMARL 1.5.2's released configuration: every key of the files above with its default.
BENCHMARL_DEFAULTS: dict[str, dict[str, Any]] = {
    "experiment": {
        "sampling_device": "cpu",
        "train_device": "cpu",
        "buffer_device": "cpu",
        "share_policy_params": True,
        "prefer_continuous_actions": True,
        "collect_with_grad": False,
        "parallel_collection": False,
        "gamma": 0.99,
        "lr": 0.00005,
        "adam_eps": 0.000001,
        "adam_extra_kwargs": {},
        "clip_grad_norm": True,
        "clip_grad_val": 5,
        "soft_target_update": True,
        "polyak_tau": 0.005,
        "hard_target_update_frequency": 5,
        "exploration_eps_init": 0.8,
        "exploration_eps_end": 0.01,
        "exploration_anneal_frames": None,
        "max_n_iters": None,
        "max_n_frames": 3_000_000,
        "on_policy_collected_frames_per_batch": 6000,
        "on_policy_n_envs_per_worker": 10,
        "on_policy_n_minibatch_iters": 45,
        "on_policy_minibatch_size": 400,
        "off_policy_collected_frames_per_batch": 6000,
        "off_policy_n_envs_per_worker": 10,
        "off_policy_n_optimizer_steps": 1000,
        "off_policy_train_batch_size": 128,
        "off_policy_memory_size": 1_000_000,
        "off_policy_init_random_frames": 0,
        "off_policy_use_prioritized_replay_buffer": False,
        "off_policy_prb_alpha": 0.6,
        "off_policy_prb_beta": 0.4,
        "evaluation": True,
        "render": True,
        "evaluation_interval": 120_000,
        "evaluation_episodes": 10,
        "evaluation_deterministic_actions": True,
        "evaluation_static": False,
        "loggers": ["csv", "wandb"],
        "project_name": "benchmarl",
        "wandb_extra_kwargs": {},
        "create_json": True,
        "save_folder": None,
        "restore_file": None,
        "restore_map_location": None,
        "checkpoint_interval": 0,
        "checkpoint_at_end": False,
        "keep_checkpoints_num": 3,
        "exclude_buffer_from_checkpoint": False,
    },
    "model": dict(_MLP),
    "critic_model": dict(_MLP),
    "algorithm/mappo": dict(_PPO),
    "algorithm/ippo": dict(_PPO),
    "algorithm/maddpg": dict(_DDPG),
    "algorithm/iddpg": dict(_DDPG),
    "algorithm/masac": {**_SAC, "coupled_discrete_values": True},
    "algorithm/isac": dict(_SAC),
    "algorithm/qmix": {"mixing_embed_dim": 32, "delay_value": True, "loss_function": "l2"},
    "algorithm/vdn": {"delay_value": True, "loss_function": "l2"},
    "algorithm/iql": {"delay_value": True, "loss_function": "l2"},
    "task/vmas/balance": {"max_steps": 100, "n_agents": 4, "random_package_pos_on_line": True, "package_mass": 5},
    "task/vmas/sampling": {
        "max_steps": 100,
        "n_agents": 3,
        "shared_rew": False,
        "n_gaussians": 3,
        "lidar_range": 0.2,
        "cov": 0.05,
        "collisions": True,
        "spawn_same_pos": False,
    },
    "task/vmas/navigation": {
        "max_steps": 100,
        "n_agents": 3,
        "collisions": True,
        "agents_with_same_goal": 1,
        "split_goals": False,
        "observe_all_goals": False,
        "shared_rew": False,
        "lidar_range": 0.35,
        "agent_radius": 0.1,
    },
}


@dataclass(frozen=True)
class Context:
    """What a rule reads besides its own value: the run's algorithm, task and whole BenchMARL config.

    Attributes:
        algorithm: BenchMARL's algorithm name (a key of :data:`ALGORITHMS`).
        config: section -> key -> value (``experiment``, ``algorithm``, ``model``, ``critic_model``, ``task``).
        action_range: high - low of the task's continuous actions (VMAS: 2, forces in [-1, 1]).
    """

    algorithm: str
    config: Mapping[str, Mapping[str, Any]]
    action_range: float = 2.0

    @property
    def family(self) -> str:
        return ALGORITHMS[self.algorithm][0]

    @property
    def joint(self) -> bool:
        return ALGORITHMS[self.algorithm][2]

    @property
    def off_policy(self) -> bool:
        return self.family in OFF_POLICY

    def experiment(self, key: str) -> Any:
        return self.config["experiment"][key]

    def n_agents(self) -> int:
        return int(self.config["task"]["n_agents"])

    def frames_per_batch(self) -> int:
        prefix = "off_policy" if self.off_policy else "on_policy"
        return int(self.experiment(f"{prefix}_collected_frames_per_batch"))

    def max_frames(self) -> int:
        iters = self.experiment("max_n_iters")
        return int(iters) * self.frames_per_batch() if iters is not None else int(self.experiment("max_n_frames"))

    def rows(self, env_steps: int) -> int:
        """``env_steps`` of the whole group, in the units of lightmarl's learner (rows for a per-row learner)."""
        return env_steps if self.joint else env_steps * self.n_agents()


@dataclass(frozen=True)
class To:
    """BenchMARL's value goes to lightmarl setting(s).

    Attributes:
        keys: family -> the lightmarl settings it sets (``"*"``: every family); a family not named
            has no such setting: the BenchMARL key does not apply to it (:attr:`otherwise`).
        convert: ``(value, context) -> lightmarl value`` (default: the value itself).
        note: how the value is converted, when it is.
        otherwise: why the key does not apply to the families :attr:`keys` leaves out.
    """

    keys: Mapping[str, Sequence[str]]
    convert: Callable[[Any, Context], Any] | None = None
    note: str = ""
    otherwise: str = ""

    def settings(self, value: Any, context: Context) -> dict[str, Any]:
        if context.family not in self.keys and "*" not in self.keys:
            return {}
        targets = self.keys.get(context.family, self.keys.get("*", ()))
        # Converted even without a target: a conversion also refuses values lightmarl cannot match.
        converted = value if self.convert is None else self.convert(value, context)
        return dict.fromkeys(targets, converted)


@dataclass(frozen=True)
class Fixed:
    """lightmarl has no such knob: it always behaves as BenchMARL does with ``value``; another value is refused.

    Attributes:
        value: the one value lightmarl matches.
        why: what lightmarl does instead of a knob.
        families: the families the constraint applies to (empty: every one).
    """

    value: Any
    why: str
    families: tuple[str, ...] = field(default=())

    def settings(self, value: Any, context: Context, name: str) -> dict[str, Any]:
        if (not self.families or context.family in self.families) and value != self.value:
            raise ValueError(
                f"BenchMARL setting {name}={value!r}: lightmarl can only match {self.value!r} here ({self.why})"
            )
        return {}


@dataclass(frozen=True)
class Ignored:
    """The setting does not change what is learned (logging, files, devices of a CPU run).

    Attributes:
        why: what it does and why a comparison need not match it.
    """

    why: str

    def settings(self, value: Any, context: Context, name: str) -> dict[str, Any]:
        del value, context, name
        return {}


Rule = To | Fixed | Ignored
A = "algorithm."
POLICY = "policy_kwargs."
_EVERY_LR = {
    "ppo": [A + "lr"],
    "ddpg": [A + "actor_lr", A + "critic_lr"],
    "sac": [A + "actor_lr", A + "critic_lr", A + "alpha_lr"],
}
_EVERY_LR |= {family: [A + "lr"] for family in VALUE_BASED}


def _off(name: str, families: Sequence[str] = OFF_POLICY) -> dict[str, list[str]]:
    return {family: [A + name] for family in families}


def _activation(value: Any, context: Context) -> str:
    del context
    names = {"torch.nn.Tanh": "tanh", "torch.nn.ReLU": "relu", "torch.nn.ELU": "elu", "torch.nn.GELU": "gelu"}
    if value not in names:
        raise ValueError(f"BenchMARL setting model.activation_class={value!r}: lightmarl offers {sorted(names)}")
    return names[value]


def _per_env(value: Any, context: Context) -> int:
    """BenchMARL's frames per batch as each env copy's rollout steps."""
    del value
    prefix = "off_policy" if context.off_policy else "on_policy"
    frames, envs = context.frames_per_batch(), int(context.experiment(f"{prefix}_n_envs_per_worker"))
    if frames % envs:
        raise ValueError(
            f"{prefix}_collected_frames_per_batch={frames} is not a multiple of {prefix}_n_envs_per_worker={envs}"
        )
    return frames // envs


def _epochs(value: Any, context: Context) -> int:
    """Each of BenchMARL's ``n_minibatch_iters`` iterations takes ``frames / minibatch_size`` minibatches
    without replacement (``Experiment._collection_loop``): one pass over the batch, so that many epochs."""
    minibatch, frames = int(context.experiment("on_policy_minibatch_size")), context.frames_per_batch()
    if frames % minibatch:
        raise ValueError(
            f"on_policy_collected_frames_per_batch={frames} is not a multiple of on_policy_minibatch_size={minibatch}: "
            "BenchMARL's passes would then run across its iterations, and lightmarl counts whole passes (epochs)"
        )
    return int(value)


def _evaluation_every(value: Any, context: Context) -> int:
    batch = context.frames_per_batch()
    if int(value) % batch:
        raise ValueError(f"evaluation_interval={value} is not a multiple of the collected frames per batch ({batch})")
    return int(value) // batch


def _anneal(value: Any, context: Context) -> int:
    # BenchMARL's default (null): a third of the run's frames.
    return context.max_frames() // 3 if value is None else int(value)


def _noise(value: Any, context: Context) -> float:
    # BenchMARL's AdditiveGaussianModule adds sigma x N(0, 1) to the action; lightmarl's noise is a
    # fraction of the action range.
    return float(value) / context.action_range


def _scale(value: Any, context: Context) -> float:
    del context
    prefix = "biased_softplus_"
    if not str(value).startswith(prefix):
        raise ValueError(f"BenchMARL setting algorithm.scale_mapping={value!r}: lightmarl offers biased_softplus_<std>")
    return float(str(value)[len(prefix) :])


def _critic_same(value: Any, context: Context) -> list[int]:
    if list(value) != list(context.config["model"]["num_cells"]):
        raise ValueError(
            f"BenchMARL setting critic_model.num_cells={value!r}: lightmarl's policies have one hidden_sizes for "
            f"actor and critic; set it equal to model.num_cells={context.config['model']['num_cells']!r}"
        )
    return list(value)


_NO_TARGET = "PPO has no target network"
_STOCHASTIC = (
    "SAC and PPO explore by sampling their stochastic policy; the schedule drives DDPG's noise and DQN's epsilon"
)
_LOGGING = "logging only: compare.py reads lightmarl's CSV log (trainer.logger) and BenchMARL's csv logger"
_MODEL: dict[str, Rule] = {
    "name": Fixed("mlp", "lightmarl's policies are MLPs on the flattened observation"),
    "num_cells": To({"*": [POLICY + "hidden_sizes"]}, convert=lambda v, c: list(v)),
    "layer_class": Fixed("torch.nn.Linear", "lightmarl's MLP layers are torch.nn.Linear"),
    "activation_class": To({"*": [POLICY + "activation"]}, convert=_activation, note="torch.nn.Tanh -> tanh"),
    "activation_kwargs": Fixed(None, "lightmarl's activations take no arguments"),
    "norm_class": Fixed(None, "lightmarl's MLPs have no normalisation layers"),
    "norm_kwargs": Fixed(None, "lightmarl's MLPs have no normalisation layers"),
    "num_feature_dims": Fixed(1, "lightmarl flattens each observation to one feature dimension"),
}
_CRITIC_MODEL: dict[str, Rule] = {
    **_MODEL,
    "num_cells": To({"*": []}, convert=_critic_same, note="must equal model.num_cells (one hidden_sizes for both)"),
    "activation_class": Fixed("torch.nn.Tanh", "lightmarl's critic has the actor's activation; BenchMARL's default"),
}

#: section -> BenchMARL key -> rule. Algorithm keys are under ``algorithm`` (shared by the files that have them).
RULES: dict[str, dict[str, Rule]] = {
    "experiment": {
        "sampling_device": To({"*": ["env.device"]}),
        "train_device": To(
            {"*": ["trainer.accelerator"]}, convert=lambda v, c: "gpu" if str(v).startswith("cuda") else str(v)
        ),
        "buffer_device": Ignored(
            "lightmarl's replay buffer lives on its learner's device; a CPU run keeps both on the CPU"
        ),
        "share_policy_params": Fixed(True, "one binding controls the group and its agents share its policy"),
        "prefer_continuous_actions": To(
            {"ppo": ["env.continuous_actions"]},
            otherwise="the other families have one action kind in lightmarl: DDPG and SAC continuous, QMIX/VDN/DQN discrete",
        ),
        "collect_with_grad": Fixed(False, "lightmarl collects without gradients"),
        "parallel_collection": Ignored("VMAS simulates every env copy in one batched call; there are no workers"),
        "gamma": To({"*": [A + "gamma"]}),
        "lr": To(_EVERY_LR, note="every learning rate of the algorithm (BenchMARL has one Adam per loss, all at lr)"),
        "adam_eps": To({"*": [A + "adam_eps"]}),
        "adam_extra_kwargs": Fixed({}, "lightmarl's Adam takes lr and eps only"),
        "clip_grad_norm": Fixed(True, "lightmarl clips the gradient norm; clipping by value is not offered"),
        "clip_grad_val": To(
            {"*": [A + "max_grad_norm"]},
            note="BenchMARL clips each loss's optimizer on its own (PPO's, DDPG's and SAC's actor and critic, SAC's "
            "temperature); so does lightmarl with clip_each_network: true (pinned below); the value-based families "
            "step one network, whose norm is clipped",
        ),
        "soft_target_update": To(
            {family: [A + "target_update"] for family in VALUE_BASED},
            convert=lambda v, c: "soft" if v else "hard",
            otherwise="DDPG and SAC update targets softly only (true); " + _NO_TARGET,
        ),
        "polyak_tau": To(_off("tau"), otherwise=_NO_TARGET),
        "hard_target_update_frequency": To(
            _off("target_update_interval", VALUE_BASED),
            otherwise="read only with soft_target_update false (DQN family)",
        ),
        "exploration_eps_init": To(
            {**_off("eps_start", VALUE_BASED), "ddpg": [A + "noise_start"]},
            convert=lambda v, c: _noise(v, c) if c.family == "ddpg" else float(v),
            note="DDPG: sigma / action range (lightmarl's noise is a fraction of the range)",
            otherwise=_STOCHASTIC,
        ),
        "exploration_eps_end": To(
            {**_off("eps_end", VALUE_BASED), "ddpg": [A + "noise_end"]},
            convert=lambda v, c: _noise(v, c) if c.family == "ddpg" else float(v),
            note="DDPG: sigma / action range",
            otherwise=_STOCHASTIC,
        ),
        "exploration_anneal_frames": To(
            {**_off("eps_decay_frames", VALUE_BASED), "ddpg": [A + "noise_decay_frames"]},
            convert=_anneal,
            note="null: max_n_frames // 3 (BenchMARL's default)",
            otherwise=_STOCHASTIC,
        ),
        "max_n_iters": To({"*": []}, note="when set, max_frames = max_n_iters x frames per batch"),
        "max_n_frames": To({"*": ["model.max_frames"]}, convert=lambda v, c: c.max_frames()),
        "on_policy_collected_frames_per_batch": To(
            {"ppo": ["model.rollout_steps"]},
            convert=_per_env,
            note="/ n_envs_per_worker",
            otherwise="off-policy families",
        ),
        "on_policy_n_envs_per_worker": To({"ppo": ["env.num_envs"]}, otherwise="off-policy families"),
        "on_policy_n_minibatch_iters": To(
            {"ppo": [A + "epochs"]},
            convert=_epochs,
            note="each iteration is one pass over the batch in minibatches",
            otherwise="off-policy families",
        ),
        "on_policy_minibatch_size": To({"ppo": [A + "minibatch_size"]}, otherwise="off-policy families"),
        "off_policy_collected_frames_per_batch": To(
            {f: ["model.rollout_steps"] for f in OFF_POLICY},
            convert=_per_env,
            note="/ n_envs_per_worker",
            otherwise="PPO",
        ),
        "off_policy_n_envs_per_worker": To({f: ["env.num_envs"] for f in OFF_POLICY}, otherwise="PPO"),
        "off_policy_n_optimizer_steps": To(_off("updates_per_iteration"), otherwise="PPO"),
        "off_policy_train_batch_size": To(
            {f: [A + "batch_size", A + "learning_starts"] for f in OFF_POLICY},
            convert=lambda v, c: c.rows(int(v)),
            note="env steps; x n_agents rows for a per-row learner (IDDPG, ISAC, IQL); learning starts at the first "
            "batch as in BenchMARL",
            otherwise="PPO",
        ),
        "off_policy_memory_size": To(
            _off("buffer_size"),
            convert=lambda v, c: c.rows(int(v)),
            note="x n_agents rows for a per-row learner",
            otherwise="PPO",
        ),
        "off_policy_init_random_frames": Fixed(0, "lightmarl does not prefill the replay buffer with random actions"),
        "off_policy_use_prioritized_replay_buffer": Fixed(False, "lightmarl's replay samples uniformly"),
        "off_policy_prb_alpha": Ignored("read only with a prioritized replay buffer"),
        "off_policy_prb_beta": Ignored("read only with a prioritized replay buffer"),
        "evaluation": Fixed(True, "lightmarl evaluates after every epoch (model.iterations_per_epoch iterations)"),
        "render": Ignored(
            "videos of evaluation episodes (lightmarl: evaluation.validation.video_episodes); compare.py turns it off"
        ),
        "evaluation_interval": To(
            {"*": ["model.iterations_per_epoch"]}, convert=_evaluation_every, note="/ frames per batch"
        ),
        "evaluation_episodes": To(
            {"*": ["evaluation.validation.episodes", "evaluation.validation.num_envs"]},
            note="BenchMARL plays them as one batch of as many VMAS env copies",
        ),
        "evaluation_deterministic_actions": To({"*": ["evaluation.validation.deterministic"]}),
        "evaluation_static": Ignored(
            "lightmarl plays the same seeded episodes (evaluation.validation.seed) at every evaluation, as static=true; the "
            "default false draws new ones: evaluation noise, not learning"
        ),
        "loggers": Ignored(_LOGGING),
        "project_name": Ignored(_LOGGING),
        "wandb_extra_kwargs": Ignored(_LOGGING),
        "create_json": Ignored(_LOGGING),
        "save_folder": Ignored("the run's folder (lightmarl: trainer.default_root_dir)"),
        "restore_file": Ignored("resuming (lightmarl: --ckpt_path); comparisons start fresh"),
        "restore_map_location": Ignored("resuming"),
        "checkpoint_interval": Ignored("checkpoint files (lightmarl: trainer.enable_checkpointing)"),
        "checkpoint_at_end": Ignored("checkpoint files"),
        "keep_checkpoints_num": Ignored("checkpoint files"),
        "exclude_buffer_from_checkpoint": Ignored("checkpoint files (lightmarl: model.checkpoint_replay)"),
    },
    "model": _MODEL,
    "critic_model": _CRITIC_MODEL,
    "algorithm": {
        "share_param_critic": Fixed(
            True,
            "the critic is one network for the group's agents; a centralized one has one value for the whole group, "
            "given to every agent (MAPPO's value network always; MADDPG and MASAC: policy_kwargs.critic_value group)",
        ),
        "clip_epsilon": To({"ppo": [A + "clip_epsilon"]}),
        "entropy_coef": To({"ppo": [A + "entropy_coeff"]}),
        "critic_coef": To({"ppo": [A + "critic_coeff"]}),
        "loss_critic_type": To({"ppo": [A + "loss_critic_type"]}),
        "lmbda": To({"ppo": [A + "lmbda"]}),
        "scale_mapping": To(
            {"ppo": [POLICY + "init_action_std"], "sac": []},
            convert=_scale,
            note="biased_softplus_<std>: a state-dependent scale, softplus biased to <std> at 0 "
            "(PPO: policy_kwargs.action_std state; SAC's actor always maps so, with std 1)",
        ),
        "use_tanh_normal": Fixed(True, "lightmarl's stochastic actors are tanh-normal"),
        "minibatch_advantage": Fixed(False, "lightmarl computes advantages over the whole rollout"),
        "loss_function": To({f: [A + "loss_function"] for f in OFF_POLICY}),
        "delay_value": Fixed(True, "lightmarl's DDPG and DQN family always learn against target networks"),
        "use_tanh_mapping": Fixed(True, "lightmarl's deterministic actor squashes with tanh into the action bounds"),
        "num_qvalue_nets": To({"sac": [POLICY + "num_qvalue_nets"]}),
        "delay_qvalue": Fixed(True, "lightmarl's SAC always learns against target critics"),
        "target_entropy": To({"sac": [A + "target_entropy"]}),
        "discrete_target_entropy_weight": Ignored("discrete-action SAC only; lightmarl's SAC is continuous"),
        "alpha_init": To({"sac": [A + "alpha_init"]}),
        "min_alpha": Fixed(None, "lightmarl does not clamp the temperature"),
        "max_alpha": Fixed(None, "lightmarl does not clamp the temperature"),
        "fixed_alpha": To({"sac": [A + "fixed_alpha"]}),
        "coupled_discrete_values": Ignored("discrete-action SAC only; lightmarl's SAC is continuous"),
        "mixing_embed_dim": To({"qmix": [A + "mixing_embed_dim"]}),
    },
    "task": {},  # every task key: see task_rule()
}


def task_rule(key: str) -> Rule:
    """A VMAS task setting: the episode length, or a keyword argument of the scenario."""
    if key == "max_steps":
        return To({"*": ["env.max_steps"]})
    return To({"*": [f"env.scenario_kwargs.{key}"]})


#: BenchMARL's VMAS runs do not bootstrap at the horizon: every family's targets (TD and GAE) stop there.
NO_BOOTSTRAP_AT_HORIZON = (
    False,
    "TorchRL's VmasEnv, which BenchMARL's VMAS tasks build, sets terminated at max_steps: no bootstrap there",
)
#: BenchMARL gives each loss term its own optimizer and clips each one's gradient norm apart.
EACH_LOSS_CLIPPED = (
    True,
    "BenchMARL has one optimizer per loss term (actor, critic, SAC's temperature), each clipped by its own norm",
)
#: lightmarl settings BenchMARL has no key for, set to what BenchMARL's code does (family -> setting -> value).
PINNED: dict[str, dict[str, tuple[Any, str]]] = {
    "ppo": {
        A + "normalize_advantage": (False, "BenchMARL's MAPPO/IPPO build ClipPPOLoss(normalize_advantage=False)"),
        A + "max_kl": (None, "BenchMARL stops no update early on a KL bound"),
        A + "anneal_lr": (False, "BenchMARL keeps lr constant"),
        A + "bootstrap_truncated": NO_BOOTSTRAP_AT_HORIZON,
        POLICY + "action_std": ("state", "BenchMARL's actor outputs loc and scale (NormalParamExtractor)"),
        A + "clip_each_network": EACH_LOSS_CLIPPED,
    },
    "ddpg": {
        A + "bootstrap_truncated": NO_BOOTSTRAP_AT_HORIZON,
        A + "clip_each_network": EACH_LOSS_CLIPPED,
        A + "delay_actor": (
            False,
            "BenchMARL's MADDPG/IDDPG build DDPGLoss without delay_actor (TorchRL's default, False): "
            "no target actor, the TD target's next action is the actor's",
        ),
    },
    "sac": {
        A + "bootstrap_truncated": NO_BOOTSTRAP_AT_HORIZON,
        A + "clip_each_network": EACH_LOSS_CLIPPED,
    },
    "qmix": {
        A + "double_dqn": (False, "BenchMARL's QMixerLoss bootstraps with the target network's max"),
        A + "team_reward": ("mean", "BenchMARL's QMIX/VDN learn from the agents' mean reward"),
        A + "bootstrap_truncated": NO_BOOTSTRAP_AT_HORIZON,
    },
    "vdn": {
        A + "double_dqn": (False, "BenchMARL's QMixerLoss bootstraps with the target network's max"),
        A + "team_reward": ("mean", "BenchMARL's QMIX/VDN learn from the agents' mean reward"),
        A + "bootstrap_truncated": NO_BOOTSTRAP_AT_HORIZON,
    },
    "dqn": {
        A + "double_dqn": (False, "BenchMARL's IQL builds DQNLoss without double_dqn"),
        A + "bootstrap_truncated": NO_BOOTSTRAP_AT_HORIZON,
    },
}


def rule(section: str, key: str) -> Rule | None:
    """The rule of BenchMARL's ``section`` (``experiment``, ``model``, ``algorithm/<name>``, ``task/vmas/<name>``) key."""
    if section == "task" or section.startswith("task/"):
        return task_rule(key)
    return RULES.get(section.split("/")[0], {}).get(key)


def unmapped(defaults: Mapping[str, Mapping[str, Any]] = BENCHMARL_DEFAULTS) -> list[str]:
    """``section.key`` of every BenchMARL setting in ``defaults`` that has no rule."""
    return [f"{section}.{key}" for section, values in defaults.items() for key in values if rule(section, key) is None]


def benchmarl_config(algorithm: str, task: str, changes: Mapping[str, Any] = ()) -> dict[str, dict[str, Any]]:
    """BenchMARL's configuration of ``algorithm`` on ``task`` (``vmas/balance``) with ``changes``
    (``experiment.max_n_frames`` -> value, as BenchMARL's command line takes them) applied."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm {algorithm!r} is not one of BenchMARL's {sorted(ALGORITHMS)}")
    if f"task/{task}" not in BENCHMARL_DEFAULTS:
        raise ValueError(f"task {task!r}: the map knows {[s[5:] for s in BENCHMARL_DEFAULTS if s.startswith('task/')]}")
    config = {
        "experiment": copy.deepcopy(BENCHMARL_DEFAULTS["experiment"]),
        "algorithm": copy.deepcopy(BENCHMARL_DEFAULTS[f"algorithm/{algorithm}"]),
        "model": copy.deepcopy(BENCHMARL_DEFAULTS["model"]),
        "critic_model": copy.deepcopy(BENCHMARL_DEFAULTS["critic_model"]),
        "task": copy.deepcopy(BENCHMARL_DEFAULTS[f"task/{task}"]),
    }
    for name, value in dict(changes).items():
        section, _, key = name.partition(".")
        if section not in config or key not in config[section]:
            raise ValueError(f"BenchMARL setting {name!r}: no such key in {algorithm} on {task}")
        config[section][key] = value
    return config


def lightmarl_settings(
    algorithm: str, config: Mapping[str, Mapping[str, Any]], action_range: float = 2.0
) -> dict[str, Any]:
    """lightmarl's settings (``algorithm.<field>``, ``policy_kwargs.<key>``, ``env.<field>``, ``model.<field>``,
    ``trainer.<field>``) for BenchMARL's ``config`` of ``algorithm``: every rule applied, then :data:`PINNED`.

    Raises:
        ValueError: a BenchMARL value lightmarl cannot match, naming the setting.
    """
    context = Context(algorithm, config, action_range)
    settings: dict[str, Any] = {}
    for section, values in config.items():
        for key, value in values.items():
            found = rule(section if section != "algorithm" else f"algorithm/{algorithm}", key)
            if found is None:
                raise ValueError(f"BenchMARL setting {section}.{key} has no rule in settings_map.RULES")
            if isinstance(found, To):
                settings.update(found.settings(value, context))
            else:
                found.settings(value, context, f"{section}.{key}")
    family, critic, _ = ALGORITHMS[algorithm]
    if family == "sac" and not config["experiment"]["prefer_continuous_actions"]:
        raise ValueError(
            "BenchMARL setting experiment.prefer_continuous_actions=False: BenchMARL would train discrete SAC, "
            "lightmarl's SAC is continuous only"
        )
    if critic != "none":
        settings[POLICY + "critic"] = critic
    if critic == "centralized" and family in ("ddpg", "sac"):
        # BenchMARL's shared centralized critic (MultiAgentMLP, centralised and share_params) has one output,
        # expanded to every agent (benchmarl/algorithms/maddpg.py, masac.py: get_value_module).
        settings[POLICY + "critic_value"] = "group"
    if ACTIONS[family] is not None:
        settings["env.continuous_actions"] = ACTIONS[family]
    for key, (value, _) in PINNED.get(family, {}).items():
        settings[key] = value
    return settings


def cli_overrides(algorithm: str, settings: Mapping[str, Any], binding: str = "main") -> list[str]:
    """``lightmarl fit`` arguments for :func:`lightmarl_settings`' output: the algorithm and the binding
    written whole (a list entry cannot be overridden field by field), the rest one field each."""
    family = ALGORITHMS[algorithm][0]
    algorithm_class, policy_class = FAMILY_CLASSES[family]
    init_args = {k[len(A) :]: v for k, v in settings.items() if k.startswith(A)}
    kwargs = {k[len(POLICY) :]: v for k, v in settings.items() if k.startswith(POLICY)}
    scenario = {
        k[len("env.scenario_kwargs.") :]: v for k, v in settings.items() if k.startswith("env.scenario_kwargs.")
    }
    arguments = [
        f"--model.algorithm={json.dumps({'class_path': algorithm_class, 'init_args': init_args})}",
        f"--model.policy_bindings={json.dumps([{'id': binding, 'class_path': policy_class, 'policy_kwargs': kwargs}])}",
    ]
    if scenario:
        arguments.append(f"--model.env.init_args.scenario_kwargs={json.dumps(scenario)}")
    for key, value in settings.items():
        if key.startswith((A, POLICY, "env.scenario_kwargs.")):
            continue
        if key.startswith("env."):
            key = "model.env.init_args." + key[len("env.") :]
        # A string as itself: the command line reads a quoted one as the quotes too.
        arguments.append(f"--{key}={value if isinstance(value, str) else json.dumps(value)}")
    return arguments


#: settings a recipe leaves to the machine it runs on (compare.py still passes them).
RECIPE_SKIPS = ("env.device", "trainer.accelerator")
RECIPES_DIR = "recipes/benchmarl"


#: settings of the recipe's validation episodes (its `evaluation:` section).
VALIDATION = "evaluation.validation."


def recipe_text(algorithm: str, task: str = "vmas/balance") -> str:
    """The recipe ``recipes/benchmarl/<algorithm>.yaml``: BenchMARL's defaults of ``algorithm`` on ``task``, mapped."""
    import yaml

    settings = lightmarl_settings(algorithm, benchmarl_config(algorithm, task))
    family = ALGORITHMS[algorithm][0]
    algorithm_class, policy_class = FAMILY_CLASSES[family]
    scenario = task.split("/")[1]
    env: dict[str, Any] = {"scenario": scenario, "scenario_kwargs": {}}
    model: dict[str, Any] = {}
    init_args: dict[str, Any] = {}
    kwargs: dict[str, Any] = {}
    validation: dict[str, Any] = {}
    for key, value in settings.items():
        if key in RECIPE_SKIPS:
            continue
        if key.startswith("env.scenario_kwargs."):
            env["scenario_kwargs"][key.rsplit(".", 1)[1]] = value
        elif key.startswith("env."):
            env[key[len("env.") :]] = value
        elif key.startswith(A):
            init_args[key[len(A) :]] = value
        elif key.startswith(POLICY):
            kwargs[key[len(POLICY) :]] = value
        elif key.startswith(VALIDATION):
            validation[key[len(VALIDATION) :]] = value
        else:
            model[key.split(".", 1)[1]] = value
    recipe = {
        "seed_everything": 0,
        "model": {
            "env": {"class_path": "lightmarl.envs.vmas.VmasEnvConfig", "init_args": env},
            "policy_bindings": [{"id": "main", "class_path": policy_class, "policy_kwargs": kwargs}],
            "algorithm": {"class_path": algorithm_class, "init_args": init_args},
            **model,
        },
        **({"evaluation": {"validation": validation}} if validation else {}),
    }
    header = (
        f"# {algorithm.upper()} on VMAS {scenario} with BenchMARL 1.5.2's default settings (conf/algorithm/{algorithm}.yaml,\n"
        "# conf/experiment/base_experiment.yaml, conf/model/layers/mlp.yaml for actor and critic,\n"
        f"# conf/task/{task}.yaml), each mapped to lightmarl by benchmarks/benchmarl/settings_map.py\n"
        "# (docs/reference/benchmarl_settings.md); written by `python benchmarks/benchmarl/settings_map.py --write-recipes`.\n"
        "# BenchMARL's own budget: 3M frames. Another task or budget, with both frameworks side by side:\n"
        f"#   python benchmarks/benchmarl/compare.py --algorithms {algorithm} --tasks vmas_navigation --frames 60000\n"
        "# Needs the extra: pip install 'lightmarl[vmas]'.\n"
        f"#   lightmarl fit --config {RECIPES_DIR}/{algorithm}.yaml\n"
    )
    return header + yaml.safe_dump(recipe, sort_keys=False, default_flow_style=None, width=110)


def _cell(value: Any) -> str:
    return "`null`" if value is None else f"`{json.dumps(value)}`"


def _families(keys: Mapping[str, Sequence[str]]) -> str:
    if set(keys) == {"*"}:
        return ""
    names = {
        "ppo": "MAPPO/IPPO",
        "ddpg": "MADDPG/IDDPG",
        "sac": "MASAC/ISAC",
        "qmix": "QMIX",
        "vdn": "VDN",
        "dqn": "IQL",
    }
    return ", ".join(names[f] for f in keys if keys[f])


def markdown_table() -> str:
    """The settings map as Markdown: one row per BenchMARL setting, then lightmarl's pinned settings."""
    lines = [
        "| BenchMARL setting | default | lightmarl setting | how |",
        "| --- | --- | --- | --- |",
    ]
    seen: set[tuple[str, str]] = set()
    for section, values in BENCHMARL_DEFAULTS.items():
        group = section.split("/")[0] if not section.startswith("task/") else section
        for key, value in values.items():
            name = f"algorithm.{key}" if group == "algorithm" else f"{group}.{key}"
            if (group, key) in seen and group == "algorithm":
                continue
            seen.add((group, key))
            found = rule(section, key)
            if group == "algorithm":
                owners = [
                    s.split("/")[1] for s, v in BENCHMARL_DEFAULTS.items() if s.startswith("algorithm/") and key in v
                ]
                name += f" ({', '.join(owners)})"
                value = BENCHMARL_DEFAULTS[section][key]
            if isinstance(found, To):
                targets = sorted({t for ts in found.keys.values() for t in ts})
                families = _families(found.keys)
                where = ", ".join(f"`{t}`" for t in targets) or "—"
                how = "; ".join(
                    x
                    for x in (
                        families and f"for {families}",
                        found.note,
                        found.otherwise and f"n/a for the rest: {found.otherwise}",
                    )
                    if x
                )
            elif isinstance(found, Fixed):
                where, how = "not applicable", f"lightmarl always behaves as {_cell(found.value)}: {found.why}"
            else:
                assert found is not None
                where, how = "not applicable", found.why
            lines.append(f"| `{name}` | {_cell(value)} | {where} | {how} |")
    lines += ["", "| lightmarl setting (no BenchMARL key) | family | value | why |", "| --- | --- | --- | --- |"]
    for family, pinned in PINNED.items():
        for key, (value, why) in pinned.items():
            lines.append(f"| `{key}` | {family} | {_cell(value)} | {why} |")
    lines.append(
        "| `policy_kwargs.critic` | actor-critic | `centralized` (MA*), `local` (I*) | BenchMARL's critic of the algorithm |"
    )
    lines.append(
        '| `policy_kwargs.critic_value` | ddpg, sac | `"group"` (MADDPG, MASAC) | BenchMARL\'s shared centralized '
        "critic has one output, given to every agent |"
    )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Print the BenchMARL -> lightmarl settings map")
    parser.add_argument("--algorithm", choices=sorted(ALGORITHMS), help="print lightmarl's settings for this algorithm")
    parser.add_argument("--task", default="vmas/balance")
    parser.add_argument("--write-recipes", action="store_true", help=f"write {RECIPES_DIR}/<algorithm>.yaml")
    args = parser.parse_args(argv)
    if args.write_recipes:
        from pathlib import Path

        folder = Path(__file__).resolve().parents[2] / RECIPES_DIR
        folder.mkdir(parents=True, exist_ok=True)
        for algorithm in ALGORITHMS:
            (folder / f"{algorithm}.yaml").write_text(recipe_text(algorithm))
        print("wrote", folder)
    elif args.algorithm:
        config = benchmarl_config(args.algorithm, args.task)
        print(json.dumps(lightmarl_settings(args.algorithm, config), indent=1))
    else:
        print(markdown_table(), end="")


if __name__ == "__main__":
    main()
