"""How env copies are stepped: in this process, or in worker processes over shared memory.

The runners know nothing of any env family: a family hands them its stepping code (an
`EnvSlice` factory; PettingZoo's is
`pettingzoo_slice`). Worker processes import only
`worker` and what it imports, never torch, so this package's
``__init__`` imports nothing itself; import public names from [`lightmarl.envs`][lightmarl.envs].
"""
