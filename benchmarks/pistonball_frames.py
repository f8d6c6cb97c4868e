"""Env speed of butterfly ``pistonball_v6`` (20 pistons, discrete actions) with and without image transforms.

Steps, with uniform random actions, in this order and repeated ``--repeats`` times:

* ``raw``: one PettingZoo parallel env in a minimal Python loop (reset when the episode ends),
  built with ``render_mode="rgb_array"`` as the recipe builds it: pistonball draws the ball and
  the pistons into its observations only when it has a render mode;
* ``raw-undrawn``: the same without a render mode (what the env costs when it draws nothing, and
  the observations never change);
* ``vector``: ``PettingZooEnvConfig.make_vector`` over ``--num-envs`` in-process copies, no
  transforms: the full 457x120x3 ``uint8`` frames are copied into the vector's arrays;
* ``recipe``: the same vector with ``recipes/pistonball.yaml``'s transforms (``Resize`` 32x16
  nearest, ``Grayscale``, ``FrameStack`` 3);
* ``gray-area-84``: ``Grayscale``, ``Resize`` 84x84 (area), ``FrameStack`` 3 (the usual
  SuperSuit / CleanRL pistonball preprocessing).

Env steps per second (one env step = one step of one copy, 20 pistons). On a shared machine
compare paths within a repeat only. Run from the repository root with the project's virtualenv::

    OMP_NUM_THREADS=1 python benchmarks/pistonball_frames.py --repeats 2
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from lightmarl.envs import PettingZooEnvConfig
from lightmarl.envs.checks import random_actions
from lightmarl.envs.transforms import FrameStack, Grayscale, Resize, VecTransform

ENV_FN = "pettingzoo.butterfly.pistonball_v6.parallel_env"
ENV_KWARGS = {"n_pistons": 20, "continuous": False, "max_cycles": 125, "render_mode": "rgb_array"}


def raw_steps_per_second(steps: int, drawn: bool = True) -> float:
    from pettingzoo.butterfly import pistonball_v6

    kwargs = ENV_KWARGS if drawn else {k: v for k, v in ENV_KWARGS.items() if k != "render_mode"}
    env = pistonball_v6.parallel_env(**kwargs)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for n in range(steps):
        _, _, terminations, truncations, _ = env.step({a: int(rng.integers(3)) for a in env.agents})
        if not env.agents or all(terminations[a] or truncations[a] for a in terminations):
            env.reset(seed=n)
    rate = steps / (time.perf_counter() - start)
    env.close()
    return rate


def vector_steps_per_second(transforms: list[VecTransform], num_envs: int, steps: int) -> float:
    vector = PettingZooEnvConfig(ENV_FN, dict(ENV_KWARGS), num_envs, transforms=transforms).make_vector(seed=0)
    vector.reset()
    generator = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    for _ in range(steps):
        vector.step(random_actions(vector.spec, vector.current, generator))
    rate = steps * num_envs / (time.perf_counter() - start)
    vector.close()
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=400, help="env steps per path and repeat")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    paths = {
        "vector": lambda: [],
        "recipe": lambda: [Resize(32, 16, "nearest"), Grayscale(), FrameStack(3)],
        "gray-area-84": lambda: [Grayscale(), Resize(84, 84), FrameStack(3)],
    }
    for repeat in range(args.repeats):
        raw = raw_steps_per_second(args.steps)
        undrawn = raw_steps_per_second(args.steps, drawn=False)
        line = [f"repeat {repeat}: raw {raw:.1f} env steps/s", f"raw-undrawn {undrawn:.1f} ({undrawn / raw:.2f}x raw)"]
        for name, transforms in paths.items():
            rate = vector_steps_per_second(transforms(), args.num_envs, args.steps // args.num_envs)
            line.append(f"{name} {rate:.1f} ({rate / raw:.2f}x raw)")
        print("; ".join(line))


if __name__ == "__main__":
    main()
