"""lightmarl: multi-agent RL on PyTorch Lightning, TorchRL and TensorDict.

A population of policy bindings (trainable and frozen, neural and scripted) acts in
vectorized PettingZoo envs; each trainable binding learns with its own TorchRL loss inside
a Lightning ``LightningModule`` ([`lightmarl.training.MARLModule`][lightmarl.training.module.MARLModule]).
``lightmarl.load_population(path)`` loads a trained population to act
([`lightmarl.inference`][lightmarl.inference]).
"""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:  # PEP 562: `import lightmarl` stays light; torch loads on first use
    if name == "load_population":
        from lightmarl.inference import load_population

        return load_population
    raise AttributeError(f"module 'lightmarl' has no attribute {name!r}")
