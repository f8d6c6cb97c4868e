"""OpenSpiel games as PettingZoo envs: name `openspiel_env` in a recipe's ``env.env_fn``.

OpenSpiel (``pip install 'lightmarl[openspiel]'``, the ``open_spiel`` package) holds many
two-player and n-player games with exact solution methods: poker (``kuhn_poker``,
``leduc_poker``), board games (``tic_tac_toe``, ``connect_four``), matrix games
(``matrix_rps``, ``matrix_pd``), ... Any of them plays in lightmarl by name, with the game's
parameters from the recipe::

    env:
      env_fn: lightmarl.envs.openspiel.openspiel_env
      env_kwargs: {game: leduc_poker, parameters: {players: 2}, tensor: information_state}

* **turn-based games** (``Dynamics.SEQUENTIAL``) become PettingZoo AEC envs
  (`OpenSpielAECEnv`), so they step like every AEC env
  (`lightmarl.envs.pettingzoo.aec`): one turn per vector step, only the acting player's
  row valid, rewards reaching every player's row.
* **simultaneous-move games** (``Dynamics.SIMULTANEOUS``, e.g. ``matrix_rps``, ``goofspiel``)
  become PettingZoo parallel envs (`OpenSpielParallelEnv`): every player acts each step.
* **chance nodes** (cards dealt, dice) are played inside the env, drawn from OpenSpiel's
  ``chance_outcomes()`` with a NumPy generator seeded by ``reset(seed=...)``: the same seed and
  actions give the same episode, in process and in worker processes.
* **observations** are the game's ``information_state_tensor`` (``tensor:
  information_state``, the default: perfect recall, what exact exploitability assumes) or its
  ``observation_tensor`` (``tensor: observation``), float32, with a ``Discrete`` legal-action
  mask (PettingZoo's ``{"observation", "action_mask"}`` dict).
* **rewards**: each step every player gets the change of its ``returns()``, so a terminal
  payoff reaches every player, and games with intermediate rewards pay them as they come.
* **render**: ``render_mode="ansi"`` returns the state's text (``str(state)``), ``"rgb_array"``
  draws that text on an image (evaluation videos).

Agents are ``player_0 .. player_{n-1}`` (OpenSpiel's player ids). The module imports
``pyspiel`` only when a game is loaded (env worker processes load it), with an ``ImportError``
naming the extra when it is missing, and imports no torch.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv, ParallelEnv

HAS_OPENSPIEL = importlib.util.find_spec("pyspiel") is not None
INSTALL_HINT = "OpenSpiel games need the open_spiel package: pip install 'lightmarl[openspiel]'"

Tensor = Literal["information_state", "observation"]
TENSORS = ("information_state", "observation")


def load_game(game: str, parameters: Mapping[str, Any] | None = None) -> Any:
    """``pyspiel.load_game(game, parameters)``, with errors that name the field and the bad value.

    Args:
        game: a registered OpenSpiel game name (``pyspiel.registered_names()``).
        parameters: the game's parameters (``{players: 3}``); values bool, int, float or str.

    Raises:
        ImportError: where ``open_spiel`` is not installed.
        ValueError: an unknown game or parameter.
    """
    if not HAS_OPENSPIEL:
        raise ImportError(INSTALL_HINT)
    import pyspiel

    if not isinstance(game, str) or not game:
        raise ValueError(f"openspiel_env: game must be an OpenSpiel game name (e.g. 'kuhn_poker'), got {game!r}")
    names = pyspiel.registered_names()
    if game not in names:
        close = [n for n in names if game.split("_")[0] in n][:8]
        raise ValueError(
            f"openspiel_env: game {game!r} is not an OpenSpiel game" + (f"; similar: {close}" if close else "")
        )
    parameters = dict(parameters or {})
    for key, value in parameters.items():
        if not isinstance(key, str) or not isinstance(value, (bool, int, float, str)):
            raise ValueError(
                f"openspiel_env: parameters must map names to bool, int, float or str; got {key!r}: {value!r}"
            )
    try:
        return pyspiel.load_game(game, parameters)
    except pyspiel.SpielError as err:
        raise ValueError(f"openspiel_env: loading {game!r} with parameters {parameters!r} failed: {err}") from None


def agent_of(player: int) -> str:
    """The agent name of OpenSpiel player ``player``."""
    return f"player_{player}"


def check_tensor(game: Any, tensor: str) -> None:
    """Fail clearly where ``game`` does not provide the ``tensor`` observations asked for."""
    if tensor not in TENSORS:
        raise ValueError(f"openspiel_env: tensor must be one of {list(TENSORS)}, got {tensor!r}")
    kind = game.get_type()
    provides = (
        kind.provides_information_state_tensor if tensor == "information_state" else kind.provides_observation_tensor
    )
    if not provides:
        other = "observation" if tensor == "information_state" else "information_state"
        raise ValueError(f"openspiel_env: game {kind.short_name!r} has no {tensor} tensor; use tensor: {other}")


def observation_of(state: Any, player: int, tensor: str, size: int) -> np.ndarray:
    """Player ``player``'s view of ``state`` as the env shows it: the ``tensor`` of the game, float32.

    Terminal states of some games define no tensor; the env shows zeros there (no one acts on them).
    """
    try:
        values = (
            state.information_state_tensor(player)
            if tensor == "information_state"
            else state.observation_tensor(player)
        )
    except Exception:  # noqa: BLE001 - pyspiel raises SpielError (not importable here) on undefined tensors
        return np.zeros(size, dtype=np.float32)
    return np.asarray(values, dtype=np.float32)


def _legal_mask(state: Any, player: int, num_actions: int) -> np.ndarray:
    mask = np.zeros(num_actions, dtype=np.int8)
    if not state.is_terminal():
        mask[state.legal_actions(player)] = 1
    return mask


class _GameState:
    """What both env kinds share: the game, the seeded chance draws, observations, rewards, the text render."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "rgb_array"], "name": "openspiel"}

    def _setup(self, game: Any, tensor: str, render_mode: str | None) -> None:
        check_tensor(game, tensor)
        if render_mode not in (None, "ansi", "rgb_array"):
            raise ValueError(f"openspiel_env: render_mode must be None, 'ansi' or 'rgb_array', got {render_mode!r}")
        self.game = game
        self.tensor = tensor
        self.render_mode = render_mode
        self.num_actions = int(game.num_distinct_actions())
        shape = (
            game.information_state_tensor_shape() if tensor == "information_state" else game.observation_tensor_shape()
        )
        self.size = int(np.prod(shape))
        self.possible_agents = [agent_of(p) for p in range(game.num_players())]
        self._player = {a: p for p, a in enumerate(self.possible_agents)}
        self._observation_space = spaces.Dict(
            {
                "observation": spaces.Box(-np.inf, np.inf, (self.size,), dtype=np.float32),
                "action_mask": spaces.Box(0, 1, (self.num_actions,), dtype=np.int8),
            }
        )
        self._action_space = spaces.Discrete(self.num_actions)
        self.state: Any = None
        self._rng = np.random.default_rng()
        self._returns = np.zeros(len(self.possible_agents))

    def observation_space(self, agent: str) -> spaces.Dict:
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._action_space

    def _new_state(self, seed: int | None) -> None:
        self._rng = np.random.default_rng(seed)
        self.state = self.game.new_initial_state()
        self._returns = np.zeros(len(self.possible_agents))
        self._play_chance()

    def _play_chance(self) -> None:
        """Play chance nodes with the env's generator until a player acts or the game ends."""
        while self.state.is_chance_node():
            outcomes, probabilities = zip(*self.state.chance_outcomes())
            p = np.asarray(probabilities, dtype=np.float64)
            self.state.apply_action(int(outcomes[self._rng.choice(len(outcomes), p=p / p.sum())]))

    def _rewards(self) -> dict[str, float]:
        """Each player's change of ``returns()`` since the last call."""
        returns = np.asarray(self.state.returns(), dtype=np.float64)
        change, self._returns = returns - self._returns, returns
        return {a: float(change[p]) for a, p in self._player.items()}

    def observe(self, agent: str) -> dict[str, np.ndarray]:
        player = self._player[agent]
        return {
            "observation": observation_of(self.state, player, self.tensor, self.size),
            "action_mask": _legal_mask(self.state, player, self.num_actions),
        }

    def _check_action(self, agent: str, action: Any) -> int:
        legal = self.state.legal_actions(self._player[agent])
        if action is None or int(action) not in legal:
            raise ValueError(
                f"game {self.game.get_type().short_name!r}: action {action!r} of {agent!r} is not legal here "
                f"(legal: {list(legal)})"
            )
        return int(action)

    def render(self) -> Any:
        text = "" if self.state is None else str(self.state)
        if self.render_mode == "rgb_array":
            return text_frame(text)
        return text

    def close(self) -> None:
        self.state = None


def text_frame(text: str, width: int = 320, height: int = 240) -> np.ndarray:
    """``text`` drawn black on white, ``[height, width, 3]`` uint8 (a frame of an evaluation video)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (width, height), "white")
    ImageDraw.Draw(image).multiline_text((6, 6), text, fill="black")
    return np.asarray(image)


class OpenSpielAECEnv(_GameState, AECEnv):
    """A turn-based OpenSpiel game as a PettingZoo ``AECEnv``.

    The player to move is ``agent_selection``; after the last move every player is
    terminated and PettingZoo's dead steps (``step(None)``) remove them one by one.

    Args:
        game: a loaded turn-based ``pyspiel.Game``.
        tensor: ``information_state`` or ``observation``.
        render_mode: ``None``, ``"ansi"`` or ``"rgb_array"``.
    """

    def __init__(self, game: Any, tensor: Tensor = "information_state", render_mode: str | None = None) -> None:
        super().__init__()
        self._setup(game, tensor, render_mode)
        self.agents: list[str] = []
        self.rewards: dict[str, float] = {}
        self._cumulative_rewards: dict[str, float] = {}
        self.terminations: dict[str, bool] = {}
        self.truncations: dict[str, bool] = {}
        self.infos: dict[str, dict] = {}
        self.agent_selection = self.possible_agents[0]

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._new_state(seed)
        if self.state.is_terminal():
            raise RuntimeError(f"game {self.game.get_type().short_name!r} ended before any player moved")
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}
        self.agent_selection = agent_of(self.state.current_player())

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations.get(agent) or self.truncations.get(agent):
            # PettingZoo's dead step: the game is over; this agent leaves, the next done one is selected.
            self.agents.remove(agent)
            self.rewards = dict.fromkeys(self.agents, 0.0)
            if self.agents:
                self.agent_selection = self.agents[0]
            return
        self.state.apply_action(self._check_action(agent, action))
        self._play_chance()
        self.rewards = self._rewards()
        for a, r in self.rewards.items():
            self._cumulative_rewards[a] = self._cumulative_rewards.get(a, 0.0) + r
        if self.state.is_terminal():
            self.terminations = dict.fromkeys(self.agents, True)
            self.agent_selection = self.agents[0]
        else:
            player = self.state.current_player()
            if player < 0:
                raise RuntimeError(
                    f"game {self.game.get_type().short_name!r}: a turn-based game reached a node of player {player} "
                    "(neither a player nor chance)"
                )
            self.agent_selection = agent_of(player)


class OpenSpielParallelEnv(_GameState, ParallelEnv):
    """A simultaneous-move OpenSpiel game as a PettingZoo ``ParallelEnv``.

    Every player acts at every step (each with its legal-action mask); the game's chance nodes
    are played between steps. Games that mix in nodes where a single player moves are refused
    at that node with a clear error (play them as their turn-based conversion,
    ``turn_based_simultaneous_game``).

    Args:
        game: a loaded simultaneous-move ``pyspiel.Game``.
        tensor: ``information_state`` or ``observation``.
        render_mode: ``None``, ``"ansi"`` or ``"rgb_array"``.
    """

    def __init__(self, game: Any, tensor: Tensor = "information_state", render_mode: str | None = None) -> None:
        self._setup(game, tensor, render_mode)
        self.agents: list[str] = []

    def _check_simultaneous(self) -> None:
        if not self.state.is_terminal() and not self.state.is_simultaneous_node():
            raise RuntimeError(
                f"game {self.game.get_type().short_name!r} reached a node where only player "
                f"{self.state.current_player()} moves; lightmarl plays simultaneous-move games whose every "
                "decision node is simultaneous (load it as turn_based_simultaneous_game(game=...) instead)"
            )

    def _observations(self) -> dict[str, dict[str, np.ndarray]]:
        return {a: self.observe(a) for a in self.agents}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self._new_state(seed)
        self._check_simultaneous()
        self.agents = list(self.possible_agents)
        return self._observations(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ValueError(f"game {self.game.get_type().short_name!r}: no action for {missing}")
        self.state.apply_actions([self._check_action(a, actions[a]) for a in self.possible_agents])
        self._play_chance()
        rewards = self._rewards()
        over = self.state.is_terminal()
        if not over:
            self._check_simultaneous()
        agents = list(self.agents)
        observations = self._observations()
        terminations = dict.fromkeys(agents, over)
        truncations = dict.fromkeys(agents, False)
        if over:
            self.agents = []
        return observations, rewards, terminations, truncations, {a: {} for a in agents}


def openspiel_env(
    game: str,
    parameters: Mapping[str, Any] | None = None,
    tensor: Tensor = "information_state",
    render_mode: str | None = None,
) -> OpenSpielAECEnv | OpenSpielParallelEnv:
    """An OpenSpiel game by name as a PettingZoo env (AEC for turn-based games, parallel for simultaneous ones).

    Args:
        game: an OpenSpiel game name (``pyspiel.registered_names()``), e.g. ``kuhn_poker``.
        parameters: the game's parameters, e.g. ``{players: 3}`` (OpenSpiel's defaults otherwise).
        tensor: ``information_state`` (default) or ``observation``: which of the game's tensors
            the players observe.
        render_mode: ``None``, ``"ansi"`` (text) or ``"rgb_array"`` (the text drawn on an image).

    Raises:
        ImportError: where ``open_spiel`` is not installed (``pip install 'lightmarl[openspiel]'``).
        ValueError: an unknown game, bad parameters, a tensor the game does not provide, or a game
            that is neither turn-based nor simultaneous-move.

    Example:
        >>> env = openspiel_env("kuhn_poker")  # doctest: +SKIP
        >>> env.possible_agents, env.observation_space("player_0")["observation"].shape  # doctest: +SKIP
        (['player_0', 'player_1'], (11,))
    """
    loaded = load_game(game, parameters)
    import pyspiel

    dynamics = loaded.get_type().dynamics
    if dynamics == pyspiel.GameType.Dynamics.SEQUENTIAL:
        return OpenSpielAECEnv(loaded, tensor, render_mode)
    if dynamics == pyspiel.GameType.Dynamics.SIMULTANEOUS:
        return OpenSpielParallelEnv(loaded, tensor, render_mode)
    raise ValueError(f"openspiel_env: game {game!r} has dynamics {dynamics}; expected sequential or simultaneous")
