"""PettingZoo envs (parallel and turn-based AEC): spec building, stepping code, vectors and the recipe config.

Modules, lowest first: :mod:`~lightmarl.envs.pettingzoo.spec` (groups and spaces),
:mod:`~lightmarl.envs.pettingzoo.checks` (API checks of a raw env),
:mod:`~lightmarl.envs.pettingzoo.parallel` and :mod:`~lightmarl.envs.pettingzoo.aec` (stepping
code), :mod:`~lightmarl.envs.pettingzoo.slices` (which of the two), all torch-free because env
worker processes import them; then :mod:`~lightmarl.envs.pettingzoo.vector` (the in-process
vector) and :mod:`~lightmarl.envs.pettingzoo.config` (:class:`~lightmarl.envs.pettingzoo.config.PettingZooEnvConfig`).
This ``__init__`` imports nothing, so a worker process importing a stepping module does not
import torch; import public names from :mod:`lightmarl.envs`.
"""
