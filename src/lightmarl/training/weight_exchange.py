"""Two runs that train different bindings of the same population, exchanging weights.

The dual of one run with several trainable bindings (the two-trainer scenario): run A trains
``ppo_policy`` and plays a frozen copy of ``dqn_policy``; run B trains ``dqn_policy`` and plays
a frozen copy of ``ppo_policy``. Each run publishes its trainable bindings' weights to a shared
directory after every training iteration and loads the other run's before collecting, so each
samples against the other's latest policy.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import Callback, LightningModule, Trainer

from lightmarl.errors import ConfigError


class WeightExchange(Callback):
    """Publish some bindings' weights and follow others', through files in ``directory``.

    Files are written atomically (``<binding>.pt`` replaced by rename), so a reader never sees a
    half-written file. Only rank 0 publishes; every rank loads, so DDP ranks stay identical.

    Args:
        directory: a directory both runs can reach.
        publish: binding ids this run trains and shares.
        subscribe: binding ids this run plays with the other run's latest weights.
    """

    def __init__(self, directory: str, publish: list[str] | None = None, subscribe: list[str] | None = None) -> None:
        self.directory = Path(directory)
        self.publish = list(publish or [])
        self.subscribe = list(subscribe or [])
        self.loaded: dict[str, int] = {}  # binding -> version last loaded

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        table = getattr(pl_module, "table", None)
        if table is None:
            raise ConfigError("WeightExchange works with lightmarl's MARLModule")
        for field, ids, trainable in (("publish", self.publish, True), ("subscribe", self.subscribe, False)):
            for binding_id in ids:
                if binding_id not in table.index:
                    raise ConfigError(f"WeightExchange.{field}: no binding {binding_id!r}; bindings are {table.ids}")
                if table.binding(binding_id).trainable != trainable:
                    kind = "trainable" if trainable else "frozen (trainable: false)"
                    raise ConfigError(f"WeightExchange.{field}: binding {binding_id!r} must be {kind} in this run")
        self.directory.mkdir(parents=True, exist_ok=True)

    def path(self, binding_id: str) -> Path:
        return self.directory / f"{binding_id}.pt"

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        for binding_id in self.subscribe:
            path = self.path(binding_id)
            if not path.exists():
                continue  # the other run has not published yet: keep playing the initial weights
            saved = torch.load(path, map_location="cpu", weights_only=True)
            if self.loaded.get(binding_id) != saved["version"]:
                pl_module.set_weights(binding_id, saved["weights"])  # type: ignore[operator]
                self.loaded[binding_id] = int(saved["version"])

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_rank != 0:
            return
        for binding_id in self.publish:
            path = self.path(binding_id)
            staging = path.with_suffix(f".tmp{os.getpid()}")
            version = int(getattr(pl_module, "iterations", 0))
            torch.save({"version": version, "weights": pl_module.get_weights(binding_id)}, staging)  # type: ignore[operator]
            os.replace(staging, path)
