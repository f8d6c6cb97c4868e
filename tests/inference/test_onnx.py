"""`lightmarl export --format onnx`: onnxruntime's greedy actions equal PyTorch's on 1,000 observations
for an MLP, a CNN, a masked turn-based, a recurrent and a continuous-action policy; normalization is
folded into the graph and frame stacks are listed for the caller."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lightmarl import keys
from lightmarl.envs.spec import GroupSpec
from lightmarl.envs.transforms import FrameStack, ObservationNorm
from lightmarl.inference import read_artifact
from lightmarl.inference.onnx import export_onnx
from lightmarl.policies import MLPActorCritic, PolicyDict, RecurrentActorCritic

ort = pytest.importorskip("onnxruntime")
N = 1000


def group(**fields) -> GroupSpec:
    base = {"name": "agent", "agents": ("agent_0", "agent_1"), "agent_ids": (0, 1), "observation_shape": (6,)}
    return GroupSpec(**{**base, "action_kind": "discrete", "num_actions": 5, **fields})


def exported(tmp_path, policy, **origin):
    policy.origin = {"class_path": f"lightmarl.policies.{type(policy).__name__}", "policy_kwargs": origin}
    PolicyDict({"main": policy}).export(tmp_path / "export")
    artifact = read_artifact(tmp_path / "export")
    export_onnx(artifact, tmp_path / "onnx")
    session = ort.InferenceSession(str(tmp_path / "onnx" / "main.onnx"))
    manifest = json.loads((tmp_path / "onnx" / "manifest.json").read_text())
    return session, manifest["bindings"]["main"]


def torch_actions(policy, entries):
    g = policy.group
    rows = TensorDict({k: v.unsqueeze(1) for k, v in entries.items()}, batch_size=[N, 1])
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        out = policy(TensorDict({g.name: rows}, batch_size=[N])).get(g.name)
    return out


def test_mlp_discrete(tmp_path):
    policy = MLPActorCritic(group(), hidden_sizes=[32]).eval()
    session, manifest = exported(tmp_path, policy, hidden_sizes=[32])
    observation = torch.randn(N, 6)
    action, logits = session.run(["action", "logits"], {"observation": observation.numpy()})
    expected = torch_actions(policy, {keys.OBSERVATION: observation})
    assert np.array_equal(action, expected[keys.ACTION][:, 0].numpy())
    assert np.allclose(logits, expected[keys.LOGITS][:, 0].numpy(), atol=1e-5)
    assert manifest["inputs"]["observation"] == {"shape": ["batch", 6], "dtype": "float32"}
    assert len(set(action.tolist())) > 1, "a test of constant actions would prove little"


def test_cnn_on_uint8_images(tmp_path):
    images = group(observation_shape=(12, 12, 3), observation_dtype="uint8")
    kwargs = {
        "hidden_sizes": [16],
        "encoder": {"class_path": "lightmarl.policies.CNNEncoder", "init_args": {"channels": [4], "out_features": 16}},
    }
    policy = MLPActorCritic(images, **kwargs).eval()
    session, manifest = exported(tmp_path, policy, **kwargs)
    observation = torch.randint(0, 256, (N, 12, 12, 3), dtype=torch.uint8)
    (action,) = session.run(["action"], {"observation": observation.numpy()})
    expected = torch_actions(policy, {keys.OBSERVATION: observation})[keys.ACTION][:, 0].numpy()
    assert np.array_equal(action, expected) and manifest["inputs"]["observation"]["dtype"] == "uint8"


def test_masked_turn_based(tmp_path):
    masked = group(has_action_mask=True, num_actions=7)
    policy = MLPActorCritic(masked, hidden_sizes=[32]).eval()
    session, _ = exported(tmp_path, policy, hidden_sizes=[32])
    observation = torch.randn(N, 6)
    mask = torch.rand(N, 7) < 0.4
    mask[torch.arange(N), torch.randint(0, 7, (N,))] = True  # at least one legal move
    (action,) = session.run(["action"], {"observation": observation.numpy(), "action_mask": mask.numpy()})
    expected = torch_actions(policy, {keys.OBSERVATION: observation, keys.ACTION_MASK: mask})[keys.ACTION][:, 0]
    assert np.array_equal(action, expected.numpy())
    assert mask[torch.arange(N), torch.as_tensor(action)].all(), "every greedy action is legal"


def test_recurrent_state_in_and_out(tmp_path):
    policy = RecurrentActorCritic(group(), hidden_size=16, encoder_sizes=[16]).eval()
    session, manifest = exported(tmp_path, policy, hidden_size=16, encoder_sizes=[16])
    state = torch.zeros(N, *policy.state_shape)
    for _ in range(3):  # a few steps, feeding the state back
        observation = torch.randn(N, 6)
        action, next_state = session.run(
            ["action", "next_recurrent_state"],
            {"observation": observation.numpy(), "recurrent_state": state.numpy()},
        )
        expected = torch_actions(
            policy,
            {
                keys.OBSERVATION: observation,
                keys.RECURRENT_STATE: state,
                keys.IS_INIT: torch.zeros(N, dtype=torch.bool),
            },
        )
        assert np.array_equal(action, expected[keys.ACTION][:, 0].numpy())
        state = expected[keys.NEXT_RECURRENT_STATE][:, 0]
        assert np.allclose(next_state, state.numpy(), atol=1e-5)
    assert manifest["inputs"]["recurrent_state"]["shape"] == ["batch", *policy.state_shape]


def test_continuous_actions(tmp_path):
    box = group(
        action_kind="continuous", num_actions=0, action_shape=(2,), action_low=(-1.0, 0.0), action_high=(1.0, 2.0)
    )
    policy = MLPActorCritic(box, hidden_sizes=[32]).eval()
    session, manifest = exported(tmp_path, policy, hidden_sizes=[32])
    observation = torch.randn(N, 6)
    action, loc = session.run(["action", "loc"], {"observation": observation.numpy()})
    expected = torch_actions(policy, {keys.OBSERVATION: observation})
    assert np.allclose(action, expected[keys.ACTION][:, 0].numpy(), atol=1e-5)
    assert np.allclose(loc, expected[keys.LOC][:, 0].numpy(), atol=1e-5)
    assert manifest["outputs"] == ["action", "loc", "scale"]


def test_observation_norm_is_folded_and_frame_stacks_are_listed(tmp_path):
    """[ObservationNorm, FrameStack]: the graph normalizes each stacked frame with the saved statistics."""
    stacked = group(observation_shape=(6,))
    policy = MLPActorCritic(stacked, hidden_sizes=[32]).eval()
    policy.origin = {"class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"hidden_sizes": [32]}}
    PolicyDict({"main": policy}).export(tmp_path / "export")
    artifact = read_artifact(tmp_path / "export")
    norm, stack = ObservationNorm(clip=3.0), FrameStack(num_frames=2)
    mean, var = torch.randn(3, dtype=torch.float64), torch.rand(3, dtype=torch.float64) + 0.5
    norm.load_state_dict({"statistics": {"agent": {"mean": mean, "var": var, "count": 10}}})
    artifact.transforms = [{**t.describe(), "state": t.state_dict()} for t in (norm, stack)]
    export_onnx(artifact, tmp_path / "onnx")
    manifest = json.loads((tmp_path / "onnx" / "manifest.json").read_text())["bindings"]["main"]
    assert manifest["folded"] == ["ObservationNorm"]
    assert [p["class_path"].rsplit(".", 1)[-1] for p in manifest["preprocess"]] == ["FrameStack"]
    session = ort.InferenceSession(str(tmp_path / "onnx" / "main.onnx"))
    raw = torch.randn(N, 6) * 3
    (logits,) = session.run(["logits"], {"observation": raw.numpy()})
    normalized = ((raw - mean.repeat(2).float()) / (var.repeat(2).float() + 1e-8).sqrt()).clamp(-3, 3)
    expected = torch_actions(policy, {keys.OBSERVATION: normalized})[keys.LOGITS][:, 0]
    assert np.allclose(logits, expected.numpy(), atol=1e-4)


def test_scripted_bindings_are_listed_as_skipped(tmp_path, capsys):
    from lightmarl.cli import main
    from lightmarl.policies import NoOpPolicy

    learner = MLPActorCritic(group(), hidden_sizes=[8])
    learner.origin = {"class_path": "lightmarl.policies.MLPActorCritic", "policy_kwargs": {"hidden_sizes": [8]}}
    script = NoOpPolicy(group())
    script.origin = {"class_path": "lightmarl.policies.NoOpPolicy", "policy_kwargs": {}}
    PolicyDict({"main": learner, "npc": script}).export(tmp_path / "export")
    main(["export", str(tmp_path / "export"), "--out", str(tmp_path / "onnx"), "--format", "onnx"])
    assert "no ONNX graph for npc: scripted policy NoOpPolicy" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "onnx" / "manifest.json").read_text())
    assert set(manifest["bindings"]) == {"main"} and set(manifest["skipped"]) == {"npc"}
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == ["main.onnx", "manifest.json"]
