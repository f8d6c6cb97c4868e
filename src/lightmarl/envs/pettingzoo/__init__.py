"""PettingZoo envs (parallel and turn-based AEC): spec building, stepping code, vectors and the recipe config.

Modules, lowest first: `spec` (groups and spaces),
`checks` (API checks of a raw env),
`parallel` and `aec` (stepping
code), `slices` (which of the two), all torch-free because env
worker processes import them; then `vector` (the in-process
vector) and `config` ([`PettingZooEnvConfig`][lightmarl.envs.pettingzoo.config.PettingZooEnvConfig]).
This ``__init__`` imports nothing, so a worker process importing a stepping module does not
import torch; import public names from [`lightmarl.envs`][lightmarl.envs].
"""
