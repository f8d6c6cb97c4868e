"""Evaluation videos: frames of whole episodes, written as GIF (or MP4), from a validate run."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
from lightning.pytorch import Trainer

from lightmarl.envs import PettingZooEnvConfig
from lightmarl.envs.transforms import FrameStack, ObservationNorm
from lightmarl.evaluation.scenarios import EvaluationConfig, ValidationConfig
from lightmarl.evaluation.video import (
    FrameRecorder,
    frame_stride,
    make_rendering_env,
    record_episodes,
    write_video,
)
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, UniformRandomPolicy
from lightmarl.population import BindingTable, PolicyBinding
from lightmarl.training import MARLModule

iio = pytest.importorskip("imageio.v3")

SPREAD = PettingZooEnvConfig(
    env_fn="mpe2.simple_spread_v3.parallel_env", env_kwargs={"N": 3, "max_cycles": 25}, num_envs=2
)
RANDOM = [{"id": "random", "class_path": "lightmarl.policies.UniformRandomPolicy"}]


def rendered_shape(config: PettingZooEnvConfig) -> tuple[int, int, int]:
    """The shape of the env's own ``render()``, after the recorder's default downsampling."""
    recorder = make_rendering_env(config, max_side=None)
    recorder.reset(seed=0)
    height, width, _ = recorder.frame().shape
    recorder.close()
    stride = frame_stride((height, width), 512)
    return math.ceil(height / stride), math.ceil(width / stride), 3


def test_validate_writes_a_gif_of_one_episode_per_evaluation(tmp_path):
    module = MARLModule(
        env=SPREAD,
        policy_bindings=RANDOM,
        evaluation=EvaluationConfig(validation=ValidationConfig(episodes=2, video_episodes=1)),
    )
    Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path).validate(
        module
    )
    videos = list((tmp_path / "videos").glob("*.gif"))
    assert [v.name for v in videos] == ["eval_iter0.gif"]
    frames = iio.imread(videos[0], index=None)
    assert frames.shape[1:] == rendered_shape(SPREAD) and frames.dtype == np.uint8
    assert not np.array_equal(frames[0], frames[-1]), "the agents move: first and last frames differ"
    # 25 steps: the start state and the state after every step, the final one included, 100 ms each
    # (mpe2 renders at 10 fps). Pillow merges identical consecutive frames into one longer frame.
    durations = [meta["duration"] for meta in (iio.immeta(videos[0], index=i) for i in range(len(frames)))]
    assert sum(durations) == 26 * 100, durations
    assert len(frames) <= 26


def test_validate_writes_a_gif_with_the_recipes_transforms(tmp_path):
    normalized = PettingZooEnvConfig(
        env_fn=SPREAD.env_fn, env_kwargs={"N": 3, "max_cycles": 5}, num_envs=2, transforms=[ObservationNorm()]
    )
    mlp = [{"id": "main", "class_path": "lightmarl.policies.MLPActorCritic"}]
    module = MARLModule(
        env=normalized,
        policy_bindings=mlp,
        evaluation=EvaluationConfig(validation=ValidationConfig(episodes=2, video_episodes=2)),
    )
    Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path).validate(
        module
    )
    (video,) = (tmp_path / "videos").glob("*.gif")
    durations = [
        meta["duration"] for meta in (iio.immeta(video, index=i) for i in range(len(iio.imread(video, index=None))))
    ]
    assert sum(durations) == 2 * 6 * 100  # two episodes of 5 steps: 6 frames each


def test_recorded_episodes_end_on_their_final_state_not_the_reset_one():
    config = PettingZooEnvConfig(env_fn=SPREAD.env_fn, env_kwargs={"N": 3, "max_cycles": 5}, num_envs=1)
    spec = config.spec()
    table = BindingTable([PolicyBinding("random", class_path="x.y")], spec)
    population = MultiAgentPolicy({"random": UniformRandomPolicy(spec.groups["agent"], seed=0)}, table)
    episodes, fps = record_episodes(population, config, num_episodes=2, seed=7, max_side=None)
    assert [len(e) for e in episodes] == [6, 6]
    assert fps == 10.0  # mpe2's metadata["render_fps"]
    # Seed 7 restarts the same first episode: its start frame matches; the second episode starts elsewhere.
    again, _ = record_episodes(population, config, num_episodes=1, seed=7, max_side=None)
    np.testing.assert_array_equal(again[0][0], episodes[0][0])
    assert not np.array_equal(episodes[0][-1], episodes[1][0]), "the last frame is the episode's end, not the reset"


def test_frame_stride_and_recorder_limits():
    assert frame_stride((720, 1280), 512) == 3
    assert frame_stride((700, 700), 512) == 2
    assert frame_stride((240, 240), 512) == 1
    assert frame_stride((720, 1280), None) == 1
    recorder = make_rendering_env(SPREAD, max_side=100)
    recorder.max_frames = 2
    recorder.reset(seed=0)
    for _ in range(3):
        recorder.step({a: 0 for a in recorder.agents})
    recorder.close()
    assert [len(e) for e in recorder.episodes] == [2] and recorder.dropped == 2
    assert max(recorder.episodes[0][0].shape[:2]) <= 100


def test_write_video_checks_its_input(tmp_path):
    frames = [np.full((8, 10, 3), i * 20, dtype=np.uint8) for i in range(4)]
    gif = write_video(frames, tmp_path / "sub" / "clip.gif", fps=5)
    assert iio.imread(gif, index=None).shape == (4, 8, 10, 3)
    with pytest.raises(ValueError, match=r"must end in \.gif or \.mp4"):
        write_video(frames, tmp_path / "clip.avi")
    with pytest.raises(ValueError, match="no frames"):
        write_video([], tmp_path / "empty.gif")
    with pytest.raises(ValueError, match="fps must be positive"):
        write_video(frames, tmp_path / "clip.gif", fps=0)


@pytest.mark.skipif(importlib.util.find_spec("imageio_ffmpeg") is None, reason="imageio-ffmpeg is not installed")
def test_write_video_mp4(tmp_path):
    frames = [np.full((16, 16, 3), i * 20, dtype=np.uint8) for i in range(5)]
    path = write_video(frames, tmp_path / "clip.mp4", fps=5)
    assert path.stat().st_size > 0


def test_bad_video_settings_fail_before_training():
    with pytest.raises(ValueError, match=r"evaluation.validation.video_episodes: expected an integer >= 0, got -1"):
        MARLModule(env=SPREAD, evaluation=EvaluationConfig(validation=ValidationConfig(video_episodes=-1)))
    no_render = PettingZooEnvConfig(env_fn="lightmarl.envs.testing.memory.parallel_env", num_envs=2)
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        MARLModule(env=no_render, evaluation=EvaluationConfig(validation=ValidationConfig(video_episodes=1)))


def test_recorder_forwards_the_env_api():
    recorder = make_rendering_env(SPREAD)
    assert isinstance(recorder, FrameRecorder)
    assert recorder.possible_agents == ["agent_0", "agent_1", "agent_2"]
    assert recorder.metadata["render_fps"] == 10
    recorder.close()


def test_recorded_policies_see_the_recipes_transforms():
    config = PettingZooEnvConfig(
        env_fn=SPREAD.env_fn, env_kwargs={"N": 3, "max_cycles": 5}, num_envs=1, transforms=[FrameStack(num_frames=2)]
    )
    spec = config.spec()  # stacked: the policy's observations are twice as wide as the env's
    assert spec.groups["agent"].observation_shape == (36,)
    table = BindingTable([PolicyBinding("main", class_path="x.y")], spec)
    population = MultiAgentPolicy({"main": MLPActorCritic(spec.groups["agent"])}, table)
    episodes, _ = record_episodes(population, config, num_episodes=1, seed=0)
    assert len(episodes[0]) == 6


def test_an_env_family_without_recording_fails_before_training():
    from dataclasses import dataclass, field

    from lightmarl.envs.config import EnvConfig

    @dataclass
    class NoFrames(EnvConfig):
        """A user's env family that does not implement make_base_recording_vector."""

        num_envs: int = 2
        transforms: list = field(default_factory=list)

        @property
        def name(self) -> str:
            return "no_frames"

        def base_spec(self):
            return SPREAD.base_spec()

        def make_base_vector(self, seed, num_envs, evaluation=False):
            return SPREAD.make_base_vector(seed, num_envs, evaluation)

        def describe(self):
            return {"env": "no_frames"}

    MARLModule(env=NoFrames(), policy_bindings=RANDOM)  # trains and evaluates
    with pytest.raises(ValueError, match=r"evaluation video: env 'no_frames' \(NoFrames\) cannot record RGB frames"):
        MARLModule(
            env=NoFrames(),
            policy_bindings=RANDOM,
            evaluation=EvaluationConfig(validation=ValidationConfig(video_episodes=1)),
        )
