"""What the population experienced: the collector (:mod:`.collector`) and the rollout buffer
(:mod:`.rollout_buffer`). The key names of an experience row live in :mod:`lightmarl.keys`.

Submodules are imported directly.
"""
