"""Do a pistonball checkpoint's CNN features depend on what each piston sees?

Loads the policies of a lightmarl checkpoint of ``recipes/pistonball.yaml``, resets 4 env copies
(20 pistons each, the recipe's transforms), and prints, over those 80 observations, the spread of
the encoder's features, of the actor's logits and of the centralized critic's value. A spread of
0 means the policy acts the same whatever it sees (only an action bias is learned). Run from the
repository root with the project's virtualenv::

    OMP_NUM_THREADS=1 python benchmarks/pistonball_features.py runs/pistonball/checkpoints/best.ckpt
"""

from __future__ import annotations

import argparse

import torch

from lightmarl.envs import PettingZooEnvConfig
from lightmarl.envs.transforms import FrameStack, Grayscale, Resize
from lightmarl.policies import PolicyDict

GROUP = "piston"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="a lightmarl checkpoint of recipes/pistonball.yaml")
    parser.add_argument("--seed", type=int, default=123, help="seed of the first env copy")
    args = parser.parse_args()
    torch.set_num_threads(1)
    policy = PolicyDict.load(args.checkpoint)["main"]
    config = PettingZooEnvConfig(
        env_fn="pettingzoo.butterfly.pistonball_v6.parallel_env",
        env_kwargs={"n_pistons": 20, "continuous": False, "max_cycles": 125},
        num_envs=4,
        transforms=[Resize(height=32, width=16, interpolation="nearest"), Grayscale(), FrameStack(num_frames=3)],
    )
    env = config.make_vector(seed=args.seed)
    env.reset()
    td = env.observation_td()
    observation = td.get((GROUP, "observation"))
    with torch.no_grad():
        features = policy.encoder(observation).reshape(-1, policy.encoder.out_features)
        logits = policy.actor(td.clone()).get((GROUP, "logits")).reshape(features.shape[0], -1)
        value = policy.critic(td.clone()).get((GROUP, "state_value")).reshape(-1)
    pixels = observation.reshape(features.shape[0], -1).float()
    print(f"observations: {tuple(observation.shape)}, pixel std across pistons {pixels.std(0).mean():.2f} (of 255)")
    print(
        f"features: std across pistons {features.std(0).mean():.6f} (mean |feature| {features.abs().mean():.4f}), "
        f"exactly 0 in {(features == 0).float().mean():.1%} of entries"
    )
    print(f"logits: std across pistons {[round(float(s), 6) for s in logits.std(0)]}, mean {logits.mean(0).tolist()}")
    print(f"value: std across copies and pistons {value.std():.6f}, mean {value.mean():.3f}")


if __name__ == "__main__":
    main()
