"""A PettingZoo parallel env whose image observations pass through `image_ops`.

`FramedParallelEnv` is how a recipe's image transforms (``Grayscale``, ``Resize``) reach
the env: it wraps each env copy, in the training process or in a worker process (which builds it
with `framed_env` from import paths and plain data), so frames are shrunk where the env
renders them and only small ones are copied into the vector's arrays. Torch-free (worker
processes import it).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo.utils import BaseParallelWrapper

from lightmarl._imports import import_object
from lightmarl.envs.image_ops import FrameOp, ResizeOp, apply_ops
from lightmarl.envs.pettingzoo.aec import is_aec_env


def fixed_ops(
    ops: Sequence[FrameOp], shape: tuple[int, ...], dtype: str
) -> tuple[tuple[FrameOp, ...], tuple[int, ...], str]:
    """``ops`` ready for frames of ``shape`` / ``dtype`` (resizes know their source size), and the
    shape and dtype they make; a ``ValueError`` from the first op that cannot apply."""
    ready: list[FrameOp] = []
    for op in ops:
        ready.append(op.for_source(shape) if isinstance(op, ResizeOp) else op)
        shape, dtype = op.output(shape, dtype)
    return tuple(ready), shape, dtype


class FramedParallelEnv(BaseParallelWrapper):
    """``env`` with each agent's observations passed through its frame ops.

    Args:
        env: a PettingZoo parallel env (AEC envs are refused: their observations are read
            through ``observe``).
        ops: the env's agent id -> the ops for its observations, in order (agents not named keep theirs).
    """

    def __init__(self, env: Any, ops: Mapping[Hashable, Sequence[FrameOp]]) -> None:
        if is_aec_env(env):
            raise ValueError(
                "env.transforms: image transforms (Grayscale, Resize) apply to parallel envs; this env is "
                f"turn-based (AEC: {type(env).__name__}); use its parallel_env constructor where it has one"
            )
        super().__init__(env)
        self._ops: dict[Hashable, tuple[FrameOp, ...]] = {}
        self._spaces: dict[Hashable, spaces.Space] = {}
        chains: dict[tuple, tuple[FrameOp, ...]] = {}  # one chain object per (ops, frame shape): batched together
        for agent, agent_ops in ops.items():
            space = env.observation_space(agent)
            box = space.spaces["observation"] if isinstance(space, spaces.Dict) else space
            if not isinstance(box, spaces.Box):
                raise ValueError(f"env.transforms: image transforms need Box observations; agent {agent!r} has {box!r}")
            ready, shape, dtype = fixed_ops(agent_ops, tuple(box.shape), np.dtype(box.dtype).name)
            ready = chains.setdefault((ready, tuple(box.shape), np.dtype(box.dtype).name), ready)
            low, high = (0, 255) if dtype == "uint8" else (float(np.min(box.low)), float(np.max(box.high)))
            new_box = spaces.Box(low, high, shape, np.dtype(dtype))
            self._ops[agent] = ready
            self._spaces[agent] = spaces.Dict({**space.spaces, "observation": new_box}) if space is not box else new_box

    def observation_space(self, agent: Any) -> spaces.Space:
        return self._spaces.get(agent) or self.env.observation_space(agent)

    def _frames(self, observations: dict) -> dict:
        out = dict(observations)
        batches: dict[int, list[Hashable]] = {}  # agents sharing an op chain go through it together
        for agent, obs in observations.items():
            ops = self._ops.get(agent)
            if ops is None:
                continue
            if isinstance(obs, dict):
                out[agent] = {**obs, "observation": apply_ops(ops, obs["observation"])}
            else:
                batches.setdefault(id(ops), []).append(agent)
        for agents in batches.values():
            frames = apply_ops(self._ops[agents[0]], np.stack([np.asarray(observations[a]) for a in agents]))
            out.update(zip(agents, frames))
        return out

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        observations, infos = self.env.reset(seed=seed, options=options)
        return self._frames(observations), infos

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        return self._frames(observations), rewards, terminations, truncations, infos


def framed_env(
    env_fn: str, env_kwargs: Mapping[str, Any], ops: Mapping[Hashable, Sequence[FrameOp]]
) -> FramedParallelEnv:
    """The env ``env_fn(**env_kwargs)`` wrapped in `FramedParallelEnv`: the constructor a
    worker process is given (by import path) when a recipe has image transforms."""
    return FramedParallelEnv(import_object(env_fn, field="env.env_fn")(**env_kwargs), ops)
