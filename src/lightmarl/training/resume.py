"""Exact resume: the state of every training process that a checkpoint holds beyond weights and optimizers.

`fit` for 2N iterations and `fit` for N, then `--ckpt_path last` for N more, give bit-identical
weights and optimizer states. Lightning's checkpoint already holds the weights, optimizers and
loop counters, and [`MARLModule`][lightmarl.training.module.MARLModule] adds the trainers' target
networks and counters, the transforms' statistics and the league; what differs between
processes is kept here, under `CHECKPOINT_KEY`, one entry per rank (gathered to rank 0,
which writes the file):

* the RNG streams: torch (CPU, and the CUDA device's where the run uses one), NumPy's global
  one and Python's ``random``, and each binding's own generator (a seeded scripted policy's);
* the replay buffers (TorchRL storages, tensors only; ``model.checkpoint_replay: false`` leaves
  them out, and a resumed off-policy learner then refills its buffer from scratch);
* the collector ([`state_dict`][lightmarl.data.collector.RolloutCollector.state_dict]): counters,
  running episode statistics, recurrent states, the env copies' episodes in flight, the
  transforms' per-copy memory and statistics; and the league's running seat returns.

**The env rule.** A checkpoint falls between two rollouts, when the env copies are mid-episode,
and a PettingZoo env cannot be snapshotted. Instead every copy's episode ``k`` is reset with a
seed derived from the copy's seed (run seed, rank and copy index) and ``k``
(`episode_seed`), and the checkpoint keeps the actions of each
episode in flight. On resume each copy is reset for its episode and fast-forwarded through those actions, which
puts an env that is deterministic given its seed and actions back in the same state. Where the
fast-forwarded observations differ from the saved ones (an env with randomness of its own), the run
warns naming the copies and goes on from the fast-forwarded state: weights, optimizers, buffers and
RNG streams are still restored, but the run is no longer bit-identical. Vectors that cannot
fast-forward (VMAS) start new episodes on resume, with a warning.

The pieces go back in the order the run needs them: the replay buffers when Lightning loads the
checkpoint (`RunResume.load`), the env copies once the collector exists
(`RunResume.restore_collector`, in ``on_fit_start``), and the RNG streams last, right before
the first training step (`RunResume.restore_rng`, in ``on_train_start``), so that nothing in
between draws from them.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from lightning.pytorch.strategies import Strategy
from lightning.pytorch.utilities import rank_zero_info

from lightmarl.algorithms import MARLTrainer
from lightmarl.data.collector import RolloutCollector
from lightmarl.training import collectives
from lightmarl.training.league import LeagueTraining

#: where a Lightning checkpoint keeps the per-rank resume state.
CHECKPOINT_KEY = "lightmarl_resume"


def capture_rng(device: torch.device) -> dict[str, Any]:
    """The process's RNG streams as tensors and numbers (loadable with ``weights_only=True``)."""
    _, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    version, internal, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
        "numpy": {
            "keys": torch.from_numpy(np.asarray(keys).astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "python": {"version": version, "internal": torch.tensor(internal, dtype=torch.int64), "gauss_next": gauss_next},
    }


def restore_rng(state: dict[str, Any], device: torch.device) -> None:
    """Set the process's RNG streams to `capture_rng`'s ``state``."""
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)
    saved = state["numpy"]
    keys = saved["keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, saved["pos"], saved["has_gauss"], saved["cached_gaussian"]))
    python = state["python"]
    random.setstate((python["version"], tuple(python["internal"].tolist()), python["gauss_next"]))


def seed_rank_streams(base_seed: int, rank: int, policies: Mapping[str, Any]) -> None:
    """Give a DDP rank RNG streams of its own: rank 0 keeps those ``seed_everything`` started, rank
    ``r > 0`` restarts torch's, NumPy's and Python's from ``SeedSequence([base_seed, r])`` and each
    seeded scripted policy's own generator from ``SeedSequence([its seed, r])``.

    Every rank starts from the same seed, so without this N ranks sample the same actions and, in an
    env without randomness of its own (connect four), collect N copies of the same games. Called
    once the policies are built (their initial weights stay identical on every rank) and before the
    first rollout; a resumed run then puts each rank's saved streams back (`RunResume.restore_rng`).
    """
    if rank == 0:
        return
    torch_seed, numpy_seed, python_seed = np.random.SeedSequence([base_seed, rank]).generate_state(3)
    torch.manual_seed(int(torch_seed))
    np.random.seed(int(numpy_seed))
    random.seed(int(python_seed))
    for policy in policies.values():
        generator, seed = getattr(policy, "generator", None), getattr(policy, "random_seed", None)
        if isinstance(generator, torch.Generator) and seed is not None:
            generator.manual_seed(int(np.random.SeedSequence([seed, rank]).generate_state(1)[0]))


class RunResume:
    """Saves every rank's resume state into checkpoints and puts it back in a resumed run.

    Args:
        checkpoint_replay: keep the replay buffers in checkpoints.
    """

    def __init__(self, checkpoint_replay: bool = True) -> None:
        if not isinstance(checkpoint_replay, bool):
            raise ValueError(f"model.checkpoint_replay: expected true or false, got {checkpoint_replay!r}")
        self.checkpoint_replay = checkpoint_replay
        self._pending: dict[str, Any] | None = None  # this rank's saved state, until the run has put it back

    def save(
        self,
        collector: RolloutCollector,
        trainer: MARLTrainer | None,
        league: LeagueTraining | None,
        device: torch.device,
        strategy: Strategy | None,
        policies: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Every rank's state (all ranks call it: under DDP ``strategy``'s ranks gather theirs);
        ``policies``: the bindings, whose own generators (a seeded scripted policy's) are saved too."""
        state = {
            "rng": capture_rng(device),
            "generators": policy_generators(policies or {}),
            "collector": collector.state_dict(),
            "replay": trainer.replay_state_dict() if trainer is not None and self.checkpoint_replay else {},
            "league": league.rank_state_dict() if league is not None and league.matchmaker is not None else None,
        }
        ranks = collectives.all_gather_objects(strategy, state)
        return {"world_size": len(ranks), "ranks": ranks}

    def load(self, saved: dict[str, Any] | None, rank: int, world_size: int, trainer: MARLTrainer | None) -> None:
        """Take this rank's part of a checkpoint's resume state: the replay state (replay buffers, open transitions) now, the rest later."""
        self._pending = None
        if saved is None:
            return
        if saved["world_size"] != world_size:
            warnings.warn(
                f"lightmarl: the checkpoint was written by {saved['world_size']} processes and this run has "
                f"{world_size}: env copies start new episodes and the RNG streams are not restored (resume is not "
                "bit-identical); replay buffers are restored for the ranks both runs have",
                stacklevel=2,
            )
        if rank >= len(saved["ranks"]):
            return
        mine = saved["ranks"][rank]
        if trainer is not None:
            trainer.load_replay_state_dict(mine["replay"])
        if saved["world_size"] == world_size:
            self._pending = mine

    def restore_collector(self, collector: RolloutCollector, league: LeagueTraining | None) -> None:
        """Put the env copies back mid-episode, with the collector's counters (before the first rollout)."""
        if self._pending is None:
            return
        problems = collector.load_state_dict(self._pending["collector"])
        if league is not None and self._pending["league"] is not None:
            league.load_rank_state_dict(self._pending["league"])
        for problem in problems:
            warnings.warn(f"lightmarl: resume is not bit-identical: {problem}", stacklevel=2)
        fast_forwarded = sum(len(next(iter(a.values()), ())) for a in self._pending["collector"]["history"]["actions"])
        kept = (
            f", kept experience (replay buffers, open transitions) of {sorted(self._pending['replay'])}"
            if self._pending["replay"]
            else ""
        )
        rank_zero_info(
            f"lightmarl: resumed {collector.num_envs} env copies mid-episode ({fast_forwarded} actions re-stepped){kept}"
        )

    def restore_rng(self, device: torch.device, policies: Mapping[str, Any] | None = None) -> None:
        """Set the RNG streams last, right before the first training step (``policies``' own generators too)."""
        if self._pending is not None:
            restore_rng(self._pending["rng"], device)
            for binding, generator_state in self._pending.get("generators", {}).items():
                generator = getattr((policies or {}).get(binding), "generator", None)
                if isinstance(generator, torch.Generator):
                    generator.set_state(generator_state)
        self._pending = None


def policy_generators(policies: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """binding -> the state of the binding's own ``torch.Generator`` (a seeded scripted policy's
    `own_random_stream`), for the bindings that have one."""
    return {
        binding: policy.generator.get_state()
        for binding, policy in policies.items()
        if isinstance(getattr(policy, "generator", None), torch.Generator)
    }
