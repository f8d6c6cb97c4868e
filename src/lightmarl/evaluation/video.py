"""Evaluation videos: a population's episodes rendered to RGB frames and written as a GIF (or MP4).

One env copy is built with ``render_mode="rgb_array"`` added to the recipe's ``env_kwargs`` and
wrapped in a :class:`FrameRecorder`, which renders a frame after every ``reset`` and ``step``.
The copy is stepped through the same vector code as training and evaluation
(:class:`~lightmarl.envs.pettingzoo.ParallelVecEnv`), so an episode of ``n`` steps gives
``n + 1`` frames: the start state, then the state after each step, the final one included
(the recorder sees it before the vector's auto-reset).

Rendering needs no display: the PettingZoo families lightmarl ships recipes for (mpe2, sisl,
butterfly) draw ``rgb_array`` frames on off-screen pygame surfaces. Files are written with
``imageio``: GIF through Pillow (TensorBoard's ``add_video`` logs nothing with moviepy 2.x),
MP4 where ``imageio-ffmpeg`` is installed.
"""

from __future__ import annotations

import importlib.util
import logging
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lightmarl.data import schema
from lightmarl.envs.pettingzoo import ParallelVecEnv, PettingZooEnvConfig, VecEnv, env_spec_of
from lightmarl.envs.transforms import TransformedVecEnv
from lightmarl.policies.multi_agent import MultiAgentPolicy
from lightmarl.policies.recurrent import RecurrentStates

log = logging.getLogger(__name__)

#: frames per second of a video whose env declares no ``metadata["render_fps"]``
DEFAULT_FPS = 10.0


class FrameRecorder:
    """A PettingZoo ``ParallelEnv`` that keeps an RGB frame of every state it reaches.

    Every other attribute is the wrapped env's. Each ``reset`` starts a new episode in
    :attr:`episodes`; each ``step`` appends to the current one.

    Args:
        env: a parallel env built with ``render_mode="rgb_array"``.
        max_side: downsample frames by the smallest integer stride that brings their longer
            side to at most this many pixels (``None``: keep full size). Keeps memory and file
            size small for large screens (knights_archers_zombies renders 1280x720).
        max_frames: stop keeping frames after this many (an episode that never ends must not
            fill the memory); :attr:`dropped` counts those not kept.
    """

    def __init__(self, env: Any, max_side: int | None = 512, max_frames: int = 5_000) -> None:
        self.env = env
        self.max_side = max_side
        self.max_frames = max_frames
        self.episodes: list[list[np.ndarray]] = []
        self.kept = 0
        self.dropped = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["env"], name)

    def reset(self, *args: Any, **kwargs: Any) -> Any:
        result = self.env.reset(*args, **kwargs)
        self.episodes.append([])
        self._record()
        return result

    def step(self, actions: dict) -> Any:
        result = self.env.step(actions)
        self._record()
        return result

    def _record(self) -> None:
        if self.kept >= self.max_frames:
            self.dropped += 1
            return
        self.episodes[-1].append(self.frame())
        self.kept += 1

    def frame(self) -> np.ndarray:
        """The env's current RGB frame ``[height, width, 3]`` (uint8), downsampled to ``max_side``."""
        frame = self.env.render()
        if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[-1] not in (3, 4):
            raise RuntimeError(
                f"render() of {type(self.env).__name__} returned {type(frame).__name__} "
                f"{getattr(frame, 'shape', '')}, not an RGB array [height, width, 3]; "
                "its render_mode must be 'rgb_array'"
            )
        stride = frame_stride(frame.shape[:2], self.max_side)
        return np.ascontiguousarray(frame[::stride, ::stride, :3], dtype=np.uint8)


def frame_stride(size: Sequence[int], max_side: int | None) -> int:
    """The smallest integer stride that brings the longer of ``size`` to at most ``max_side`` pixels."""
    if max_side is None:
        return 1
    return max(1, math.ceil(max(size) / max_side))


def make_rendering_env(env_config: PettingZooEnvConfig, max_side: int | None = 512) -> FrameRecorder:
    """One copy of the recipe's env with ``render_mode="rgb_array"``, recording its frames.

    Raises:
        ValueError: naming the env when it cannot be built with ``render_mode="rgb_array"``.
    """
    config = replace(env_config, env_kwargs={**env_config.env_kwargs, "render_mode": "rgb_array"}, num_workers=0)
    try:
        env = config.make_one()
    except ValueError as err:
        raise ValueError(f"evaluation video: the env must accept render_mode='rgb_array': {err}") from None
    return FrameRecorder(env, max_side=max_side)


def check_renders(env_config: PettingZooEnvConfig) -> None:
    """Fail early (before training) when the env cannot render RGB frames: build, reset and render once."""
    recorder = make_rendering_env(env_config)
    try:
        recorder.reset(seed=0)
    except Exception as err:
        raise ValueError(f"evaluation video: env {env_config.env_fn!r} cannot render RGB frames: {err}") from err
    finally:
        recorder.close()


@torch.no_grad()
def record_episodes(
    policy: MultiAgentPolicy,
    env_config: PettingZooEnvConfig,
    num_episodes: int,
    seed: int,
    deterministic: bool = True,
    device: torch.device | str = "cpu",
    max_side: int | None = 512,
    max_frames: int = 5_000,
) -> tuple[list[list[np.ndarray]], float]:
    """Play ``num_episodes`` episodes in one rendering env copy and return their frames.

    The copy is reset with ``seed`` (later episodes continue its RNG) and plays the map of
    training env copy 0, like copy 0 of :func:`~lightmarl.evaluation.evaluate_episodes`; the
    recipe's ``env.transforms`` apply with frozen statistics, as in evaluation.

    Args:
        policy: the population.
        env_config: the env (``render_mode="rgb_array"`` is added to its ``env_kwargs``).
        num_episodes: episodes to play.
        seed: reset seed of the env copy.
        deterministic: take each policy's mode action instead of sampling.
        device: where the policies run.
        max_side: longest frame side in pixels after downsampling (``None``: full size).
        max_frames: frames kept at most, over all episodes.

    Returns:
        ``(episodes, fps)``: per episode its frames ``[height, width, 3]`` uint8 (``n + 1`` for
        an episode of ``n`` steps), and the env's ``metadata["render_fps"]`` (or
        :data:`DEFAULT_FPS`).
    """
    if num_episodes < 1:
        raise ValueError(f"num_episodes: expected a positive integer, got {num_episodes!r}")
    recorder = make_rendering_env(env_config, max_side=max_side)
    recorder.max_frames = max_frames
    env: VecEnv = ParallelVecEnv(
        [recorder], env_spec_of(recorder, name=env_config.name, state=env_config.state), seeds=[seed]
    )
    if env_config.transforms:
        # The policies act on what they were trained on: the recipe's transforms, statistics frozen.
        env = TransformedVecEnv(env, env_config.transforms, training=False)
    groups = list(env.spec.groups.values())
    recurrent = RecurrentStates(
        dict(policy.policies.items()),
        policy.table.group_of_binding,
        1,
        {g.name: g.num_agents for g in groups},
    )
    fps = float(getattr(recorder, "metadata", {}).get("render_fps") or DEFAULT_FPS)
    finished = 0
    try:
        env.reset()
        mode = ExplorationType.DETERMINISTIC if deterministic else ExplorationType.RANDOM
        with set_exploration_type(mode):
            while finished < num_episodes:
                td = env.observation_td()
                recurrent.prepare(td)
                td = td.to(device)
                policy(td)
                _, ended = env.step({g.name: td.get((g.name, schema.ACTION)).cpu() for g in groups})
                if recurrent:
                    recurrent.advance(td, ended)
                finished += int(ended.sum())
    finally:
        env.close()
    if recorder.dropped:
        log.warning("evaluation video: kept the first %d frames, dropped %d", recorder.kept, recorder.dropped)
    # The vector resets the copy after the last episode: that reset's frame starts an unplayed one.
    return recorder.episodes[:num_episodes], fps


def write_video(frames: Sequence[np.ndarray], path: str | Path, fps: float = DEFAULT_FPS) -> Path:
    """Write RGB frames ``[height, width, 3]`` to ``path``: ``.gif`` (Pillow) or ``.mp4`` (imageio-ffmpeg).

    Parent directories are created. Returns the path written.
    """
    path = Path(path)
    if not frames:
        raise ValueError(f"write_video: no frames to write to {str(path)!r}")
    if not fps > 0:
        raise ValueError(f"write_video: fps must be positive, got {fps!r}")
    if importlib.util.find_spec("imageio") is None:
        raise ImportError("evaluation videos need imageio and pillow: pip install imageio pillow")
    import imageio.v3 as iio

    suffix = path.suffix.lower()
    path.parent.mkdir(parents=True, exist_ok=True)
    stacked = np.stack(list(frames))
    if suffix == ".gif":
        # GIF stores frame durations in 1/100 s (Pillow takes milliseconds and truncates): round
        # to the nearest 10 ms (15 fps plays as 70 ms a frame). loop=0 repeats forever.
        iio.imwrite(path, stacked, extension=".gif", duration=10 * max(1, round(100.0 / fps)), loop=0)
    elif suffix == ".mp4":
        if importlib.util.find_spec("imageio_ffmpeg") is None:
            raise ImportError(
                f"writing {str(path)!r} needs imageio-ffmpeg: pip install imageio-ffmpeg (or write a .gif)"
            )
        iio.imwrite(path, stacked, extension=".mp4", plugin="FFMPEG", fps=fps)
    else:
        raise ValueError(f"write_video: {str(path)!r} must end in .gif or .mp4")
    return path


def write_evaluation_video(
    policy: MultiAgentPolicy,
    env_config: PettingZooEnvConfig,
    path: str | Path,
    num_episodes: int = 1,
    seed: int = 0,
    deterministic: bool = True,
    device: torch.device | str = "cpu",
    max_side: int | None = 512,
) -> Path:
    """Play ``num_episodes`` episodes (:func:`record_episodes`) and write them, one after another, to ``path``.

    Examples:
        >>> from lightmarl.training import MARLModule
        >>> module = MARLModule()  # doctest: +SKIP
        >>> write_evaluation_video(module.population, module.env_config, "spread.gif")  # doctest: +SKIP
        PosixPath('spread.gif')
    """
    episodes, fps = record_episodes(
        policy, env_config, num_episodes, seed, deterministic=deterministic, device=device, max_side=max_side
    )
    return write_video([frame for episode in episodes for frame in episode], path, fps)
