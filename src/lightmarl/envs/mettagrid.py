"""MettaGrid tasks as PettingZoo envs: name `mines_env` in a recipe's ``env.env_fn``.

MettaGrid (``pip install 'lightmarl[mettagrid]'``, the ``mettagrid`` package of the Metta
project) is a fast C++ grid world whose PettingZoo adapter,
``mettagrid.envs.pettingzoo_env.MettaGridPettingZooEnv``, takes a ``MettaGridConfig`` and has
integer agent ids ``0, 1, ...`` (lightmarl names them ``agent_0, agent_1, ...``). It ships no task
with a reward that a few minutes of training can learn, so this module builds one from its
config API:

**mines**: ``num_agents`` agents on a walled ``size x size`` map with ``num_mines`` mines (and
``num_walls`` inner walls), placed at random from the episode's seed. An agent that moves into
a mine takes one ore from it (a mine holds ``ore_per_mine``; an empty mine gives nothing) and is
paid ``reward_per_ore``. Agents compete for the same mines. Actions: noop and four moves
(``Discrete(5)``). Uniformly random play collects a little ore by bumping into mines; a policy
that walks to the nearest mine that still holds ore and keeps mining it collects far more.

Observations are MettaGrid's **tokens**: ``[num_tokens, 3]`` uint8 rows ``(location, feature
id, value)``; ``location`` packs the cell of the agent's ``view x view`` window as
``row << 4 | column`` (``0xFE`` for global tokens such as the last action or reward), and rows
past the last token are padding, ``0xFF`` in every byte. What a token says is in its three
bytes, not in its row number: read them with
[`TokenEncoder`][lightmarl.policies.token_encoders.TokenEncoder] rather than flattening them.

The module imports ``mettagrid`` only when an env is built (env worker processes build it), and
raises an ``ImportError`` with the install command when it is missing.
"""

from __future__ import annotations

import importlib.util
from typing import Any

HAS_METTAGRID = importlib.util.find_spec("mettagrid") is not None
INSTALL_HINT = "MettaGrid tasks need the mettagrid package: pip install 'lightmarl[mettagrid]'"


def _positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"mines_env: {name} must be an integer >= {minimum}, got {value!r}")
    return value


def mines_config(
    num_agents: int = 4,
    size: int = 11,
    num_mines: int = 4,
    ore_per_mine: int = 25,
    num_walls: int = 4,
    max_steps: int = 100,
    view: int = 7,
    num_tokens: int = 48,
    reward_per_ore: float = 1.0,
) -> Any:
    """The ``MettaGridConfig`` of the mines task (arguments as `mines_env`)."""
    _positive_int("num_agents", num_agents)
    _positive_int("size", size, minimum=3)
    _positive_int("num_mines", num_mines)
    _positive_int("ore_per_mine", ore_per_mine)
    _positive_int("num_walls", num_walls, minimum=0)
    _positive_int("max_steps", max_steps)
    _positive_int("num_tokens", num_tokens)
    _positive_int("view", view, minimum=3)
    if view % 2 == 0 or view > 15:
        # A location byte holds a row and a column of 4 bits each, around the agent.
        raise ValueError(f"mines_env: view must be odd and at most 15 (the window is centred on the agent), got {view}")
    inner = (size - 2) ** 2  # the border is wall
    if num_agents + num_mines + num_walls > inner:
        raise ValueError(
            f"mines_env: {num_agents} agents + {num_mines} mines + {num_walls} walls do not fit the {inner} free "
            f"cells of a {size}x{size} map with its border; use a larger size"
        )
    if not HAS_METTAGRID:
        raise ImportError(INSTALL_HINT)
    from mettagrid.builder import building
    from mettagrid.config.game_value import InventoryValue
    from mettagrid.config.handler_config import Handler, withdraw
    from mettagrid.config.mettagrid_config import (
        ActionsConfig,
        AgentConfig,
        GameConfig,
        GridObjectConfig,
        InventoryConfig,
        MettaGridConfig,
        MoveActionConfig,
        NoopActionConfig,
    )
    from mettagrid.config.obs_config import ObsConfig
    from mettagrid.config.reward_config import reward
    from mettagrid.map_builder.random_map import RandomMapBuilderConfig

    # Moving into an object that blocks the way "uses" it: the mine hands one ore to the agent.
    mine = GridObjectConfig(
        name="mine",
        inventory=InventoryConfig(initial={"ore": ore_per_mine}),
        on_use_handler=Handler(mutations=[withdraw({"ore": 1})]),
    )
    return MettaGridConfig(
        label="mines",
        game=GameConfig(
            num_agents=num_agents,
            max_steps=max_steps,
            resource_names=["ore"],
            obs=ObsConfig(width=view, height=view, num_tokens=num_tokens),
            objects={"wall": building.wall, "mine": mine},
            actions=ActionsConfig(noop=NoopActionConfig(), move=MoveActionConfig()),
            agent=AgentConfig(rewards={"ore": reward(InventoryValue(item="ore"), weight=float(reward_per_ore))}),
            map_builder=RandomMapBuilderConfig(
                agents=num_agents,
                width=size,
                height=size,
                objects={"mine": num_mines, "wall": num_walls},
                border_width=1,
            ),
        ),
    )


def mines_env(
    num_agents: int = 4,
    size: int = 11,
    num_mines: int = 4,
    ore_per_mine: int = 25,
    num_walls: int = 4,
    max_steps: int = 100,
    view: int = 7,
    num_tokens: int = 48,
    reward_per_ore: float = 1.0,
) -> Any:
    """The mines task as a ``MettaGridPettingZooEnv`` (a PettingZoo ``ParallelEnv``, int agent ids).

    Args:
        num_agents: agents on the map (one group, ``agent_0 ...`` in lightmarl).
        size: the map is ``size x size`` cells, its border wall.
        num_mines: mines placed at random each episode.
        ore_per_mine: ore a mine holds; an agent takes one per move into it.
        num_walls: inner walls placed at random each episode.
        max_steps: steps per episode (then every agent is truncated).
        view: the agent sees a ``view x view`` window centred on itself (odd, at most 15).
        num_tokens: observation rows per agent (``[num_tokens, 3]`` uint8); tokens beyond it are
            dropped by MettaGrid, so leave room (a 5x5 view of this task needs about 30).
        reward_per_ore: reward for each ore taken.

    Example:
        >>> env = mines_env(num_agents=2, size=6, num_mines=2, num_walls=0)  # doctest: +SKIP
        >>> env.possible_agents, env.observation_space(0).shape, env.action_space(0).n  # doctest: +SKIP
        ([0, 1], (64, 3), 5)
    """
    config = mines_config(
        num_agents=num_agents,
        size=size,
        num_mines=num_mines,
        ore_per_mine=ore_per_mine,
        num_walls=num_walls,
        max_steps=max_steps,
        view=view,
        num_tokens=num_tokens,
        reward_per_ore=reward_per_ore,
    )
    return _seeded_env_class()(config)


def _seeded_env_class() -> type:
    """``MettaGridPettingZooEnv`` whose map, like the rest of an episode, follows ``reset(seed=...)``.

    MettaGrid seeds its C++ simulation with the reset seed but draws the map from a builder
    seed of its own (none by default: a fresh random map that no seed reproduces, and otherwise
    the builder's seed plus a count of the maps built so far). Here the builder's seed is the
    reset seed, so the same seed gives the same episode; ``reset()`` without a seed moves on to
    the next seed.
    """
    from mettagrid.envs.pettingzoo_env import MettaGridPettingZooEnv
    from mettagrid.simulator import Simulator

    class SeededSimulator(Simulator):  # type: ignore[misc]
        def next_map_seed(self, base_seed: int) -> int:
            return base_seed

    class SeededMettaGridEnv(MettaGridPettingZooEnv):  # type: ignore[misc]
        def __init__(self, config: Any) -> None:
            self._map_builder: Any = config.game.map_builder  # the RandomMapBuilderConfig of mines_config
            self._map_builder.seed = 0
            super().__init__(SeededSimulator(), config)

        def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
            seed = self._seed + 1 if seed is None else int(seed)
            self._map_builder.seed = seed
            return super().reset(seed=seed, options=options)

    return SeededMettaGridEnv
