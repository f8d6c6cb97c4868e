"""FaultyMatchEnv: [`MatchTargetEnv`][lightmarl.envs.testing.match.MatchTargetEnv] with faults injected on purpose.

For tests of what a run does when its env misbehaves: rewards that turn NaN, a step that
never returns (a hung env worker) or a process that dies mid-step (a crashed one). Faults hit
only the copies first reset with a seed in ``fault_seeds``, from their ``fault_step``-th step
(counted over episodes since the env was built), so a test picks the env copy that fails and
when. With ``once_file`` a hang or crash happens once per file: the env creates the file as it
fails, and a copy rebuilt after a restart finds it and behaves. Imports no torch (env workers
build it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any, Literal

from lightmarl.envs.testing.match import MatchTargetEnv

Fault = Literal["nan_reward", "hang", "crash", "raise"]

#: exit code of a worker process that ``fault="crash"`` killed.
CRASH_EXIT_CODE = 13


class FaultyMatchEnv(MatchTargetEnv):
    """MatchTarget whose copies with a seed in ``fault_seeds`` misbehave from step ``fault_step`` on.

    Args:
        fault: ``nan_reward`` (the rewards of ``fault_agents`` are NaN), ``hang`` (``step`` sleeps
            ``hang_seconds``), ``crash`` (the process exits with `CRASH_EXIT_CODE` at once) or
            ``raise`` (``step`` raises a ``RuntimeError``, as a buggy env would).
        fault_seeds: reset seeds of the copies that fail (``None``: every copy reset with a seed).
        fault_step: the first step (since the env was built) that fails.
        fault_agents: agents whose rewards turn NaN (``nan_reward``; default: every agent).
        once_file: hang or crash only while this file does not exist (it is created as the fault happens).
        hang_seconds: how long a hung step sleeps.
        **kwargs: [`MatchTargetEnv`][lightmarl.envs.testing.match.MatchTargetEnv]'s arguments.
    """

    def __init__(
        self,
        fault: Fault = "nan_reward",
        fault_seeds: Sequence[int] | None = None,
        fault_step: int = 0,
        fault_agents: Sequence[str] | None = None,
        once_file: str | None = None,
        hang_seconds: float = 3600.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if fault not in ("nan_reward", "hang", "crash", "raise"):
            raise ValueError(f"FaultyMatchEnv: fault must be 'nan_reward', 'hang', 'crash' or 'raise', got {fault!r}")
        self.fault = fault
        self.fault_seeds = None if fault_seeds is None else {int(s) for s in fault_seeds}
        self.fault_step = fault_step
        self.fault_agents = set(self.possible_agents if fault_agents is None else fault_agents)
        self.once_file = once_file
        self.hang_seconds = hang_seconds
        self.armed = False
        self.steps = 0
        self._first_seed_seen = False

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        # The copy's first seed decides its fate: later episodes are reset with seeds derived from it.
        if seed is not None and not self._first_seed_seen:
            self._first_seed_seen = True
            self.armed = self.fault_seeds is None or seed in self.fault_seeds
        return super().reset(seed=seed, options=options)

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        failing = self.armed and self.steps >= self.fault_step
        self.steps += 1
        if failing and self.fault != "nan_reward" and self._first_time():
            if self.fault == "crash":
                os._exit(CRASH_EXIT_CODE)  # as a segfault would: no exception, no cleanup
            if self.fault == "raise":
                raise RuntimeError(f"FaultyMatchEnv: step {self.steps - 1} failed on purpose")
            time.sleep(self.hang_seconds)
        observations, rewards, terminations, truncations, infos = super().step(actions)
        if failing and self.fault == "nan_reward":
            rewards = {a: float("nan") if a in self.fault_agents else r for a, r in rewards.items()}
        return observations, rewards, terminations, truncations, infos

    def _first_time(self) -> bool:
        if self.once_file is None:
            return True
        try:
            with open(self.once_file, "x"):
                return True
        except FileExistsError:
            return False
