"""What the population experienced: the experience schema (:mod:`.schema`), the collector
(:mod:`.collector`) and the rollout buffer (:mod:`.rollout_buffer`).

Submodules are imported directly; ``schema`` has no dependencies so that every layer can
use its key names.
"""
