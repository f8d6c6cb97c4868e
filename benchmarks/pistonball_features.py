"""Can a pistonball policy tell its pistons apart? Pixels, CNN features, logits and gradients, mid-episode.

Builds the env of a recipe (default ``recipes/pistonball.yaml``: its ``env_kwargs`` and
transforms), plays ``--steps`` steps of uniform random actions in ``--num-envs`` copies and, from
step ``--skip`` on, feeds every step's observations through a policy: a checkpoint's (``--checkpoint``)
or, without one, a freshly initialised one built from the recipe's first binding. It prints:

* ``pixels``: the spread across the pistons of one copy at one step (standard deviation per pixel,
  averaged over pixels), for the pistons whose strip holds the ball's centre and for the others,
  and how much a piston's frame changes from one step to the next. A frame that never changes
  means the env draws nothing (PettingZoo's pistonball draws the ball and the pistons only when
  built with a ``render_mode``; ``--render-mode none`` shows what it looks like without);
* ``features`` / ``logits`` / ``value``: the same spread across pistons of the encoder's
  features, the actor's logits and the critic's value, the share of features that are exactly 0,
  and the encoder's dead units (0 for every observation);
* ``gradient``: the gradient norm of each part of the policy (conv layers, the encoder's linear
  layer, the actor's and the critic's heads) for ``sum(log_prob(a))`` (actions ``a`` sampled from
  the policy) and for ``sum(value)`` over those observations, separately: an encoder that gets
  no gradient learns nothing.

``--png DIR`` writes, for the first copy at the last step, the full-size observation of the piston
under the ball and the transformed one (every frame of the stack, enlarged 8x) as PNG files.
Run from the repository root with the project's virtualenv::

    OMP_NUM_THREADS=1 python benchmarks/pistonball_features.py --png /tmp/pistonball
    OMP_NUM_THREADS=1 python benchmarks/pistonball_features.py --checkpoint runs/pistonball/checkpoints/best.ckpt
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from tensordict import TensorDict

from lightmarl._imports import import_object, instantiate
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.envs.checks import random_actions
from lightmarl.inference import load_population

GROUP = "piston"


def env_config(recipe: dict[str, Any], num_envs: int, render_mode: str | None) -> PettingZooEnvConfig:
    env = recipe["model"]["env"]
    kwargs = {k: v for k, v in env["env_kwargs"].items() if k != "render_mode"}
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    transforms = [instantiate(t, field="env.transforms") for t in env.get("transforms", [])]
    return PettingZooEnvConfig(env["env_fn"], kwargs, num_envs, transforms=transforms)


def fresh_policy(recipe: dict[str, Any], config: PettingZooEnvConfig, seed: int) -> Any:
    binding = recipe["model"]["policy_bindings"][0]
    torch.manual_seed(seed)
    policy_class = import_object(binding["class_path"], field="policy_bindings[0].class_path")
    return policy_class(config.spec().groups[GROUP], **binding.get("policy_kwargs", {}))


def raw_envs(vector: Any) -> list[Any]:
    """The PettingZoo raw envs of an in-process vector (under its transforms)."""
    base = vector
    while not hasattr(base, "envs"):
        base = base.base
    return [env.unwrapped for env in base.envs]


def ball_piston(env: Any) -> int:
    """The piston whose own 40-pixel column holds the ball's centre."""
    return int((env.ball.position[0] - env.wall_width) // env.piston_width)


def spread(x: torch.Tensor) -> torch.Tensor:
    """Standard deviation across pistons (dim 1) of ``[copies, pistons, ...]``, averaged over the rest."""
    return x.flatten(2).float().std(1).mean()


def save_png(path: Path, image: np.ndarray, scale: int = 1) -> None:
    from PIL import Image

    if image.ndim == 3 and image.shape[-1] == 1:
        image = image[..., 0]
    if scale > 1:
        image = image.repeat(scale, 0).repeat(scale, 1)
    Image.fromarray(np.ascontiguousarray(image)).save(path)
    print(f"wrote {path} {image.shape}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/pistonball.yaml")
    parser.add_argument("--checkpoint", help="a lightmarl checkpoint of the recipe (default: a fresh policy)")
    parser.add_argument("--render-mode", default="rgb_array", help="'none': build the env without one")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=30, help="random-action steps played")
    parser.add_argument("--skip", type=int, default=5, help="steps played before the measured ones")
    parser.add_argument("--seed", type=int, default=123, help="seed of the first env copy (and a fresh policy)")
    parser.add_argument("--png", type=Path, help="directory for the PNG files")
    args = parser.parse_args()
    torch.set_num_threads(1)
    recipe = yaml.safe_load(Path(args.recipe).read_text())
    config = env_config(recipe, args.num_envs, None if args.render_mode == "none" else args.render_mode)
    policy = (
        load_population(args.checkpoint).bindings["main"]
        if args.checkpoint
        else fresh_policy(recipe, config, args.seed)
    )
    vector = config.make_vector(seed=args.seed)
    vector.reset()
    envs = raw_envs(vector)
    generator = torch.Generator().manual_seed(args.seed)
    steps: list[TensorDict] = []
    under_ball: list[torch.Tensor] = []
    changes: list[torch.Tensor] = []
    previous = None
    for step in range(args.steps):
        td = vector.observation_td()
        observation = td.get((GROUP, "observation")).clone()
        if previous is not None:
            changes.append((observation.float() - previous.float()).abs().flatten(2).mean(-1))
        previous = observation
        if step >= args.skip:
            steps.append(td.clone())
            mask = torch.zeros(args.num_envs, observation.shape[1], dtype=torch.bool)
            for i, env in enumerate(envs):
                centre = ball_piston(env)
                mask[i, max(centre - 1, 0) : centre + 2] = True  # strips that show the ball's centre
            under_ball.append(mask)
        if step == args.steps - 1 and args.png:
            args.png.mkdir(parents=True, exist_ok=True)
            piston = min(max(ball_piston(envs[0]), 0), observation.shape[1] - 1)
            save_png(args.png / f"raw_piston{piston}.png", envs[0].observe(f"piston_{piston}"))
            frames = observation[0, piston].numpy()
            for k in range(frames.shape[-1]):
                save_png(args.png / f"transformed_piston{piston}_frame{k}.png", frames[..., k], scale=8)
        vector.step(random_actions(vector.spec, vector.current, generator))
    vector.close()

    batch = torch.stack(steps)  # [steps, copies]
    flat = batch.reshape(-1)  # [steps * copies]: one row per (step, copy), pistons inside
    obs = flat.get((GROUP, "observation"))
    ball = torch.stack(under_ball).reshape(obs.shape[:2])
    pixels = obs.flatten(2).float()
    near = torch.stack([pixels[i][ball[i]].std(0).mean() for i in range(len(pixels))]).mean()
    far = torch.stack([pixels[i][~ball[i]].std(0).mean() for i in range(len(pixels))]).mean()
    print(f"observations {tuple(obs.shape[1:])} {obs.dtype}, {len(pixels)} (step, copy) pairs")
    print(
        f"pixels: std across pistons {spread(obs):.2f} (of 255); among the pistons that see the ball {near:.2f}, "
        f"among the others {far:.2f}; mean |change| of a piston's frame per step {torch.stack(changes).mean():.2f}"
    )
    with torch.no_grad():
        features = policy.encoder(obs)
        logits = policy.actor(flat.clone()).get((GROUP, "logits"))
        value = policy.critic(flat.clone()).get((GROUP, "state_value"))
    dead = (features == 0).flatten(0, 1).all(0).float().mean()
    print(
        f"features: std across pistons {spread(features):.5f}, mean |feature| {features.abs().mean():.4f}, "
        f"exactly 0 in {(features == 0).float().mean():.1%} of entries, dead units {dead:.1%}"
    )
    print(
        f"logits: std across pistons {[round(float(s), 5) for s in logits.std(1).mean(0)]}, mean {logits.mean((0, 1)).tolist()}"
    )
    print(f"value: std across pistons {spread(value):.5f}, across (step, copy) {value.mean(1).std():.5f}")

    out = policy.actor(flat.clone())
    distribution = torch.distributions.Categorical(logits=out.get((GROUP, "logits")))
    terms = {
        "log_prob": distribution.log_prob(distribution.sample()).sum(),
        "value": policy.critic(flat.clone()).get((GROUP, "state_value")).sum(),
    }
    named = dict(policy.named_parameters())
    for term, loss in terms.items():
        grads = torch.autograd.grad(loss, list(named.values()), allow_unused=True, retain_graph=True)
        norms: dict[str, float] = {}
        for name, grad in zip(named, grads):
            if grad is not None:
                norms[part_of(name)] = norms.get(part_of(name), 0.0) + float(grad.norm()) ** 2
        print(f"gradient norm of sum({term}) by part: " + ", ".join(f"{k} {v**0.5:.3g}" for k, v in norms.items()))


def part_of(name: str) -> str:
    """``encoder.convs.0``, ``encoder.project``, ``actor``, ``critic`` from a parameter's name."""
    if ".encoder." in name:
        tail = name.split(".encoder.", 1)[1].split(".")
        return "encoder." + ".".join(tail[:2] if tail[0] == "convs" else tail[:1])
    return name.split(".", 1)[0]


if __name__ == "__main__":
    main()
