"""Optional transforms of a vector's outputs: observation and reward normalization, frame stacking, images.

A recipe lists them under its env, applied in order to what every
[`VecEnv`][lightmarl.envs.base.VecEnv] returns (in-process, worker processes or VMAS)::

    env:
      env_fn: mpe2.simple_spread_v3.parallel_env
      transforms:
        - class_path: lightmarl.envs.transforms.ObservationNorm
        - class_path: lightmarl.envs.transforms.RewardNorm
          init_args: {gamma: 0.99}
        - class_path: lightmarl.envs.transforms.FrameStack
          init_args: {num_frames: 4}

Two kinds of state, kept apart:

* **statistics** (running means and variances) belong to the [`VecTransform`][lightmarl.envs.transforms.base.VecTransform] object of
  the recipe. Every vector built from the recipe shares them: training vectors update them,
  evaluation vectors read them frozen. They are saved in the model checkpoint
  (`transforms_state_dict`) and restored on resume and in ``validate --ckpt_path``.
* **per-vector memory** (the last frames of each agent, each agent's discounted return) belongs
  to the `BoundTransform` that [`VecTransform.bind`][lightmarl.envs.transforms.base.VecTransform.bind] makes for one vector.

Transforms run in the training process on the vector's torch outputs
([`TransformedVecEnv`][lightmarl.envs.transforms.base.TransformedVecEnv]), so env worker processes stay torch-free; the image transforms
(`image`: ``Grayscale``, ``Resize``) are the exception: they
change each frame alone and run where the env runs, in NumPy, so they come first in the list. The spec a policy is built
from, ``EnvConfig.spec()``, is the transformed one (frame stacking widens observations).
Transforms apply to agent groups, never to the global ``state`` of the root.

Modules: `base` (the transform interface, the transformed
vector, checkpoint state), `normalization` (``ObservationNorm``,
``RewardNorm``), `frame_stack` (``FrameStack``),
`image` (``Grayscale``, ``Resize``).
"""

from __future__ import annotations

from lightmarl.envs.transforms.base import (
    BoundTransform,
    TransformedVecEnv,
    VecTransform,
    load_transforms_state_dict,
    transformed_spec,
    transforms_state_dict,
)
from lightmarl.envs.transforms.frame_stack import FrameStack
from lightmarl.envs.transforms.image import FrameTransform, Grayscale, Resize, split_frame_transforms
from lightmarl.envs.transforms.normalization import ObservationNorm, RewardNorm, RunningMeanStd

__all__ = [
    "BoundTransform",
    "FrameStack",
    "FrameTransform",
    "Grayscale",
    "ObservationNorm",
    "Resize",
    "RewardNorm",
    "RunningMeanStd",
    "TransformedVecEnv",
    "VecTransform",
    "load_transforms_state_dict",
    "split_frame_transforms",
    "transformed_spec",
    "transforms_state_dict",
]
