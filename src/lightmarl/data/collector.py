"""Rollouts of the whole population into annotated experience TensorDicts."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import torch
from tensordict import TensorDict, TensorDictBase
from torchrl.envs.utils import ExplorationType

from lightmarl import keys
from lightmarl.data.episode_history import EpisodeHistory
from lightmarl.data.episode_tracking import binding_episodes
from lightmarl.data.rollout import RolloutLoop, RolloutStep
from lightmarl.envs.base import VecEnv
from lightmarl.envs.layout import ROOT
from lightmarl.policies.multi_agent import MultiAgentPolicy
from lightmarl.policies.recurrent import RecurrentStates
from lightmarl.population import BindingTable

if TYPE_CHECKING:  # a caller's buffers only: the training path keeps no rollout store
    from lightmarl.data.rollout_buffer import MultiAgentRolloutBuffer


@dataclass
class EpisodeStats:
    """Running episode statistics of one binding (means over the last ``window`` episodes)."""

    returns: deque
    lengths: deque
    finished: int = 0

    @property
    def mean_return(self) -> float:
        return sum(self.returns) / len(self.returns) if self.returns else float("nan")

    @property
    def mean_length(self) -> float:
        return sum(self.lengths) / len(self.lengths) if self.lengths else float("nan")


class _Step(NamedTuple):
    """One env step of a lane as the collector keeps it."""

    td: TensorDict  # observation, action, log-prob, ... of the lane's copies
    next: dict  # group -> key -> [lane copies, agents, ...] (and ROOT -> "state")
    ended: torch.Tensor  # [lane copies]: the copy's episode ended at this step (and it was reset)
    next_state: dict[str, torch.Tensor]  # recurrent groups: the state after the step


#: Called with every step after it is recorded, before the lane's next actions are computed.
StepHook = Callable[[RolloutStep], None]


class _ExperienceRecorder:
    """Keeps each lane's steps of one rollout, for `RolloutCollector._assemble`.

    With a step hook (which may change the binding map where an episode ended), each step
    also keeps the binding of every agent it was acted with: ``bindings[lane][t][group]``.
    """

    done = False  # the collector's rollouts end after a fixed number of steps

    def __init__(
        self,
        lanes: int,
        recurrent_groups: list[str],
        table: BindingTable,
        num_envs: int,
        on_step: StepHook | None = None,
    ) -> None:
        self.steps: list[list[_Step]] = [[] for _ in range(lanes)]
        self.bindings: list[list[dict[str, torch.Tensor]]] | None = (
            None if on_step is None else [[] for _ in range(lanes)]
        )
        self._recurrent = recurrent_groups
        self._table = table
        self._num_envs = num_envs
        self._on_step = on_step

    def record(self, step: RolloutStep) -> None:
        td, next_state = step.td, {}
        if self._recurrent:
            # The state after the step goes with the next observation (a recurrent critic's input).
            next_state = {g: td.get((g, keys.NEXT_RECURRENT_STATE)) for g in self._recurrent}
            td = td.exclude(*[(g, keys.NEXT_RECURRENT_STATE) for g in self._recurrent])
        self.steps[step.lane].append(_Step(td, step.next, step.ended, next_state))
        if self.bindings is not None and self._on_step is not None:
            self.bindings[step.lane].append(
                {g: self._table.bindings_of_envs(g, self._num_envs)[step.envs] for g in self._table.env_spec.groups}
            )
            self._on_step(step)


class RolloutCollector:
    """Steps a vectorized env (`VecEnv`) with a `MultiAgentPolicy` for ``rollout_steps`` steps.

    Each call to `collect` returns experience with root batch ``[num_envs, rollout_steps]``
    and, per group, rows ``[num_envs, rollout_steps, agents_in_group]`` carrying the
    observation, action, log-prob, validity and the annotations of
    `lightmarl.keys`; ``("next", group, ...)`` holds reward, done, terminated,
    truncated and the next observation, as TorchRL's value estimators expect. Where the env
    records its global state (``PettingZooEnvConfig.state``) it is at the root, ``"state"``
    ``[num_envs, rollout_steps, *state_shape]`` and ``("next", "state")``. Episodes
    continue across calls (envs are never reset between rollouts).

    The env is stepped by a `RolloutLoop` (the loop evaluation
    and videos use too): a vector that comes in phases (worker processes with
    ``PettingZooEnvConfig.overlap``) is stepped phase by phase, and the experience is laid
    out as for a vector stepped whole.

    Args:
        env: the vectorized env.
        policy: the population's policy.
        rollout_steps: env steps per env copy in one rollout.
        exploration: ``RANDOM`` samples actions (training); ``DETERMINISTIC`` takes the mode.
        stats_window: episodes per binding kept for the running means.
        device: where the policy runs; experience is returned there.
        buffers: group name -> a `MultiAgentRolloutBuffer` that keeps every rollout
            of that group (by reference) until the caller clears it, to trace trajectories
            and query episodes over many rollouts. Default: none (training reads the
            experience `collect` returns; its rows carry ``episode_id``, ``agent_id``
            and ``time_index`` already).
        on_step: called with every `RolloutStep` after it is
            recorded and before that lane's next actions are computed, e.g. to give an env copy
            whose episode just ended another opponent (a league). It may change the table's
            map only for copies whose episode ended at that step (their recurrent state
            restarts anyway); rows are annotated with the binding that acted at each step.
    """

    def __init__(
        self,
        env: VecEnv,
        policy: MultiAgentPolicy,
        rollout_steps: int,
        exploration: ExplorationType = ExplorationType.RANDOM,
        stats_window: int = 100,
        device: torch.device | str = "cpu",
        buffers: dict[str, MultiAgentRolloutBuffer] | None = None,
        on_step: StepHook | None = None,
    ) -> None:
        if rollout_steps < 1:
            raise ValueError(f"rollout_steps: expected a positive integer, got {rollout_steps!r}")
        self.env = env
        self.policy = policy
        self.table = policy.table
        self.rollout_steps = rollout_steps
        self.exploration = exploration
        self.device = torch.device(device)
        self.num_envs = env.num_envs
        self.table.check_num_envs(self.num_envs)  # per-env map indices, before the first env step
        self.stats = {b: EpisodeStats(deque(maxlen=stats_window), deque(maxlen=stats_window)) for b in self.table.ids}
        self._groups = list(env.spec.groups.values())
        self._episode_id = torch.arange(self.num_envs, dtype=torch.int64)  # each copy's current episode
        self._next_episode_id = self.num_envs
        self._episode_time = torch.zeros(self.num_envs, dtype=torch.int64)  # env steps of it so far
        # Each copy's current episode so far, per agent (float64: sums over long episodes stay exact).
        self._episode_return = {
            g.name: torch.zeros(self.num_envs, g.num_agents, dtype=torch.float64) for g in self._groups
        }
        self._episode_steps = {
            g.name: torch.zeros(self.num_envs, g.num_agents, dtype=torch.int64) for g in self._groups
        }
        self.frames = 0  # env steps of every copy, summed
        # A caller's buffers keep the rollouts by reference: collect() hands out their storage, not a copy.
        self.buffers = dict(buffers or {})
        unknown = set(self.buffers) - {g.name for g in self._groups}
        if unknown:
            raise ValueError(
                f"buffers: no agent group named {sorted(unknown)}; groups are {[g.name for g in self._groups]}"
            )
        self._table_version = self.table.version
        self.on_step = on_step
        self.loop = RolloutLoop(env, policy, exploration, self.device)
        #: each copy's episode in flight and its actions so far, to put the copies back when a run resumes.
        self.history = EpisodeHistory(self.num_envs)
        # Only vectors that can fast-forward episodes use the history (VMAS cannot): others skip its per-copy loop.
        self._restorable = all(callable(getattr(lane.env, "resume_state", None)) for lane in self.loop.lanes)

    @property
    def recurrent(self) -> RecurrentStates:
        """The recurrent bindings' state per (env, agent), stored with each row for sequence training."""
        return self.loop.recurrent

    @torch.no_grad()
    def collect(self) -> TensorDict:
        """One rollout of ``rollout_steps`` steps per env copy, also kept (not copied) in `buffers`.

        Returns:
            The experience (see the class docstring). Every row is traceable to
            ``(episode_id, agent_id, time_index)``; a buffer given to the collector keeps this
            very TensorDict (`MultiAgentRolloutBuffer.locate`, ``trajectory``).
        """
        if self.table.version != self._table_version:
            # Another binding controls some agents now: its memory starts from scratch.
            self.recurrent.restart_all()
            self._table_version = self.table.version
        recorder = _ExperienceRecorder(
            len(self.loop.lanes), list(self.recurrent.states), self.table, self.num_envs, self.on_step
        )
        self.loop.run(recorder, steps=self.rollout_steps)
        self.keep_recurrent_states()  # the hook changed maps only where episodes ended
        self.frames += self.num_envs * self.rollout_steps
        experience = self._assemble(recorder.steps, recorder.bindings)
        for group, buffer in self.buffers.items():
            buffer.add_rollout(experience, group=group)
        return experience

    def keep_recurrent_states(self) -> None:
        """Accept the table's current map without restarting every recurrent state at the next rollout.

        For map changes that touch only env copies whose episode ended (their states restarted
        then), or that were undone since (a league's evaluation map, restored afterwards).
        """
        self._table_version = self.table.version

    def _episode_ids(self, ended: torch.Tensor) -> torch.Tensor:
        """``[E, T]`` id of the episode each step belongs to (the step that ends one, included).

        A new episode gets the next free id when the previous one ends, in the order (step, env
        copy) of the ends; ids grow along each copy's steps, so a running maximum carries them
        forward to the steps that follow.
        """
        E, T = ended.shape
        here = ended.device  # counted where the rollout is; each copy's current episode is kept on the host
        starts = torch.full(
            (E, T + 1), -1, dtype=torch.int64, device=here
        )  # the id of an episode starting before step t
        starts[:, 0] = self._episode_id.to(here)
        step, env = torch.nonzero(ended.t(), as_tuple=True)  # ends in (step, copy) order
        starts[env, step + 1] = torch.arange(self._next_episode_id, self._next_episode_id + len(env), device=here)
        self._next_episode_id += len(env)
        ids = starts.cummax(dim=1).values
        self._episode_id = ids[:, T].cpu()
        return ids[:, :T]

    def _time_index(self, ended: torch.Tensor) -> torch.Tensor:
        """``[E, T]`` env step of each step within its episode (0 at an episode's first step).

        Episodes run on across rollouts: a copy's first steps continue the episode it was in.
        """
        T = ended.shape[1]
        latest_end, previous_end = _latest_ends(ended)
        steps = torch.arange(T, device=ended.device)
        so_far = self._episode_time.to(ended.device)
        time_index = torch.where(previous_end > 0, steps - previous_end, so_far.unsqueeze(1) + steps)
        final = latest_end[:, -1]
        self._episode_time = torch.where(final > 0, T - final, so_far + T).cpu()
        return time_index

    def _track_episodes(
        self,
        rewards: dict[str, torch.Tensor],
        valid: dict[str, torch.Tensor],
        ended: torch.Tensor,
        bindings: dict[str, torch.Tensor],
        device: torch.device | str = "cpu",
    ) -> None:
        """Fold one rollout into the running episode statistics.

        ``rewards`` / ``valid`` / ``bindings``: group -> ``[E, T, agents]``; ``ended``: ``[E, T]``. Every reward
        counts, also one on a step the agent did not act (turn-based envs: the loser's -1 arrives
        on the winner's turn); an episode's length per agent is its valid steps. The sums run on
        ``device`` (where the rollout is); the running sums and the statistics stay on the host.
        """
        E, T = ended.shape
        ended = ended.to(device)
        step, env = torch.nonzero(ended.t(), as_tuple=True)  # ends in (step, copy) order
        latest_end, previous_end = _latest_ends(ended)
        for g in self._groups:
            totals = []
            for kept, per_step in (
                (self._episode_return[g.name], rewards[g.name].to(device, torch.float64)),
                (self._episode_steps[g.name], valid[g.name].to(device, torch.int64)),
            ):
                running = kept.to(device)
                # Sums since the rollout began, from the episode so far; an episode's own sum is
                # the difference to the sum at the copy's previous end.
                sums = torch.cat([torch.zeros_like(running).unsqueeze(1), running.unsqueeze(1) + per_step.cumsum(1)], 1)
                agents = sums.shape[-1]
                before = sums.gather(1, previous_end.unsqueeze(-1).expand(E, T, agents))
                totals.append((sums[:, 1:] - before)[env, step].cpu())  # [ends, agents]
                kept.copy_(sums[:, T] - sums.gather(1, latest_end[:, -1:, None].expand(E, 1, agents)).squeeze(1))
            if not len(env):
                continue
            returns, lengths = totals
            of_binding = bindings[g.name]
            # [ends, agents]: who played the episode's last step
            binding_of = of_binding[env.to(of_binding.device), step.to(of_binding.device)].cpu()
            for binding, (mean_return, length) in binding_episodes(returns, lengths, binding_of).items():
                stats = self.stats[self.table.ids[binding]]
                stats.returns.extend(mean_return.tolist())
                stats.lengths.extend(length.tolist())
                stats.finished += len(mean_return)

    def _assemble(
        self, steps: list[list[_Step]], step_bindings: list[list[dict[str, torch.Tensor]]] | None = None
    ) -> TensorDict:
        """One TensorDict ``[E, T]`` from each lane's steps (lanes cover consecutive env copies).

        ``step_bindings``: per lane and step, group -> the binding of every agent of the lane's
        copies at that step; ``None``: the map did not change during the rollout.
        """

        def over_time(parts: list[list[Any]]) -> Any:
            # Per lane, its parts stacked over time; then the lanes joined along the env dim.
            per_lane = [torch.stack(lane_parts, dim=1) for lane_parts in parts]
            return per_lane[0] if len(per_lane) == 1 else torch.cat(per_lane, dim=0)

        experience = cast(TensorDictBase, over_time([[s.td for s in lane] for lane in steps]))  # [E, T] / [E, T, A]
        # Where the steps live (a torch-native env's device, or the CPU): the per-rollout bookkeeping
        # runs there, so that 16,384 copies x 100 steps of a GPU rollout are not copied to the host.
        ended_here = over_time([[s.ended for s in lane] for lane in steps])
        here = ended_here.device
        episode_ids = self._episode_ids(ended_here)
        time_index = self._time_index(ended_here)
        if self._restorable:
            self.history.record({g.name: experience.get((g.name, keys.ACTION)) for g in self._groups}, ended_here.cpu())
        first = steps[0][0]
        E, T = self.num_envs, self.rollout_steps
        rows_device = experience.get((self._groups[0].name, keys.VALID)).device
        next_groups = {}
        rewards, valid, bindings = {}, {}, {}
        for g in self._groups:
            name = g.name
            A = g.num_agents
            # Env info fields (keys.INFO_PREFIX) are evaluation's: experience leaves them out.
            stacked = {
                k: over_time([[s.next[name][k] for s in lane] for lane in steps])
                for k in first.next[name]
                if not k.startswith(keys.INFO_PREFIX)
            }
            next_groups[name] = TensorDict(
                {
                    keys.OBSERVATION: stacked[keys.OBSERVATION],
                    keys.REWARD: stacked[keys.REWARD].unsqueeze(-1),
                    keys.DONE: stacked[keys.DONE].unsqueeze(-1),
                    keys.TERMINATED: stacked[keys.TERMINATED].unsqueeze(-1),
                    keys.TRUNCATED: stacked[keys.TRUNCATED].unsqueeze(-1),
                    **({keys.ACTION_MASK: stacked[keys.ACTION_MASK]} if keys.ACTION_MASK in stacked else {}),
                },
                batch_size=[E, T, A],
            )
            if name in first.next_state:
                next_groups[name].set(
                    keys.RECURRENT_STATE, over_time([[s.next_state[name] for s in lane] for lane in steps]).cpu()
                )
                # The next observation continues the step's episode: never a reset.
                next_groups[name].set(keys.IS_INIT, torch.zeros(E, T, A, dtype=torch.bool))
            # Annotations follow the map each env copy plays (per-env overrides included). With one map
            # for the whole rollout they are [E, A] tables looked up once and expanded over time, built
            # where the rows are (no [E, T, A] gather, no copy to a GPU).
            rows = experience.get(name)
            if step_bindings is None:
                of_env = self.table.bindings_of_envs(name, E)
                binding = of_env.to(rows_device).unsqueeze(1).expand(E, T, A)
                profile = self.table.profile_of_binding[of_env].to(rows_device).unsqueeze(1).expand(E, T, A)
                trainable = self.table.trainable[of_env].to(rows_device).unsqueeze(1).expand(E, T, A)
            else:
                binding = over_time([[b[name] for b in lane] for lane in step_bindings])
                profile, trainable = self.table.profile_of_binding[binding], self.table.trainable[binding]
            bindings[name] = binding
            rows.set(keys.BINDING_ID, binding)
            rows.set(keys.LOSS_PROFILE_ID, profile)
            rows.set(keys.IS_TRAINABLE_AGENT, trainable)
            rows.set(keys.EPISODE_ID, episode_ids.to(rows_device).unsqueeze(-1).expand(E, T, A))
            rows.set(keys.TIME_INDEX, time_index.to(rows_device).unsqueeze(-1).expand(E, T, A))
            rows.set(keys.ENV_INDEX, torch.arange(E, device=rows_device).view(E, 1, 1).expand(E, T, A))
            # Episode returns in the env's own rewards, also where a transform rescaled them for learning.
            rewards[name] = stacked.get(keys.ENV_REWARD, stacked[keys.REWARD])
            valid[name] = rows.get(keys.VALID)
        self._track_episodes(rewards, valid, ended_here, bindings, here)
        if ROOT in first.next:  # the env's global state after each step (the final one where an episode ended)
            next_groups[keys.STATE] = over_time([[s.next[ROOT][keys.STATE] for s in lane] for lane in steps])
        next_td = TensorDict(next_groups, batch_size=[E, T])
        experience.set(keys.NEXT, next_td if self.device.type == "cpu" else next_td.to(self.device))
        return experience

    def episode_summary(self) -> dict[str, dict[str, float]]:
        """binding -> ``{"episode_return", "episode_length", "episodes"}`` over the recent window."""
        return {
            b: {"episode_return": s.mean_return, "episode_length": s.mean_length, "episodes": float(s.finished)}
            for b, s in self.stats.items()
            if s.returns
        }

    # -- resuming ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs to go on collecting exactly where this one is (between rollouts).

        The counters and running episode statistics, the recurrent states, each copy's episode in
        flight with its actions so far (`EpisodeHistory`), and
        each lane's `resume_state` (``None`` for a vector
        that cannot be restored); tensors and plain data only.
        """
        resume_state = [getattr(lane.env, "resume_state", lambda: None)() for lane in self.loop.lanes]
        return {
            "num_envs": self.num_envs,
            "frames": self.frames,
            "episode_id": self._episode_id.clone(),
            "next_episode_id": self._next_episode_id,
            "episode_time": self._episode_time.clone(),
            "episode_return": {g: t.clone() for g, t in self._episode_return.items()},
            "episode_steps": {g: t.clone() for g, t in self._episode_steps.items()},
            "stats": {
                b: {
                    "returns": torch.tensor(list(s.returns), dtype=torch.float64),
                    "lengths": torch.tensor(list(s.lengths), dtype=torch.int64),
                    "finished": s.finished,
                }
                for b, s in self.stats.items()
            },
            "recurrent": self.recurrent.state_dict(),
            "history": self.history.state_dict(),
            "lanes": None if any(r is None for r in resume_state) else resume_state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> list[str]:
        """Restore `state_dict`'s output before the first `collect`, env copies included.

        Each copy is reset for its episode in flight and fast-forwarded through that episode's actions
        (`restore`). Where that cannot be exact, the
        collector still goes on, and the returned messages say why (for the caller to warn).

        Returns:
            What keeps this restore from being exact (empty when it is).
        """
        if state["num_envs"] != self.num_envs:
            return [f"the checkpoint's collector stepped {state['num_envs']} env copies, this one {self.num_envs}"]
        self.frames = int(state["frames"])
        self._episode_id = state["episode_id"].clone()
        self._next_episode_id = int(state["next_episode_id"])
        self._episode_time = state["episode_time"].clone()
        self._episode_return = {g: t.clone() for g, t in state["episode_return"].items()}
        self._episode_steps = {g: t.clone() for g, t in state["episode_steps"].items()}
        for binding, saved in state["stats"].items():
            if binding in self.stats:
                stats = self.stats[binding]
                stats.returns.clear()
                stats.returns.extend(saved["returns"].tolist())
                stats.lengths.clear()
                stats.lengths.extend(saved["lengths"].tolist())
                stats.finished = int(saved["finished"])
        self.recurrent.load_state_dict(state["recurrent"])
        self.history.load_state_dict(state["history"])
        lanes = state["lanes"]
        resumable = [getattr(lane.env, "resume_state", lambda: None)() is not None for lane in self.loop.lanes]
        if lanes is None or not all(resumable) or len(lanes) != len(self.loop.lanes):
            self._restart_episodes()
            return [
                f"env {self.env.spec.name!r}: its vector cannot fast-forward episodes; every copy starts a new episode"
            ]
        differing: list[int] = []
        for lane, lane_state in zip(self.loop.lanes, lanes):
            copies = range(lane.envs.start, lane.envs.stop)
            episodes = [int(self.history.episodes[e]) for e in copies]
            diverged = cast(Any, lane.env).restore(episodes, [self.history.actions_of(e) for e in copies], lane_state)
            differing += [lane.envs.start + i for i in diverged]
        self.loop.resume()
        if differing:
            return [
                f"env {self.env.spec.name!r}: fast-forwarding the episodes in flight did not reproduce copies {differing} "
                "(the env is not deterministic given its seed and actions); they go on from the fast-forwarded state"
            ]
        return []

    def _restart_episodes(self) -> None:
        """The copies will be reset at the next rollout: the episodes in flight are forgotten."""
        for running in (*self._episode_return.values(), *self._episode_steps.values()):
            running.zero_()
        self._episode_id = torch.arange(self._next_episode_id, self._next_episode_id + self.num_envs)
        self._next_episode_id += self.num_envs
        self._episode_time.zero_()
        self.history = EpisodeHistory(self.num_envs)
        self.recurrent.restart_all()

    def close(self) -> None:
        self.env.close()


def _latest_ends(ended: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[E, T]`` per copy and step: 1 + the step of the copy's latest episode end up to this step,
    and before it (0: none in this rollout yet)."""
    E, T = ended.shape
    latest_end = torch.where(ended, torch.arange(1, T + 1, device=ended.device), 0).cummax(dim=1).values
    previous_end = torch.cat([torch.zeros(E, 1, dtype=torch.int64, device=ended.device), latest_end[:, :-1]], dim=1)
    return latest_end, previous_end
