"""Every row a trainer learns from is traceable to (episode, agent, time), and a rollout buffer finds it back."""

from __future__ import annotations

import torch
from lightning.pytorch import Callback, seed_everything
from test_learning import fit_quietly

from lightmarl import keys
from lightmarl.algorithms import PPO
from lightmarl.data.rollout_buffer import MultiAgentRolloutBuffer
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.training import MARLModule

SPREAD = PettingZooEnvConfig(
    env_fn="mpe2.simple_spread_v3.parallel_env", env_kwargs={"N": 3, "max_cycles": 5}, num_envs=4
)


class SeeWhatTheTrainerSees(Callback):
    """Wraps the MARLTrainer's ``update``: checks each experience it gets, through a buffer that keeps it."""

    def __init__(self) -> None:
        self.traced: list[set[tuple[int, int, int]]] = []
        self.metrics: list[dict] = []

    def on_train_start(self, trainer, module) -> None:
        update = module.marl_trainer.update

        def spying_update(experience, *args, **kwargs):
            buffer = MultiAgentRolloutBuffer(3)
            buffer.add_rollout(experience, group="agent")  # by reference: the trainer's rows are its rows
            self.traced.append(trace(experience, buffer))
            self.metrics.append(update(experience, *args, **kwargs))
            return self.metrics[-1]

        module.marl_trainer.update = spying_update


def trace(experience, buffer) -> set[tuple[int, int, int]]:
    """``(episode, agent, time)`` of every row, each checked to be that row of the buffer."""
    assert buffer.rollouts == [experience] and buffer.rollouts[0] is experience  # the buffer's storage, no copy
    rows = experience["agent"]
    E, T, A = rows.batch_size
    traced = set()
    for e in range(E):
        for t in range(T):
            for a in range(A):
                key = tuple(int(rows[name][e, t, a]) for name in (keys.EPISODE_ID, keys.AGENT_ID, keys.TIME_INDEX))
                assert buffer.locate(*key) == (0, e, t, a)
                traced.add(key)
    assert len(traced) == E * T * A  # one row per (episode, agent, time)
    # Trajectories read back from the buffer are the rows the trainer gets.
    episode = int(rows[keys.EPISODE_ID][0, -1, 0])
    trajectory = buffer.trajectory(episode, 2)
    mine = (rows[keys.EPISODE_ID] == episode) & (rows[keys.AGENT_ID] == 2)
    assert torch.equal(trajectory[keys.OBSERVATION], rows[keys.OBSERVATION][mine])
    assert torch.equal(trajectory[keys.TIME_INDEX], rows[keys.TIME_INDEX][mine])
    return traced


def test_every_row_the_trainer_sees_is_one_episode_agent_and_time(tmp_path):
    seed_everything(0)
    module = MARLModule(
        env=SPREAD, algorithm=PPO(minibatch_size=28), rollout_steps=7, max_frames=3 * 28, iterations_per_epoch=3
    )
    spy = SeeWhatTheTrainerSees()
    fit_quietly(module, tmp_path, callbacks=[spy])

    assert len(spy.traced) == 3
    assert all(m["main"]["rows"] == 4 * 7 * 3 for m in spy.metrics)  # the trainer learned from these rows
    everything = set().union(*spy.traced)
    assert len(everything) == 3 * 4 * 7 * 3  # no (episode, agent, time) twice over the run
    # Episodes of 5 steps cross the 7-step rollouts: time runs on across them.
    assert {t for _, _, t in everything} == set(range(5))
