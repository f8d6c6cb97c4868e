"""How env copies are stepped: in this process, or in worker processes over shared memory.

The runners know nothing of any env family: a family hands them its stepping code (an
:class:`~lightmarl.envs.layout.EnvSlice` factory; PettingZoo's is
:func:`~lightmarl.envs.pettingzoo.slices.pettingzoo_slice`). Worker processes import only
:mod:`~lightmarl.envs.runners.worker` and what it imports, never torch, so this package's
``__init__`` imports nothing itself; import public names from :mod:`lightmarl.envs`.
"""
