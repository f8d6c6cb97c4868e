"""Evaluation videos: a population's episodes rendered to RGB frames and written as a GIF (or MP4).

One env copy is built by the recipe's env config ([`EnvConfig.make_recording_vector`][lightmarl.envs.config.EnvConfig.make_recording_vector]: a
PettingZoo env with ``render_mode="rgb_array"`` added to its ``env_kwargs``, or one VMAS copy),
its env object wrapped in a `FrameRecorder`, which renders a
frame after every ``reset`` and ``step``. The copy is stepped through the same vector code as
training and evaluation, with the recipe's transforms (statistics frozen), so an episode of ``n``
steps gives ``n + 1`` frames: the start state, then the state after each step, the final one
included (the recorder sees it before the vector's auto-reset).

Rendering needs no display: the PettingZoo families lightmarl ships recipes for (mpe2, sisl,
butterfly) draw ``rgb_array`` frames on off-screen pygame surfaces, VMAS through EGL where
``libEGL`` is installed ([`render`][lightmarl.envs.vmas.VmasVecEnv.render]). Files are written with
``imageio``: GIF through Pillow (TensorBoard's ``add_video`` logs nothing with moviepy 2.x),
MP4 where ``imageio-ffmpeg`` is installed.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torchrl.envs.utils import ExplorationType

from lightmarl.data.rollout import RolloutLoop, RolloutStep
from lightmarl.envs.base import VecEnv
from lightmarl.envs.config import EnvConfig
from lightmarl.envs.pettingzoo.config import PettingZooEnvConfig
from lightmarl.envs.rendering import FrameRecorder, frame_stride
from lightmarl.policies.base import fresh_random_streams
from lightmarl.policies.multi_agent import MultiAgentPolicy

__all__ = [
    "DEFAULT_FPS",
    "FrameRecorder",
    "check_renders",
    "frame_stride",
    "make_recording_vector",
    "make_rendering_env",
    "record_episodes",
    "write_evaluation_video",
    "write_video",
]

log = logging.getLogger(__name__)

#: frames per second of a video whose env declares no ``metadata["render_fps"]``
DEFAULT_FPS = 10.0


def make_rendering_env(env_config: PettingZooEnvConfig, max_side: int | None = 512) -> FrameRecorder:
    """One copy of a PettingZoo recipe's env with ``render_mode="rgb_array"``, recording its frames.

    Raises:
        ValueError: naming the env when it cannot be built with ``render_mode="rgb_array"``.
    """
    return FrameRecorder(env_config.make_rendering_one(), max_side=max_side)


def make_recording_vector(
    env_config: EnvConfig, seed: int, max_side: int | None = 512, max_frames: int = 5_000
) -> tuple[VecEnv, FrameRecorder]:
    """One evaluation copy of any env family ([`EnvConfig.make_recording_vector`][lightmarl.envs.config.EnvConfig.make_recording_vector]) and the recorder of its frames."""
    recorders: list[FrameRecorder] = []

    def record(env: Any, render: Any) -> FrameRecorder:
        recorders.append(FrameRecorder(env, max_side=max_side, max_frames=max_frames, render=render))
        return recorders[-1]

    vector = env_config.make_recording_vector(seed, record)
    (recorder,) = recorders
    return vector, recorder


def check_renders(env_config: EnvConfig) -> None:
    """Fail early (before training) when the env cannot render RGB frames: build, reset and render once."""
    vector, _ = make_recording_vector(env_config, seed=0)
    try:
        vector.reset()
    except Exception as err:
        raise ValueError(f"evaluation video: env {env_config.name!r} cannot render RGB frames: {err}") from err
    finally:
        vector.close()


@torch.no_grad()
def record_episodes(
    policy: MultiAgentPolicy,
    env_config: EnvConfig,
    num_episodes: int,
    seed: int,
    deterministic: bool = True,
    device: torch.device | str = "cpu",
    max_side: int | None = 512,
    max_frames: int = 5_000,
) -> tuple[list[list[np.ndarray]], float]:
    """Play ``num_episodes`` episodes in one rendering env copy and return their frames.

    The copy is reset with ``seed`` (later episodes continue its RNG) and plays the map of
    training env copy 0, like copy 0 of [`evaluate_episodes`][lightmarl.evaluation.episodes.evaluate_episodes]; the
    recipe's ``env.transforms`` apply with frozen statistics, as in evaluation. Any env family
    whose config implements [`make_recording_vector`][lightmarl.envs.config.EnvConfig.make_recording_vector]
    (PettingZoo, VMAS) can be recorded.

    Args:
        policy: the population.
        env_config: the env (PettingZoo: ``render_mode="rgb_array"`` is added to its ``env_kwargs``).
        num_episodes: episodes to play.
        seed: reset seed of the env copy.
        deterministic: take each policy's mode action instead of sampling.
        device: where the policies run.
        max_side: longest frame side in pixels after downsampling (``None``: full size).
        max_frames: frames kept at most, over all episodes.

    Returns:
        ``(episodes, fps)``: per episode its frames ``[height, width, 3]`` uint8 (``n + 1`` for
        an episode of ``n`` steps), and the env's ``metadata["render_fps"]`` (or
        `DEFAULT_FPS`).
    """
    if num_episodes < 1:
        raise ValueError(f"num_episodes: expected a positive integer, got {num_episodes!r}")
    env, recorder = make_recording_vector(env_config, seed, max_side=max_side, max_frames=max_frames)
    metadata = getattr(recorder, "metadata", None)
    fps = float((metadata.get("render_fps") if isinstance(metadata, dict) else None) or DEFAULT_FPS)
    mode = ExplorationType.DETERMINISTIC if deterministic else ExplorationType.RANDOM
    loop = RolloutLoop(env, policy, mode, device)
    try:
        with fresh_random_streams(policy):  # as evaluation: scripted streams from their seeds
            loop.run(EpisodeCounter(num_episodes))
    finally:
        loop.close()
    if recorder.dropped:
        log.warning("evaluation video: kept the first %d frames, dropped %d", recorder.kept, recorder.dropped)
    # The vector resets the copy after the last episode: that reset's frame starts an unplayed one.
    return recorder.episodes[:num_episodes], fps


class EpisodeCounter:
    """The `StepRecorder` of a recording: done after ``num_episodes`` episodes.

    The frames themselves are taken by the env's `FrameRecorder` as it steps.
    """

    def __init__(self, num_episodes: int) -> None:
        self.num_episodes = num_episodes
        self.finished = 0

    @property
    def done(self) -> bool:
        return self.finished >= self.num_episodes

    def record(self, step: RolloutStep) -> None:
        self.finished += int(step.ended.sum())


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
    env_config: EnvConfig,
    path: str | Path,
    num_episodes: int = 1,
    seed: int = 0,
    deterministic: bool = True,
    device: torch.device | str = "cpu",
    max_side: int | None = 512,
) -> Path:
    """Play ``num_episodes`` episodes (`record_episodes`) and write them, one after another, to ``path``.

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
