"""Image transforms (Grayscale, Resize, FrameStack on images): values against hand computations,
specs, the same frames in process and in worker processes, uint8 all the way into the rollout
buffer, torch-free workers, and errors before training."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from lightmarl import keys
from lightmarl._imports import instantiate
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.envs.checks import random_actions
from lightmarl.envs.image_ops import GrayscaleOp, ResizeOp
from lightmarl.envs.pettingzoo.checks import warn_if_frames_frozen
from lightmarl.envs.transforms import FrameStack, Grayscale, ObservationNorm, Resize

SRC = str(Path(__file__).resolve().parents[2] / "src")
PISTONBALL = "pettingzoo.butterfly.pistonball_v6.parallel_env"


def pistonball(num_envs=2, num_workers=0, transforms=(), **kwargs) -> PettingZooEnvConfig:
    pytest.importorskip("pettingzoo.butterfly.pistonball_v6")
    # rgb_array: pistonball draws the ball and the pistons into its observations only with a render mode.
    env_kwargs = {"n_pistons": 3, "continuous": False, "max_cycles": 6, "render_mode": "rgb_array", **kwargs}
    return PettingZooEnvConfig(PISTONBALL, env_kwargs, num_envs, num_workers, transforms=list(transforms))


# -- the NumPy ops, by hand ------------------------------------------------------------------


def test_grayscale_is_bt601_luma_rounded_in_uint8():
    frame = np.array([[[255, 0, 0], [0, 255, 0]], [[0, 0, 255], [10, 20, 30]]], dtype=np.uint8)
    gray = GrayscaleOp()(frame)
    # 0.299 R + 0.587 G + 0.114 B, rounded: 76.245, 149.685, 29.07, 18.15
    assert gray.dtype == np.uint8 and gray.shape == (2, 2, 1)
    assert gray[..., 0].tolist() == [[76, 150], [29, 18]]
    assert GrayscaleOp(keep_channel=False)(frame).shape == (2, 2)
    floats = GrayscaleOp()(frame.astype(np.float32))
    assert floats.dtype == np.float32 and floats[1, 1, 0] == pytest.approx(18.15, abs=1e-4)


def test_area_resize_averages_the_source_pixels_each_output_pixel_covers():
    frame = np.arange(16, dtype=np.float32).reshape(4, 4)
    assert ResizeOp(2, 2)(frame).tolist() == [[2.5, 4.5], [10.5, 12.5]]  # 2x2 block means
    # 3 -> 2 pixels: [a, b, c] -> [(a + b / 2) / 1.5, (b / 2 + c) / 1.5]
    row = np.array([[3.0, 6.0, 9.0]], dtype=np.float32)
    assert ResizeOp(1, 2)(row)[0].tolist() == pytest.approx([4.0, 8.0])
    # Enlarging: each output pixel copies the source pixel it falls in.
    assert ResizeOp(1, 4)(np.array([[1.0, 5.0]], dtype=np.float32))[0].tolist() == [1.0, 1.0, 5.0, 5.0]
    image = np.full((5, 7, 3), 200, dtype=np.uint8)
    image[0, 0] = 0
    small = ResizeOp(1, 1)(image)
    assert small.dtype == np.uint8 and small.shape == (1, 1, 3)
    assert small[0, 0].tolist() == [round(200 * 34 / 35)] * 3  # one 0 among 35 pixels, rounded


def test_nearest_resize_takes_the_pixel_at_each_output_centre():
    frame = np.arange(12, dtype=np.uint8).reshape(3, 4)
    # rows: centres 0.75, 2.25 of 3 -> 0, 2; columns: 1, 3 of 4
    assert ResizeOp(2, 2, "nearest")(frame).tolist() == [[1, 3], [9, 11]]


def test_ops_on_a_batch_of_frames_equal_the_ops_frame_by_frame():
    frames = np.random.default_rng(0).integers(0, 256, (5, 37, 23, 3), dtype=np.uint8)
    for op in (
        GrayscaleOp(),
        ResizeOp(9, 5).for_source((37, 23, 3)),
        ResizeOp(9, 5, "nearest").for_source((37, 23, 3)),
    ):
        assert np.array_equal(op(frames), np.stack([op(f) for f in frames])), op


# -- transforms in a recipe --------------------------------------------------------------------


def test_spec_after_resize_grayscale_and_frame_stack():
    config = pistonball(transforms=[Resize(24, 12), Grayscale(), FrameStack(num_frames=3)])
    group = config.spec().groups["piston"]
    assert (group.observation_shape, group.observation_dtype) == ((24, 12, 3), "uint8")
    assert config.base_spec().groups["piston"].observation_shape == (457, 120, 3)


def test_vectors_hold_the_transformed_uint8_frames_the_raw_env_gives(tmp_path):
    config = pistonball(num_envs=2, transforms=[Grayscale(), Resize(20, 10)])
    vector = config.make_vector(seed=3)
    try:
        current = vector.reset()
        observation = current["piston"][keys.OBSERVATION]
        assert observation.dtype == torch.uint8 and observation.shape == (2, 3, 20, 10, 1)
        raw = config.make_one()
        frames, _ = raw.reset(seed=3)  # copy 0 is reset with the vector's seed
        for i, agent in enumerate(raw.possible_agents):
            expected = ResizeOp(20, 10)(GrayscaleOp()(frames[agent]))
            assert np.array_equal(observation[0, i].numpy(), expected), agent
        raw.close()
    finally:
        vector.close()


def test_worker_processes_give_the_frames_of_the_in_process_vector():
    transforms = [Resize(16, 8, "nearest"), Grayscale(), FrameStack(num_frames=2)]
    local = pistonball(num_envs=2, transforms=transforms).make_vector(seed=0)
    remote = pistonball(num_envs=2, num_workers=2, transforms=transforms).make_vector(seed=0)
    try:
        assert torch.equal(local.reset()["piston"]["observation"], remote.reset()["piston"]["observation"])
        generator = torch.Generator().manual_seed(0)
        for _ in range(8):  # episodes of 6 steps: across an auto-reset
            actions = random_actions(local.spec, local.current, generator)
            (a, _), (b, _) = local.step(actions), remote.step(actions)
            assert a["piston"]["observation"].dtype == torch.uint8
            assert torch.equal(a["piston"]["observation"], b["piston"]["observation"])
            assert torch.equal(local.current["piston"]["observation"], remote.current["piston"]["observation"])
    finally:
        local.close()
        remote.close()


def test_frame_stack_keeps_uint8_images_and_stacks_channels():
    # 6 pistons: with 3 the ball starts at the left wall and the first step ends the episode.
    transforms = [Resize(8, 4, "nearest"), Grayscale(), FrameStack(num_frames=3)]
    vector = pistonball(num_envs=1, transforms=transforms, n_pistons=6).make_vector(seed=0)
    try:
        first = vector.reset()["piston"]["observation"].clone()
        assert first.dtype == torch.uint8 and first.shape == (1, 6, 8, 4, 3)
        assert torch.equal(first[..., 0], first[..., 2])  # a fresh stack repeats the first frame
        _, ended = vector.step({"piston": torch.full((1, 6), 2, dtype=torch.int64)})
        assert not ended.any()
        now = vector.current["piston"]["observation"]
        assert torch.equal(now[..., :2], first[..., 1:])  # shifted by one frame, oldest first
        assert not torch.equal(now[..., 2], first[..., 2])  # the newest frame is the new one
    finally:
        vector.close()


def test_observation_norm_after_image_transforms_reads_float():
    config = pistonball(num_envs=1, transforms=[Resize(8, 4), Grayscale(), ObservationNorm()])
    assert config.spec().groups["piston"].observation_dtype == "float32"
    vector = config.make_vector(seed=0)
    try:
        assert vector.reset()["piston"]["observation"].dtype == torch.float32
    finally:
        vector.close()


def test_the_rollout_and_its_buffer_keep_frames_uint8():
    from lightmarl.data.collector import RolloutCollector
    from lightmarl.data.rollout_buffer import MultiAgentRolloutBuffer
    from lightmarl.policies import MLPActorCritic, MultiAgentPolicy
    from lightmarl.policies.encoders import CNNEncoder
    from lightmarl.population import BindingTable, PolicyBinding

    config = pistonball(num_envs=2, transforms=[Resize(16, 8, "nearest"), Grayscale(), FrameStack(num_frames=2)])
    spec = config.spec()
    group = spec.groups["piston"]
    encoder = CNNEncoder(group, channels=[4], kernel_sizes=3, strides=2, out_features=8)
    policy = MLPActorCritic(group, hidden_sizes=[8], critic="local", encoder=encoder)
    table = BindingTable([PolicyBinding("main", class_path="x.y")], spec, ["main"] * 3)
    buffer = MultiAgentRolloutBuffer(n_agents=3)
    collector = RolloutCollector(
        config.make_vector(seed=0), MultiAgentPolicy({"main": policy}, table), 4, buffers={"piston": buffer}
    )
    experience = collector.collect()
    for key in [("piston", keys.OBSERVATION), ("next", "piston", keys.OBSERVATION)]:
        assert experience.get(key).dtype == torch.uint8, key
    assert buffer.trajectory(0, 0)["observation"].dtype == torch.uint8
    # 4 bytes per value as float32; uint8 keeps 1.
    assert experience.get(("piston", keys.OBSERVATION)).element_size() == 1
    # The encoder converts (scaled 1/255) where it runs: uint8 in gives what float in gives.
    frames = experience.get(("piston", keys.OBSERVATION))[0, 0]
    assert torch.allclose(encoder(frames), encoder(frames.float()))


def test_a_worker_process_with_image_transforms_imports_no_torch():
    pytest.importorskip("pettingzoo.butterfly.pistonball_v6")
    code = textwrap.dedent(
        f"""
        import sys
        from lightmarl._imports import import_object
        import lightmarl.envs.runners.worker
        from lightmarl.envs.image_ops import GrayscaleOp, ResizeOp
        make = import_object("lightmarl.envs.pettingzoo.frames.framed_env", field="env_fn")
        env = make({PISTONBALL!r}, {{"n_pistons": 3}}, {{"piston_0": (ResizeOp(8, 4), GrayscaleOp())}})
        observations, _ = env.reset(seed=0)
        assert observations["piston_0"].shape == (8, 4, 1), observations["piston_0"].shape
        heavy = sorted(m for m in ("torch", "tensordict", "torchrl", "lightning") if m in sys.modules)
        assert not heavy, heavy
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr


# -- errors, before training -----------------------------------------------------------------


def test_bad_image_transforms_fail_clearly():
    with pytest.raises(ValueError, match=r"Resize\]\.height: expected a positive integer, got 0"):
        Resize(height=0)
    with pytest.raises(ValueError, match="interpolation: expected 'area' or 'nearest'"):
        Resize(interpolation="cubic")
    with pytest.raises(ValueError, match=r"\['Resize'\] must come before FrameStack"):
        pistonball(transforms=[FrameStack(2), Resize(8, 8)])
    with pytest.raises(ValueError, match=r"Grayscale.*group 'piston'.*RGB images"):
        pistonball(transforms=[Grayscale(), Grayscale()]).spec()
    with pytest.raises(ValueError, match=r"apply to parallel envs; this env is turn-based"):
        PettingZooEnvConfig("pettingzoo.classic.tictactoe_v3.env", transforms=[Resize(2, 2)]).spec()


def test_recording_vector_for_videos_sees_the_transformed_frames():
    from lightmarl.envs.rendering import FrameRecorder

    config = pistonball(num_envs=1, transforms=[Resize(8, 4, "nearest"), Grayscale(), FrameStack(num_frames=2)])
    recorders = []

    def record(env, render):
        recorders.append(FrameRecorder(env, render=render))
        return recorders[0]

    vector = config.make_recording_vector(seed=0, record=record)
    try:
        assert vector.reset()["piston"]["observation"].shape == (1, 3, 8, 4, 2)
        vector.step({"piston": torch.ones(1, 3, dtype=torch.int64)})
        frames = recorders[0].episodes[0]
        assert len(frames) == 2 and frames[0].ndim == 3 and frames[0].shape[-1] == 3  # full RGB frames for the video
    finally:
        vector.close()


# -- envs that draw their frames only when they render ----------------------------------------


def test_frozen_frames_warn_and_drawn_ones_do_not():
    frame = np.zeros((4, 3, 3), dtype=np.uint8)
    with pytest.warns(UserWarning, match=r"env 'toy'.*no agent's image observation changed.*render_mode: rgb_array"):
        warn_if_frames_frozen("toy", {"a": frame, "b": frame + 1}, {"a": frame.copy(), "b": frame + 1})
    moved = frame.copy()
    moved[0, 0, 0] = 9
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_frames_frozen("toy", {"a": frame, "b": frame}, {"a": frame, "b": moved})  # one agent's changed
        warn_if_frames_frozen("toy", {}, {})  # no images


def test_pistonball_without_a_render_mode_is_caught_by_the_env_check():
    # Without a render mode pistonball never draws the ball or the pistons: every frame is the
    # background, the same at every step.
    with pytest.warns(UserWarning, match=r"env 'pistonball_v6'.*render_mode: rgb_array"):
        pistonball(render_mode=None).spec()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pistonball(render_mode="rgb_array").spec()


def test_the_pistonball_recipe_frames_show_the_ball_and_change_every_step():
    pytest.importorskip("pettingzoo.butterfly.pistonball_v6")
    env = yaml.safe_load((Path(__file__).resolve().parents[2] / "recipes/pistonball.yaml").read_text())["model"]["env"]
    transforms = [instantiate(t, field="env.transforms") for t in env["transforms"]]
    config = PettingZooEnvConfig(env["env_fn"], env["env_kwargs"], 1, transforms=transforms)
    vector = config.make_vector(seed=3)
    try:
        vector.reset()
        vector.step({"piston": torch.ones(1, 20, dtype=torch.int64)})
        before = vector.current["piston"]["observation"].clone()
        raw = vector.base.envs[0].unwrapped
        under_ball = int((raw.ball.position[0] - raw.wall_width) // raw.piston_width)
        vector.step({"piston": torch.ones(1, 20, dtype=torch.int64)})
        after = vector.current["piston"]["observation"]
    finally:
        vector.close()
    newest = after[0, :, :, :, -1].float()  # the latest gray frame of each piston
    assert not torch.equal(before, after), "the frames did not change in a step"
    # The ball and the pistons' bodies are the same blue (gray 138 on a white background): the
    # strip under the ball holds more of it than any strip far from the ball.
    blue = ((newest > 100) & (newest < 180)).flatten(1).sum(1)
    assert blue[under_ball] > blue[[i for i in range(20) if abs(i - under_ball) > 3]].max()
    far = [i for i in range(20) if abs(i - under_ball) > 3]
    assert (newest[far].std(0) > 0).any(), "pistons far from the ball see the same frame"
