"""Envs whose agent ids are not strings: PettingZoo allows any hashable id, and so does lightmarl.

* `IntIdsMatchEnv`: [`MatchTargetEnv`][lightmarl.envs.testing.match.MatchTargetEnv] with agents
  ``0, 1, ...`` (as MettaGrid's PettingZoo env has); lightmarl names them ``agent_0, agent_1, ...``.
* `TupleIdsMatchEnv`: the same task with agents ``("red", 0), ("red", 1), ("blue", 0)``,
  named ``red_0, red_1, blue_0``: two groups, ``red`` and ``blue``.
* `RenamedAECEnv`: a turn-based (AEC) env whose agents are renamed ``0, 1, ...``, e.g.
  ``int_ids_aec_env("pettingzoo.classic.tictactoe_v3.env")``.

They import no torch (env worker processes build them).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from typing import Any

from lightmarl._imports import import_object
from lightmarl.envs.testing.match import MatchTargetEnv


class IntIdsMatchEnv(MatchTargetEnv):
    """MatchTarget whose agents are the integers ``0 .. num_agents - 1``.

    Args:
        kwargs: [`MatchTargetEnv`][lightmarl.envs.testing.match.MatchTargetEnv]'s arguments.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.possible_agents = list(range(len(self.possible_agents)))  # type: ignore[arg-type]


class TupleIdsMatchEnv(MatchTargetEnv):
    """MatchTarget whose agents are ``(team, index)`` tuples, ``num_red`` red ones then ``num_blue`` blue ones.

    Args:
        num_red: agents ``("red", 0) ...``.
        num_blue: agents ``("blue", 0) ...``.
        kwargs: the rest of [`MatchTargetEnv`][lightmarl.envs.testing.match.MatchTargetEnv]'s arguments.
    """

    def __init__(self, num_red: int = 2, num_blue: int = 1, **kwargs: Any) -> None:
        super().__init__(num_agents=num_red + num_blue, **kwargs)
        ids = [("red", i) for i in range(num_red)] + [("blue", i) for i in range(num_blue)]
        self.possible_agents = ids  # type: ignore[assignment]


class RenamedAECEnv:
    """A PettingZoo AEC env seen through other agent ids (``ids[k]`` for its ``possible_agents[k]``).

    Forwards the AEC API (``agents``, ``agent_selection``, ``rewards``, ``terminations``,
    ``truncations``, ``infos``, ``observe``, ``step``, ``reset``, spaces) with every agent id
    translated; anything else goes to the wrapped env.

    Args:
        env: the AEC env.
        ids: one new id per agent of ``env.possible_agents``, in order.
    """

    def __init__(self, env: Any, ids: Sequence[Hashable]) -> None:
        if len(ids) != len(env.possible_agents) or len(set(ids)) != len(ids):
            raise ValueError(f"RenamedAECEnv: need {len(env.possible_agents)} distinct ids, got {list(ids)!r}")
        self.env = env
        self._to_new = dict(zip(env.possible_agents, ids))
        self._to_old = dict(zip(ids, env.possible_agents))
        self.possible_agents = list(ids)

    def __getattr__(self, name: str) -> Any:
        if name == "env":  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.env, name)

    def _keyed(self, values: dict) -> dict:
        return {self._to_new[a]: v for a, v in values.items()}

    @property
    def agents(self) -> list[Hashable]:
        return [self._to_new[a] for a in self.env.agents]

    @property
    def agent_selection(self) -> Hashable:
        return self._to_new[self.env.agent_selection]

    @property
    def rewards(self) -> dict:
        return self._keyed(self.env.rewards)

    @property
    def terminations(self) -> dict:
        return self._keyed(self.env.terminations)

    @property
    def truncations(self) -> dict:
        return self._keyed(self.env.truncations)

    @property
    def infos(self) -> dict:
        return self._keyed(self.env.infos)

    def observation_space(self, agent: Hashable) -> Any:
        return self.env.observation_space(self._to_old[agent])

    def action_space(self, agent: Hashable) -> Any:
        return self.env.action_space(self._to_old[agent])

    def observe(self, agent: Hashable) -> Any:
        return self.env.observe(self._to_old[agent])

    def agent_iter(self, max_iter: int = 2**63) -> Iterator[Hashable]:
        return (self._to_new[a] for a in self.env.agent_iter(max_iter))

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> None:
        self.env.step(action)

    def close(self) -> None:
        self.env.close()


def int_ids_aec_env(env_fn: str = "pettingzoo.classic.tictactoe_v3.env", **env_kwargs: Any) -> RenamedAECEnv:
    """The AEC env ``env_fn(**env_kwargs)`` with its agents renamed ``0, 1, ...``.

    Args:
        env_fn: import path of an AEC env constructor.
        env_kwargs: its keyword arguments.
    """
    env = import_object(env_fn, field="env_fn")(**env_kwargs)
    return RenamedAECEnv(env, list(range(len(env.possible_agents))))
