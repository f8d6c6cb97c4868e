"""The one rollout loop: act with the population, step the vector env, hand each step to a recorder.

Training collection ([`RolloutCollector`][lightmarl.data.collector.RolloutCollector]), evaluation episodes
([`evaluate_episodes`][lightmarl.evaluation.episodes.evaluate_episodes]) and evaluation videos
(`record_episodes`) all step envs through `RolloutLoop`;
they differ only in their `StepRecorder` (experience assembly, per-binding returns,
an episode count) and in when they stop.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, cast

import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lightmarl import keys
from lightmarl.policies.multi_agent import MultiAgentPolicy
from lightmarl.policies.recurrent import RecurrentStates

if TYPE_CHECKING:
    from lightmarl.envs.base import VecEnv


class RolloutStep(NamedTuple):
    """One env step of one lane, as a recorder receives it.

    Attributes:
        lane: the lane's position in `RolloutLoop.lanes`.
        envs: the lane's env copies in the whole vector (consecutive).
        td: the policy's input and output for the lane's copies (observation, validity,
            annotations, action, log-prob, ... and, for recurrent groups, the states).
        next: the env's results: group -> key -> ``[lane copies, agents, ...]`` (reward,
            done, terminated, truncated, next observation; the global state under the env's
            root entry where it records one).
        ended: ``[lane copies]`` bool: the copy's episode ended at this step (and it was reset).
    """

    lane: int
    envs: slice
    td: TensorDict
    next: dict
    ended: torch.Tensor


class StepRecorder(Protocol):
    """What a `RolloutLoop` hands each step to."""

    def record(self, step: RolloutStep) -> None:
        """Take one lane's step (called in step order, lane by lane)."""
        ...

    @property
    def done(self) -> bool:
        """True once the recorder has seen enough: the loop stops and sends no further actions."""
        ...


class Lane:
    """Consecutive env copies stepped as one vector: the whole vector, or one of its phases.

    ``asynchronous`` lanes send their actions (``step_async``) and read the results later
    (``step_wait``); the others step when the results are asked for.
    """

    def __init__(self, env: VecEnv, envs: slice, asynchronous: bool) -> None:
        self.env = env
        self.envs = envs
        self.asynchronous = asynchronous
        #: where the env's outputs live and its actions go (``VecEnv.device`` where a vector has one).
        self.device = torch.device(getattr(env, "device", "cpu"))
        self._sent: tuple[TensorDict, dict[str, torch.Tensor]] | None = None

    def send(self, td: TensorDict, actions: dict[str, torch.Tensor]) -> None:
        if self.asynchronous:
            cast(Any, self.env).step_async(actions)
        self._sent = (td, actions)

    def abandon(self) -> None:
        """Forget a step that was sent and will not be received (its results, or error, are dropped)."""
        if self._sent is not None and self.asynchronous:
            with contextlib.suppress(Exception):
                cast(Any, self.env).step_wait()
        self._sent = None

    def receive(self) -> tuple[TensorDict, tuple[dict, torch.Tensor]]:
        """The td that was sent and the env's ``(next, ended)`` for it."""
        assert self._sent is not None, "receive() before send()"
        td, actions = self._sent
        self._sent = None
        result = cast(Any, self.env).step_wait() if self.asynchronous else self.env.step(actions)
        return td, result


class RolloutLoop:
    """Steps a vectorized env ([`VecEnv`][lightmarl.envs.base.VecEnv]) with a [`MultiAgentPolicy`][lightmarl.policies.multi_agent.MultiAgentPolicy].

    Each step: the policy acts on every copy's observation (under ``exploration``), the
    actions go to the env, and the policy's input/output with the env's results go to a
    `StepRecorder`. Recurrent bindings' states are carried per (env, agent) between
    steps and restart where an episode ended. The env is reset on the first `run`
    only: episodes continue across runs.

    A vector that comes in phases (``env.phases()``, e.g. worker processes with
    ``PettingZooEnvConfig.overlap``) is stepped phase by phase, one `Lane` each:
    while the workers step one phase's copies, the policy computes the other phase's
    actions. Actions are then sampled per phase, so the random stream (not the
    distribution) differs from stepping the vector whole with the same seed.

    Args:
        env: the vectorized env.
        policy: the population's policy.
        exploration: ``RANDOM`` samples actions; ``DETERMINISTIC`` takes each policy's mode.
        device: where the policy runs (envs hand out tensors on their ``device``, the CPU where
            they have none; actions go back there).
    """

    def __init__(
        self,
        env: VecEnv,
        policy: MultiAgentPolicy,
        exploration: ExplorationType = ExplorationType.RANDOM,
        device: torch.device | str = "cpu",
    ) -> None:
        self.env = env
        self.policy = policy
        self.exploration = exploration
        self.device = torch.device(device)
        self.num_envs = env.num_envs
        self.groups = list(env.spec.groups.values())
        split = getattr(env, "phases", None)
        phases: list[VecEnv] = split() if callable(split) else [env]
        self.lanes: list[Lane] = []
        start = 0
        for phase in phases:
            self.lanes.append(Lane(phase, slice(start, start + phase.num_envs), asynchronous=len(phases) > 1))
            start += phase.num_envs
        self.recurrent = RecurrentStates(
            dict(policy.policies.items()),
            policy.table.group_of_binding,
            self.num_envs,
            {g.name: g.num_agents for g in self.groups},
        )
        self._started = False

    @torch.no_grad()
    def run(self, recorder: StepRecorder, steps: int | None = None) -> None:
        """Step every lane until ``recorder.done`` (checked after each lane's step) or for ``steps`` steps per lane.

        Once the recorder is done, the lanes still to be received in that round are not: a
        step they were sent is abandoned.
        """
        if steps is not None and steps < 1:
            raise ValueError(f"steps: expected a positive integer or None, got {steps!r}")
        if not self._started:
            for lane in self.lanes:
                lane.env.reset()
            self._started = True
        try:
            with set_exploration_type(self.exploration):
                for lane in self.lanes:
                    self._act(lane)
                t = 0
                while not recorder.done and (steps is None or t < steps):
                    t += 1
                    more = steps is None or t < steps
                    for index, lane in enumerate(self.lanes):
                        if recorder.done:
                            break
                        td, (nxt, ended) = lane.receive()
                        if self.recurrent:  # the next actions need the states after this step
                            self.recurrent.advance(td, ended, lane.envs)
                        recorder.record(RolloutStep(index, lane.envs, td, nxt, ended))
                        if more and not recorder.done:
                            # Phase by phase: the next phase's workers step while this one's actions are computed.
                            self._act(lane)
        finally:
            for lane in self.lanes:  # stopped early, or an env error in one phase: a step may still be out
                lane.abandon()

    def resume(self) -> None:
        """The lanes' env copies were put back mid-episode (a resumed run): `run` must not reset them."""
        self._started = True

    def _act(self, lane: Lane) -> None:
        """The policy's actions for the lane's copies, sent to its env (stepped by `Lane.receive`)."""
        td = lane.env.observation_td()
        self.recurrent.prepare(td, lane.envs)
        if self.device.type != "cpu":  # moving a TensorDict costs even when it is a no-op
            td = td.to(self.device)
        self.policy(td, env_start=lane.envs.start)
        # Actions go where the lane's env wants them: the host for CPU envs, the env's own device
        # for torch-native ones (a VMAS vector on the GPU: no copy, no host synchronisation).
        lane.send(td, {g.name: td.get((g.name, keys.ACTION)).to(lane.device) for g in self.groups})

    def close(self) -> None:
        self.env.close()
