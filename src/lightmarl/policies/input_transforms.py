"""A loaded policy's own observation normalization, so it sees inputs as in the run that trained it.

A policy trained with ``ObservationNorm`` learned from observations normalized by its run's
statistics. Loaded into another recipe (``policy_uri: run.ckpt#binding``: a frozen NPC, an
evaluation binding), it would get that recipe's observations: raw, or normalized by the other
run's statistics. `attach_input_transforms` makes the policy undo the recipe's own
normalization of its group, if any (`host_normalization`; exact except for values the
recipe clipped), and apply its own run's (frozen), before its forward. Its own statistics are
recorded in ``policy.origin["input_transforms"]`` so that checkpoints and exports of the new run
keep them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from lightmarl import keys
from lightmarl.envs.transforms import FrameStack, FrameTransform, ObservationNorm, RewardNorm, VecTransform
from lightmarl.policies.base import Policy

#: the ``origin`` entry that records a policy's input normalization.
ORIGIN_KEY = "input_transforms"


def input_transforms_of(transforms: Sequence[Mapping[str, Any]], group: str) -> list[dict[str, Any]]:
    """The normalizations a policy of ``group`` needs, from a run's transforms (``{class_path, init_args, state}``).

    ``ObservationNorm`` entries become ``{mean, var, epsilon, clip, repeat, axis}`` (plain lists: JSON
    can hold them); where a ``FrameStack`` follows the normalization, the statistics repeat once
    per stacked frame. Image ops and frame stacks themselves change shapes, so the recipe the
    policy joins has them too (its group's spaces are checked against the policy's).

    Raises:
        ValueError: for an observation transform that is neither (its effect cannot be reproduced here).
    """
    norms: list[dict[str, Any]] = []
    for entry in transforms:
        name = str(entry["class_path"]).rsplit(".", 1)[-1]
        args = entry.get("init_args") or {}
        groups = args.get("groups")
        if groups is not None and group not in groups:
            continue
        if name == "ObservationNorm":
            stats = entry["state"]["statistics"][group]
            norms.append(
                {
                    "mean": torch.as_tensor(stats["mean"]).tolist(),
                    "var": torch.as_tensor(stats["var"]).tolist(),
                    "epsilon": float(args.get("epsilon", 1e-8)),
                    "clip": args.get("clip", 10.0),
                    "repeat": 1,
                    "axis": -1,
                }
            )
        elif name == "FrameStack":
            for norm in norms:
                norm["repeat"] *= int(args.get("num_frames", 4))
                norm["axis"] = int(args.get("dim", -1))
        elif name not in ("RewardNorm", "Grayscale", "Resize"):
            raise ValueError(
                f"the policy's run transformed group {group!r}'s observations with {name}, which a policy "
                "loaded alone cannot reproduce; give the recipe that loads it the same env transforms"
            )
    return norms


def host_normalization(transforms: Sequence[VecTransform], group: str) -> ObservationNorm | None:
    """The recipe's ``ObservationNorm`` of ``group``, which a policy loaded from another run undoes first.

    Raises:
        ValueError: where the recipe also stacks frames of ``group`` after normalizing them, or
            normalizes it twice (the observations a policy gets cannot be turned back here).
    """
    found: list[ObservationNorm] = []
    stacked_after = False
    for transform in transforms:
        if transform.groups is not None and group not in transform.groups:
            continue
        if isinstance(transform, ObservationNorm):
            found.append(transform)
        elif isinstance(transform, FrameStack) and found:
            stacked_after = True
        elif not isinstance(transform, FrameStack | FrameTransform | RewardNorm):
            stacked_after = stacked_after or bool(found)
    if len(found) > 1 or stacked_after:
        raise ValueError(
            f"env.transforms: group {group!r} is normalized and then transformed again; a policy loaded from another "
            "run (policy_uri) cannot get the observations it was trained on: normalize that group last and once"
        )
    return found[0] if found else None


def attach_input_transforms(
    policy: Policy, norms: Sequence[Mapping[str, Any]] | None, host: ObservationNorm | None = None
) -> Policy:
    """Make ``policy`` undo ``host``'s normalization of its group (the recipe's, read at each call:
    its statistics keep training) and apply ``norms`` (`input_transforms_of`) before each forward."""
    if not norms and host is None:
        return policy
    steps = []
    for norm in norms or ():
        mean = torch.tensor(norm["mean"], dtype=torch.float64)
        var = torch.tensor(norm["var"], dtype=torch.float64)
        if norm["repeat"] > 1:
            axis = norm["axis"] % max(mean.dim(), 1)
            mean, var = torch.cat([mean] * norm["repeat"], axis), torch.cat([var] * norm["repeat"], axis)
        steps.append((mean.float(), (var + norm["epsilon"]).rsqrt().float(), norm["clip"]))
    key = policy.key(keys.OBSERVATION)
    raw: list[torch.Tensor] = []

    def normalize(module: Policy, args: tuple[Any, ...]) -> None:
        tensordict: TensorDictBase = args[0]
        observation = tensordict.get(key)
        raw.append(observation)
        if host is not None:  # back to the env's own values (the recipe's statistics as they are now)
            stats = host.statistics[policy.group.name]
            std = (stats.var + host.epsilon).sqrt().to(device=observation.device, dtype=torch.float32)
            observation = observation.to(torch.float32) * std + stats.mean.to(observation.device, torch.float32)
        for mean, inverse_std, clip in steps:
            observation = (observation.to(torch.float32) - mean.to(observation.device)) * inverse_std.to(
                observation.device
            )
            if clip is not None:
                observation = observation.clamp(-clip, clip)
        tensordict.set(key, observation)  # replaces the entry; the env's tensor is not written to

    def restore(module: Policy, args: tuple[Any, ...], output: Any) -> None:
        # The rows keep the observations as the env gave them (the rollout stores them).
        args[0].set(key, raw.pop())

    policy.register_forward_pre_hook(normalize)
    policy.register_forward_hook(restore)
    if norms:
        policy.origin = {**policy.origin, ORIGIN_KEY: [dict(n) for n in norms]}
    return policy
