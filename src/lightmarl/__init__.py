"""lightmarl: multi-agent RL on PyTorch Lightning, TorchRL and TensorDict.

A population of policy bindings (trainable and frozen, neural and scripted) acts in
vectorized PettingZoo envs; each trainable binding learns with its own TorchRL loss inside
a Lightning ``LightningModule`` (:class:`lightmarl.training.MARLModule`).
"""

__version__ = "0.1.0"
