"""How it runs at scale: the LightningModule, rollout data and gradient stepping."""

from lightmarl.training.memory import MemoryMonitor
from lightmarl.training.module import MARLModule

__all__ = ["MARLModule", "MemoryMonitor"]
