"""Turn-based (AEC) PettingZoo envs: one valid row per turn, reward credit, masks, seeding, resets, errors.

Real games (connect four, tictactoe, texas hold'em when rlcard is installed) and ``TurnEnv``
below, a small AEC env whose every row is known in advance: three players in turn, one of them
eliminated mid-game (a dead agent PettingZoo steps with ``None``), masks in ``infos``.
"""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import pytest
import torch
from gymnasium import spaces
from pettingzoo import AECEnv

from expectations import assert_finite_metrics
from lightmarl import keys
from lightmarl.algorithms import PPO, PlainStepper
from lightmarl.algorithms.gae import valid_row_gae
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig, check_same_trajectories
from lightmarl.envs.checks import random_actions
from lightmarl.envs.pettingzoo.aec import AECSlice
from lightmarl.errors import EnvContractError
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy, ScriptedPolicy, UniformRandomPolicy
from lightmarl.population import BindingTable, PolicyBinding
from lightmarl_examples.connect_four import ConnectFourHeuristicPolicy

HERE = __name__  # the import path of this module, for env_fn
CONNECT_FOUR = "pettingzoo.classic.connect_four_v3.env"
TICTACTOE = "pettingzoo.classic.tictactoe_v3.env"
HOLDEM = "pettingzoo.classic.texas_holdem_v4.env"
needs_rlcard = pytest.mark.skipif(
    importlib.util.find_spec("rlcard") is None, reason="texas hold'em needs rlcard: pip install 'lightmarl[classic]'"
)

pytestmark = pytest.mark.timeout(120)


class TurnEnv(AECEnv):
    """Three players act in turn (``player_0, 1, 2, 0, ...``); an action ``a`` pays the actor ``a``.

    At turn ``eliminate_at`` (while another player acts) ``player_0`` is eliminated: it is paid
    -10 and terminated, and PettingZoo's dead step removes it. The game is truncated for everyone
    once ``length`` turns were played. Observations are plain arrays; the action mask (action 2
    is illegal) is in ``infos``. With ``linger`` the eliminated player stays in ``agents`` (done, skipped)
    until the game ends, instead of being stepped out at once.
    """

    metadata = {"name": "turn_v0", "render_modes": []}

    def __init__(self, eliminate_at=2, length=6, raise_at=None, bad_selection=False, linger=False):
        super().__init__()
        self.possible_agents = ["player_0", "player_1", "player_2"]
        self.eliminate_at, self.length, self.raise_at = eliminate_at, length, raise_at
        self.bad_selection, self.linger = bad_selection, linger

    def observation_space(self, agent):
        return spaces.Box(0.0, 100.0, (2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(3)

    def observe(self, agent):
        return np.array([self.turn, self.possible_agents.index(agent)], np.float32)

    def reset(self, seed=None, options=None):
        self.agents = self.possible_agents[:]
        self.turn = 0
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {"action_mask": np.array([1, 1, 0], np.int8)} for a in self.agents}
        self.agent_selection = "nobody" if self.bad_selection else "player_0"

    def _next_live(self, after):
        names = self.possible_agents
        for k in range(1, len(names) + 1):
            candidate = names[(names.index(after) + k) % len(names)]
            if candidate in self.agents and not (self.terminations[candidate] or self.truncations[candidate]):
                return candidate
        return after

    def step(self, action):
        actor = self.agent_selection
        if self.terminations[actor] or self.truncations[actor]:
            self._was_dead_step(action)
            return
        if self.turn == self.raise_at:
            raise ValueError("the board is on fire")
        assert action in (0, 1), f"illegal action {action}"
        self._clear_rewards()
        self.turn += 1
        self.rewards[actor] = float(action)
        if self.turn == self.eliminate_at and "player_0" in self.agents:
            self.terminations["player_0"] = True
            self.rewards["player_0"] = -10.0
        if self.turn >= self.length:
            self.truncations = dict.fromkeys(self.agents, True)
        self.agent_selection = self._next_live(actor)
        self._accumulate_rewards()
        if not self.linger or self.turn >= self.length:
            self._deads_step_first()


def turn_config(num_envs: int = 2, **kwargs) -> PettingZooEnvConfig:
    return PettingZooEnvConfig(env_fn=f"{HERE}.TurnEnv", env_kwargs=kwargs, num_envs=num_envs)


class PlayOnes(ScriptedPolicy):
    """Always action 1 (paid 1 in ``TurnEnv``)."""

    def act(self, observation, action_mask=None, agent_id=None):
        return torch.ones(observation.shape[:-1], dtype=torch.int64)


class Columns(ScriptedPolicy):
    """Connect four: player_0 always plays column 0, player_1 column 1: player_0 wins on its 4th move."""

    def act(self, observation, action_mask=None, agent_id=None):
        return torch.where(agent_id == 0, 0, 1)


def population(config: PettingZooEnvConfig, policies: dict, agent_map=None) -> MultiAgentPolicy:
    spec = config.spec()
    group = next(iter(spec.groups.values()))
    bindings = [PolicyBinding(b, class_path="x.y", trainable=b == "main") for b in policies]
    table = BindingTable(bindings, spec, agent_map)
    return MultiAgentPolicy({b: make(group) for b, make in policies.items()}, table)


# -- rows: one valid per turn ---------------------------------------------------------------------


@pytest.mark.parametrize("env_fn", [CONNECT_FOUR, TICTACTOE, pytest.param(HOLDEM, marks=needs_rlcard)])
def test_exactly_the_acting_agents_row_is_valid_at_each_step(env_fn):
    config = PettingZooEnvConfig(env_fn=env_fn, num_envs=3)
    vec = config.make_vector(seed=0)
    assert isinstance(vec._block, AECSlice)
    group = vec.spec.groups["player"]
    assert group.has_action_mask
    generator = torch.Generator().manual_seed(0)
    current, ends = vec.reset(), 0
    for _ in range(60):
        rows = current["player"]
        assert torch.equal(rows["valid"].sum(-1), torch.ones(3, dtype=torch.int64))
        mask = rows["action_mask"]
        # The acting agent has the env's mask; the others an all-True one (sampled from, then ignored).
        assert mask[~rows["valid"]].all()
        assert (mask[rows["valid"]].sum(-1) >= 1).all()
        _, ended = vec.step(random_actions(vec.spec, current, generator))
        ends += int(ended.sum())
        current = vec.current
    assert ends > 0
    vec.close()


def test_connect_four_players_alternate_and_every_agent_observes_its_own_view():
    vec = PettingZooEnvConfig(env_fn=CONNECT_FOUR, num_envs=1).make_vector(seed=0)
    vec.reset()
    first = vec.current["player"]
    assert first["valid"].tolist() == [[True, False]]
    vec.step({"player": torch.tensor([[3, 0]])})  # player_0 drops in column 3
    rows = vec.current["player"]
    assert rows["valid"].tolist() == [[False, True]]
    # Both players see the piece, each from its own side: channel 0 = own pieces.
    assert rows["observation"][0, 0, 5, 3, 0] == 1 and rows["observation"][0, 1, 5, 3, 1] == 1
    vec.close()


# -- reward credit --------------------------------------------------------------------------------


def test_the_losers_reward_arrives_on_the_winners_turn_and_is_credited_to_the_losers_last_move():
    config = PettingZooEnvConfig(env_fn=CONNECT_FOUR, num_envs=2)
    policy = population(config, {"first": Columns, "second": Columns}, ["first", "second"])
    collector = RolloutCollector(config.make_vector(seed=0), policy, rollout_steps=7)
    data = collector.collect()
    rows, nxt = data["player"], data["next", "player"]
    turns = torch.tensor([[True, False], [False, True]]).repeat(4, 1)[:7]  # player_0 on even steps
    assert torch.equal(rows[keys.VALID][0], turns)
    reward = nxt[keys.REWARD].squeeze(-1)[0]
    # player_0 completes four on its 4th move (step 6): +1 for it, -1 for player_1, whose row is not valid.
    assert reward[6].tolist() == [1.0, -1.0] and not reward[:6].any()
    assert nxt[keys.TERMINATED].squeeze(-1)[0, 6].all() and not nxt[keys.DONE][0, :6].any()
    # Compaction (gamma = lambda = 1, zero values): each move's advantage is its player's final result.
    zeros = torch.zeros_like(nxt[keys.REWARD])
    advantage, _ = valid_row_gae(
        1.0, 1.0, zeros, zeros, nxt[keys.REWARD], nxt[keys.DONE], nxt[keys.TERMINATED], rows[keys.VALID]
    )
    advantage = advantage.squeeze(-1)[0]
    assert advantage[turns[:, 0], 0].tolist() == [1.0] * 4
    assert advantage[turns[:, 1], 1].tolist() == [-1.0] * 3  # player_1's last move (step 5) gets the -1
    assert not advantage[~turns].any()
    # The episode metrics count the loser's -1 too.
    assert collector.episode_summary()["second"]["episode_return"] == -1.0
    assert collector.episode_summary()["first"]["episode_return"] == 1.0


def test_a_dead_agent_is_stepped_inside_the_adapter_and_its_rows_stay_invalid():
    config = turn_config(num_envs=1, eliminate_at=2, length=6)
    spec = config.spec()
    assert spec.groups["player"].has_action_mask  # found in infos
    collector = RolloutCollector(config.make_vector(seed=0), population(config, {"main": PlayOnes}), 8)
    data = collector.collect()
    valid = data["player", keys.VALID][0]
    # Turns: p0, p1 (p0 eliminated, then removed by a dead step), p2, p1, p2, p1 (truncated), then a new game.
    actors = [0, 1, 2, 1, 2, 1, 0, 1]
    assert torch.equal(valid, torch.nn.functional.one_hot(torch.tensor(actors), 3).bool())
    nxt = data["next", "player"]
    reward = nxt[keys.REWARD].squeeze(-1)[0]
    assert reward[1].tolist() == [-10.0, 1.0, 0.0]  # player_0's penalty arrives on player_1's turn
    terminated, truncated = nxt[keys.TERMINATED].squeeze(-1)[0], nxt[keys.TRUNCATED].squeeze(-1)[0]
    # Each end once, in the step the env reports it (the second game eliminates player_0 at step 7 again).
    assert terminated[1].tolist() == [True, False, False] and terminated[:6].sum() == 1
    assert truncated[5].tolist() == [False, True, True] and truncated.sum() == 2
    zeros = torch.zeros_like(nxt[keys.REWARD])
    advantage, _ = valid_row_gae(
        1.0, 1.0, zeros, zeros, nxt[keys.REWARD], nxt[keys.DONE], nxt[keys.TERMINATED], data["player", "valid"]
    )
    advantage = advantage.squeeze(-1)[0]
    assert advantage[0, 0] == 1.0 - 10.0  # its own reward plus the penalty that ended its game
    assert advantage[[1, 3, 5], 1].tolist() == [3.0, 2.0, 1.0]
    assert advantage[[2, 4], 2].tolist() == [2.0, 1.0]
    summary = collector.episode_summary()["main"]
    assert summary["episodes"] == 1 and summary["episode_return"] == pytest.approx((-9.0 + 3.0 + 2.0) / 3)


def test_a_done_agent_that_lingers_in_the_game_is_reported_done_once():
    config = turn_config(num_envs=1, eliminate_at=2, length=6, linger=True)
    data = RolloutCollector(config.make_vector(seed=0), population(config, {"main": PlayOnes}), 6).collect()
    done = data["next", "player", keys.DONE].squeeze(-1)[0]
    assert done[:, 0].tolist() == [False, True, False, False, False, False]
    assert done[5].tolist() == [False, True, True]
    assert torch.equal(data["player", keys.VALID][0].nonzero()[:, 1], torch.tensor([0, 1, 2, 1, 2, 1]))


# -- masks ----------------------------------------------------------------------------------------


def connect_four_rollout(steps: int, seed: int = 0):
    config = PettingZooEnvConfig(env_fn=CONNECT_FOUR, num_envs=4)
    torch.manual_seed(seed)
    main = MLPActorCritic(config.spec().groups["player"], hidden_sizes=(32,), critic="local")
    policy = population(config, {"main": lambda g: main})
    return RolloutCollector(config.make_vector(seed=0), policy, steps).collect(), main, policy.table


def test_sampling_never_picks_an_illegal_column_and_the_ppo_loss_sees_only_legal_ones():
    data, main, table = connect_four_rollout(120)
    rows = data["player"]
    valid, mask, action = rows[keys.VALID], rows[keys.ACTION_MASK], rows[keys.ACTION]
    # Full columns happened (games of up to 42 moves): the stored mask is the env's.
    assert (~mask[valid]).any()
    assert mask.gather(-1, action.unsqueeze(-1)).squeeze(-1)[valid].all()
    # The illegal-move wrapper never fired: every finished game paid +1 / -1 or was a draw (0, 0).
    finals = data["next", "player", keys.REWARD].squeeze(-1)[data["next", "player", keys.DONE].squeeze(-1).all(-1)]
    assert ((finals.sum(-1) == 0) & (finals.abs().sum(-1) <= 2)).all()
    # The loss recomputes the distribution from the stored mask: no mass on illegal columns, the
    # stored log-probs are reproduced, and the entropy is at most log(number of legal columns).
    batch = data.reshape(-1)
    dist = main.actor.get_dist(batch.clone())
    probs, legal = (
        dist.probs[batch["player", keys.VALID]],
        batch["player", keys.ACTION_MASK][batch["player", keys.VALID]],
    )
    assert not probs[~legal].any()
    log_prob = dist.log_prob(batch["player", keys.ACTION])
    assert torch.allclose(log_prob, batch["player", keys.ACTION_LOG_PROB], atol=1e-5)
    entropy = dist.entropy()[batch["player", keys.VALID]]
    assert (entropy <= legal.sum(-1).float().log() + 1e-5).all()
    metrics = (
        PPO(epochs=1, minibatch_size=64)
        .make_unit_trainer("main", main, table)
        .update(data, torch.optim.Adam(main.parameters()), PlainStepper())
    )
    # Every move but the open ones: an agent's last move with no reply and no game end after it
    # waits for the next rollout (its transition has not closed).
    done = data["next", "player", keys.DONE].squeeze(-1)
    steps = torch.arange(valid.shape[1]).view(1, -1, 1)
    last_move = torch.where(valid, steps, -1).amax(1)  # [envs, agents]
    closed_after = (done & (steps >= last_move.unsqueeze(1))).any(1)
    open_moves = int(((last_move >= 0) & ~closed_after).sum())
    assert open_moves > 0
    assert metrics["rows"] == float(valid.sum()) - open_moves
    assert_finite_metrics(metrics)


def test_uniform_random_policy_reports_the_log_prob_of_its_masked_choice():
    group = PettingZooEnvConfig(env_fn=CONNECT_FOUR).spec().groups["player"]
    policy = UniformRandomPolicy(group, seed=0)
    mask = torch.tensor([[True, False, True, False, False, False, False], [True] * 7, [False] * 7])
    from tensordict import TensorDict

    td = TensorDict({"player": TensorDict({"observation": torch.zeros(3, 6, 7, 2), "action_mask": mask}, [3])}, [])
    out = policy(td)
    assert mask[0, out["player", "action"][0]]
    expected = -torch.tensor([2.0, 7.0, 7.0]).log()  # an empty mask (absent agent) samples over every choice
    assert torch.allclose(out["player", "action_log_prob"], expected)


def test_the_connect_four_heuristic_wins_blocks_and_beats_random_play():
    group = PettingZooEnvConfig(env_fn=CONNECT_FOUR).spec().groups["player"]
    heuristic = ConnectFourHeuristicPolicy(group, seed=0)
    board = torch.zeros(2, 6, 7, 2)
    board[0, 5, 0:3, 0] = 1  # own three in the bottom row: win in column 3
    board[0, 5, 4:6, 1] = 1
    board[1, 3:6, 2, 1] = 1  # the opponent's three in column 2: block there
    board[1, 5, 0, 0] = 1
    assert heuristic.act(board).tolist() == [3, 2]
    with pytest.raises(ValueError, match="connect_four_v3"):
        ConnectFourHeuristicPolicy(PettingZooEnvConfig(env_fn=TICTACTOE).spec().groups["player"])


# -- seeds, resets, workers -----------------------------------------------------------------------


@needs_rlcard
def test_seeds_reproduce_trajectories_and_other_seeds_deal_other_cards():
    config = PettingZooEnvConfig(env_fn=HOLDEM, num_envs=3)
    check_same_trajectories(config.make_vector(seed=5), config.make_vector(seed=5), num_steps=40)
    a, b = config.make_vector(seed=5), config.make_vector(seed=6)
    assert not torch.equal(a.reset()["player"]["observation"], b.reset()["player"]["observation"])
    a.close()
    b.close()


def test_connect_four_vectors_with_the_same_seed_play_the_same_games():
    config = PettingZooEnvConfig(env_fn=CONNECT_FOUR, num_envs=2)
    check_same_trajectories(config.make_vector(seed=0), config.make_vector(seed=0), num_steps=60)


def test_a_finished_game_is_reported_then_reset():
    vec = PettingZooEnvConfig(env_fn=CONNECT_FOUR, num_envs=2).make_vector(seed=0)
    vec.reset()
    for step in range(7):  # copy 0: player_0 wins in column 0; copy 1: both play column 6, no win
        column = torch.tensor([[0, 1], [6, 6]]) if step < 6 else torch.tensor([[0, 1], [5, 5]])
        nxt, ended = vec.step({"player": column})
    assert ended.tolist() == [True, False]
    final = nxt["player"]["observation"][0]
    assert final[0, :, 0, 0].sum() == 4 and final[1, :, 0, 1].sum() == 4  # the winning board, from both sides
    fresh = vec.current["player"]
    assert not fresh["observation"][0].any() and fresh["valid"][0].tolist() == [True, False]
    assert fresh["action_mask"][0, 0].all()
    assert fresh["observation"][1, 0].sum() == 7  # copy 1 goes on
    vec.close()


def test_worker_processes_step_aec_envs_like_the_in_process_vector():
    config = PettingZooEnvConfig(env_fn=CONNECT_FOUR, num_envs=3)
    with_workers = PettingZooEnvConfig(env_fn=CONNECT_FOUR, num_envs=3, num_workers=2)
    check_same_trajectories(config.make_vector(seed=0), with_workers.make_vector(seed=0), num_steps=50)


# -- bad envs -------------------------------------------------------------------------------------


def test_an_aec_env_that_raises_in_step_names_env_copy_and_seed():
    config = turn_config(num_envs=2, raise_at=1)
    vec = config.make_vector(seed=10)
    vec.reset()
    vec.step({"player": torch.ones(2, 3, dtype=torch.int64)})
    expected = f"env {config.name!r} (copy 0, seed 10) raised in step() of agent 'player_1' (action 1): ValueError"
    with pytest.raises(RuntimeError, match=re.escape(expected)):
        vec.step({"player": torch.ones(2, 3, dtype=torch.int64)})
    vec.close()


def test_an_aec_env_that_raises_in_a_worker_names_env_copy_and_seed():
    # The raw game (no illegal-move wrapper) asserts on a move into a full column.
    config = PettingZooEnvConfig(
        env_fn="pettingzoo.classic.connect_four.connect_four.raw_env", num_envs=2, num_workers=2
    )
    vec = config.make_vector(seed=3)
    try:
        vec.reset()
        column_zero = {"player": torch.zeros(2, 2, dtype=torch.int64)}
        for _ in range(6):
            vec.step(column_zero)
        expected = "env 'connect_four' (copy 0, seed 3) raised in step() of agent 'player_0' (action 0): AssertionError"
        with pytest.raises(RuntimeError, match=re.escape(expected)):
            vec.step(column_zero)
    finally:
        vec.close()


def test_an_aec_env_that_raises_on_its_first_turn_fails_its_api_check():
    config = turn_config(raise_at=0)
    with pytest.raises(EnvContractError, match=f"env {config.name!r}.*raised ValueError: the board is on fire"):
        config.spec()


def test_an_aec_env_that_breaks_the_api_fails_before_training_naming_the_env():
    config = turn_config(bad_selection=True)
    expected = f"env {config.name!r} (API check with seed 0): agent_selection after reset() is 'nobody'"
    with pytest.raises(EnvContractError, match=re.escape(expected)):
        config.spec()
