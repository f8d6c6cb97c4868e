"""What the population experienced: the collector ([`collector`][lightmarl.data.collector]) and the rollout buffer
([`rollout_buffer`][lightmarl.data.rollout_buffer]). The key names of an experience row live in [`lightmarl.keys`][lightmarl.keys].

Submodules are imported directly.
"""
