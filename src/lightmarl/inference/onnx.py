"""Each binding's acting graph as ONNX, for game engines: ``lightmarl export --format onnx``.

For every binding `export_onnx` writes ``<binding>.onnx``: a graph from a batch of one
agent's inputs to its greedy action and the distribution's parameters, and ``manifest.json``
describing each graph's inputs, outputs and the preprocessing the caller does before it.
Scripted bindings (hand-written code, no network) are listed under ``skipped``.

Inputs (batch first, any batch size): ``observation`` ``[B, *shape]`` (``uint8`` where the env's
images are, else ``float32``); ``action_mask`` ``[B, num_actions]`` (bool) where the group has
one; ``agent_id`` ``[B]`` (int64: the agent's index in the env's ``possible_agents``) for policies
that read it; ``recurrent_state`` ``[B, *state_shape]`` for recurrent policies (zeros at an
episode's start; feed back ``next_recurrent_state``). Outputs: ``action`` (greedy: the mode of
the policy's distribution, a legal action under the mask) and, where the policy has them,
``logits`` (discrete) or ``loc`` / ``scale`` (continuous, before the tanh squashing), and
``next_recurrent_state``.

Observation normalization (``ObservationNorm``, its statistics frozen) is folded into the graph;
image ops (``Grayscale``, ``Resize``) and ``FrameStack`` keep per-agent memory or work on raw
frames, so the manifest lists them under ``preprocess``, in order, for the caller to apply.
The graphs are traced with PyTorch's TorchScript-based exporter (``dynamo=False``), which needs
no package beyond ``onnx``.
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from collections.abc import Collection
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict
from torch import nn
from torchrl.envs.utils import ExplorationType, set_exploration_type

from lightmarl import keys
from lightmarl.envs.spec import GroupSpec, observation_storage_dtype
from lightmarl.envs.transforms import FrameStack, FrameTransform, ObservationNorm, RewardNorm, VecTransform
from lightmarl.inference.observations import build_transforms, vector_input_spec
from lightmarl.policies.artifact import SavedPopulation
from lightmarl.policies.base import Policy, ScriptedPolicy
from lightmarl.policies.registry import build_policies

MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = "lightmarl.onnx/1"
#: outputs a graph carries where the policy writes them, in this order.
OUTPUT_KEYS = (keys.ACTION, keys.LOGITS, keys.LOC, keys.SCALE, keys.ACTION_VALUE, keys.NEXT_RECURRENT_STATE)
OPSET = 17


def require_onnx() -> None:
    """Raise an ImportError naming the extra where ``onnx`` is not installed."""
    if importlib.util.find_spec("onnx") is None:
        raise ImportError("ONNX export needs the `onnx` package: pip install 'lightmarl[onnx]'")


class _Normalize(nn.Module):
    """A frozen ``ObservationNorm`` on the graph's (possibly stacked) observations."""

    mean: torch.Tensor
    inverse_std: torch.Tensor

    def __init__(self, mean: torch.Tensor, var: torch.Tensor, epsilon: float, clip: float | None) -> None:
        super().__init__()
        self.register_buffer("mean", mean.to(torch.float32))
        self.register_buffer("inverse_std", (var + epsilon).rsqrt().to(torch.float32))
        self.clip = clip

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        normalized = (observation.to(torch.float32) - self.mean) * self.inverse_std
        return normalized if self.clip is None else normalized.clamp(-self.clip, self.clip)


class ActingGraph(nn.Module):
    """One binding's policy as a function of plain tensors, for tracing.

    Args:
        policy: the binding's policy.
        normalize: folded observation transforms, applied first, in order.
        outputs: the entries of the policy's output to return, in order.
    """

    def __init__(self, policy: Policy, normalize: list[nn.Module], outputs: list[str]) -> None:
        super().__init__()
        self.policy = policy
        self.normalize = nn.ModuleList(normalize)
        self.outputs = outputs
        group: GroupSpec = policy.group
        self.group = group
        self.inputs = [keys.OBSERVATION]
        if group.has_action_mask:
            self.inputs.append(keys.ACTION_MASK)
        if getattr(policy, "agent_id_input", False):
            self.inputs.append(keys.AGENT_ID)
        self.recurrent = bool(getattr(policy, "is_recurrent", False))
        if self.recurrent:
            self.inputs.append(keys.RECURRENT_STATE)

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        given = dict(zip(self.inputs, tensors))
        observation = given[keys.OBSERVATION]
        for step in self.normalize:
            observation = step(observation)
        batch = observation.shape[0]
        # The policy reads rows [batch, agents]: each graph row is one agent of a batch of its own.
        entries = {keys.OBSERVATION: observation.unsqueeze(1)}
        for key in self.inputs[1:]:
            entries[key] = given[key].unsqueeze(1)
        if self.recurrent:
            entries[keys.IS_INIT] = torch.zeros_like(given[keys.RECURRENT_STATE][:, :1, 0, 0], dtype=torch.bool)
        rows = TensorDict(entries, batch_size=[batch, 1])
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            result = self.policy(TensorDict({self.group.name: rows}, batch_size=[batch])).get(self.group.name)
        return tuple(result.get(key).squeeze(1) for key in self.outputs)


def _folded_and_preprocess(
    group: str, transforms: list[VecTransform], input_groups: dict[str, GroupSpec]
) -> tuple[list[nn.Module], list[dict[str, Any]]]:
    """The group's observation transforms split into graph modules (normalization) and the caller's steps."""
    preprocess: list[dict[str, Any]] = []
    folded: list[tuple[ObservationNorm, int, int]] = []  # (norm, stacked frames after it, stack axis)
    stacks: list[FrameStack] = []
    for transform in transforms:
        if transform.groups is not None and group not in transform.groups:
            continue
        if isinstance(transform, FrameTransform):
            preprocess.append({**transform.describe(), "applies_to": "each frame, before stacking"})
        elif isinstance(transform, FrameStack):
            stacks.append(transform)
            preprocess.append({**transform.describe(), "applies_to": "the agent's last frames, oldest first"})
        elif isinstance(transform, ObservationNorm):
            folded.append((transform, 0, 0))
        elif not isinstance(transform, RewardNorm):
            raise ValueError(
                f"onnx export: transform {type(transform).__name__} of group {group!r} cannot be folded into the "
                "graph nor described for the caller"
            )
        if isinstance(transform, FrameStack):
            spec = input_groups[group]
            axis = transform.axis(spec)
            folded = [(n, (k or 1) * transform.num_frames, axis) for n, k, _ in folded]
    modules: list[nn.Module] = []
    for norm, frames, axis in folded:
        stats = norm.statistics[group]
        mean, var = stats.mean, stats.var
        if frames:  # normalized before stacking: the stacked observation repeats the statistics per frame
            mean = torch.cat([mean] * frames, dim=axis)
            var = torch.cat([var] * frames, dim=axis)
        modules.append(_Normalize(mean, var, norm.epsilon, norm.clip))
    return modules, preprocess


def export_onnx(
    artifact: SavedPopulation, directory: str | Path, *, allow: Collection[str] = (), trust_code: bool = False
) -> Path:
    """Write every binding of ``artifact`` as ``<binding>.onnx`` plus ``manifest.json`` into ``directory``.

    Raises:
        ImportError: without the ``onnx`` extra.
        ValueError: for a transform that can be neither folded nor described, or a policy the
            exporter cannot trace.
    """
    require_onnx()
    artifact.check_classes(allow, trust_code=trust_code)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    groups = {name: artifact.group_spec(name) for name in artifact.groups}
    transforms = build_transforms(artifact, allow, trust_code=trust_code)
    policies = build_policies(artifact, groups=groups, host_transforms=transforms)
    frames = [t for t in transforms if isinstance(t, FrameTransform)]
    vector = [t for t in transforms if not isinstance(t, FrameTransform)]
    input_groups = dict(vector_input_spec(artifact, frames, vector).groups)
    manifest: dict[str, Any] = {"format": MANIFEST_FORMAT, "opset": OPSET, "env": artifact.env, "bindings": {}}
    manifest["agent_binding_map"] = artifact.agent_binding_map.get("default", {})
    manifest["skipped"] = {}
    for binding_id, policy in policies.items():
        if isinstance(policy, ScriptedPolicy):
            # Hand-written code (its own generators, NumPy, Python branches) is no graph to trace.
            manifest["skipped"][binding_id] = f"scripted policy {type(policy).__name__}: not a neural network"
            continue
        policy.eval().requires_grad_(False)
        group = policy.group
        normalize, preprocess = _folded_and_preprocess(group.name, transforms, input_groups)
        example = _example_inputs(policy, group)
        probe = ActingGraph(policy, normalize, list(OUTPUT_KEYS))
        outputs = _outputs_of(probe, example)
        graph = ActingGraph(policy, normalize, outputs)
        path = directory / f"{binding_id}.onnx"
        names = graph.inputs
        dynamic = {name: {0: "batch"} for name in [*names, *outputs]}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the tracer's notes on Python values it records as constants
                torch.onnx.export(
                    graph,
                    tuple(example[name] for name in names),
                    str(path),
                    input_names=names,
                    output_names=outputs,
                    dynamic_axes=dynamic,
                    opset_version=OPSET,
                    dynamo=False,
                )
        except Exception as err:
            raise ValueError(
                f"onnx export: binding {binding_id!r} ({type(policy).__name__}) could not be traced: {err}"
            ) from err
        manifest["bindings"][binding_id] = {
            "file": path.name,
            "class_path": artifact.bindings[binding_id]["class_path"],
            "group": group.name,
            "agents": list(group.agents),
            "inputs": {name: _describe(example[name]) for name in names},
            "outputs": outputs,
            "action_kind": group.action_kind,
            "folded": ["ObservationNorm"] * len(normalize),
            "preprocess": preprocess,
        }
    (directory / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
    return directory


def _example_inputs(policy: Policy, group: GroupSpec, batch: int = 2) -> dict[str, torch.Tensor]:
    """Inputs of the right shapes and dtypes for tracing."""
    uint8 = observation_storage_dtype(group.observation_dtype) == "uint8"
    observation = (
        torch.randint(0, 256, (batch, *group.observation_shape), dtype=torch.uint8)
        if uint8
        else torch.randn(batch, *group.observation_shape)
    )
    example = {keys.OBSERVATION: observation}
    if group.has_action_mask:
        example[keys.ACTION_MASK] = torch.ones(batch, group.num_actions, dtype=torch.bool)
    if getattr(policy, "agent_id_input", False):
        example[keys.AGENT_ID] = torch.tensor([group.agent_ids[0]] * batch)
    if getattr(policy, "is_recurrent", False):
        example[keys.RECURRENT_STATE] = torch.zeros(batch, *tuple(getattr(policy, "state_shape", ())))
    return example


def _outputs_of(graph: ActingGraph, example: dict[str, torch.Tensor]) -> list[str]:
    """Which of `OUTPUT_KEYS` the policy writes."""
    observation = example[keys.OBSERVATION]
    for step in graph.normalize:
        observation = step(observation)
    entries = {keys.OBSERVATION: observation.unsqueeze(1)}
    for key in graph.inputs[1:]:
        entries[key] = example[key].unsqueeze(1)
    if graph.recurrent:
        entries[keys.IS_INIT] = torch.zeros(observation.shape[0], 1, dtype=torch.bool)
    batch = observation.shape[0]
    rows = TensorDict(entries, batch_size=[batch, 1])
    with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
        result = graph.policy(TensorDict({graph.group.name: rows}, batch_size=[batch])).get(graph.group.name)
    return [key for key in OUTPUT_KEYS if key in result.keys()]


def _describe(tensor: torch.Tensor) -> dict[str, Any]:
    return {"shape": ["batch", *tensor.shape[1:]], "dtype": str(tensor.dtype).removeprefix("torch.")}
