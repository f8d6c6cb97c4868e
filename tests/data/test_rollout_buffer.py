from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import pytest
import torch
from tensordict import TensorDict

from lightmarl import keys
from lightmarl.data.kept_rollouts import KeptRollouts
from lightmarl.data.rollout_buffer import MultiAgentRolloutBuffer, RolloutBufferFullError

OBS_DIM = 5
HIDDEN = 4


# --------------------------------------------------------------------- single-env API


def _seed_step(buffer: MultiAgentRolloutBuffer, t: int, rewards: list[float], dones: list[bool], valid=None) -> None:
    n = buffer.n_agents
    buffer.add_transition(
        states=torch.full((n, 3), float(t)),
        actions=torch.arange(n) + 10 * t,
        log_probs=torch.full((n,), -0.5 * t),
        rewards=rewards,
        next_states=torch.full((n, 3), float(t + 1)),
        dones=dones,
        state_values=torch.full((n, 1), 0.1 * t),
        next_state_values=torch.full((n, 1), 0.1 * (t + 1)),
        extras={"prev_hidden_states": torch.full((n, 2), 100.0 + t), "prev_cell_states": torch.full((n, 2), -t - 1.0)},
        valid=valid,
    )


def test_seed_api_end_to_end() -> None:
    buffer = MultiAgentRolloutBuffer(n_agents=2, capacity=4)
    rewards = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    for t, r in enumerate(rewards):
        _seed_step(buffer, t, r, [t == 2, t == 2])

    current = buffer.current_episode
    assert current["episode_length"] == [3, 3]
    assert current["episode_reward"] == [9.0, 12.0]
    for a in range(2):
        assert torch.equal(current["states"][a], torch.tensor([[0.0] * 3, [1.0] * 3, [2.0] * 3]))
        assert torch.equal(current["actions"][a], torch.tensor([a, a + 10, a + 20]))
        assert torch.equal(current["rewards"][a], torch.tensor([r[a] for r in rewards]))
        assert torch.equal(current["dones"][a], torch.tensor([False, False, True]))
        assert torch.equal(current["extras"]["prev_hidden_states"][a][:, 0], torch.tensor([100.0, 101.0, 102.0]))

    summary = buffer.end_episode()
    assert summary["episode_length"] == [3, 3]
    assert summary["episode_reward"] == [9.0, 12.0]
    assert summary["average_episode_length"] == 3.0
    assert summary["average_episode_reward"] == 10.5
    assert buffer.current_episode["episode_length"] == [0, 0]
    assert len(buffer) == 6

    # Second episode: agent 1 absent at the last step.
    _seed_step(buffer, 0, [1.0, 1.0], [False, False])
    _seed_step(buffer, 1, [2.0, 7.0], [False, True])
    _seed_step(buffer, 2, [4.0, 99.0], [True, False], valid=[True, False])
    assert buffer.current_episode["episode_length"] == [3, 2]
    summary = buffer.end_episode()
    assert summary["episode_reward"] == [7.0, 8.0]
    assert summary["average_episode_length"] == 2.5
    assert summary["average_episode_reward"] == 7.5

    episodes = buffer.episodes
    assert [e["episode_reward"] for e in episodes] == [[9.0, 12.0], [7.0, 8.0]]
    assert episodes[0]["episode_id"] != episodes[1]["episode_id"]
    assert torch.equal(episodes[1]["rewards"][1], torch.tensor([1.0, 7.0]))
    assert torch.equal(episodes[1]["next_state_values"][0][:, 0], torch.tensor([0.1, 0.2, 0.3]))
    assert torch.equal(episodes[0]["extras"]["prev_cell_states"][1][:, 0], torch.tensor([-1.0, -2.0, -3.0]))
    assert buffer.average_episode_length == pytest.approx((3.0 + 2.5) / 2)
    assert buffer.average_episode_reward == pytest.approx((10.5 + 7.5) / 2)

    # reset_current_episode drops the episode in progress only.
    _seed_step(buffer, 0, [50.0, 50.0], [False, False])
    buffer.reset_current_episode()
    assert buffer.current_episode["episode_length"] == [0, 0]
    assert len(buffer.episodes) == 2 and len(buffer) == 11

    buffer.reset(3)
    assert buffer.n_agents == 3 and len(buffer) == 0 and buffer.episodes == []
    assert math.isnan(buffer.average_episode_reward)
    with pytest.raises(ValueError, match="no transitions"):
        buffer.end_episode()
    # Averages run over the agents that acted in the episode.
    _seed_step(buffer, 0, [2.0, 4.0, 100.0], [True, True, False], valid=[True, True, False])
    summary = buffer.end_episode()
    assert summary["episode_length"] == [1, 1, 0]
    assert summary["average_episode_reward"] == 3.0 and summary["average_episode_length"] == 1.0


def test_seed_api_grows_past_initial_episode_capacity() -> None:
    buffer = MultiAgentRolloutBuffer(n_agents=2, capacity=2)
    steps = 150  # beyond the 64 preallocated steps of the current episode
    for t in range(steps):
        _seed_step(buffer, t, [1.0, 2.0], [t == steps - 1] * 2)
    assert buffer.current_episode["episode_length"] == [steps, steps]
    summary = buffer.end_episode()
    assert summary["episode_reward"] == [float(steps), 2.0 * steps]
    assert torch.equal(buffer.trajectory(summary["episode_id"], 1)[keys.TIME_INDEX], torch.arange(steps))


# ------------------------------------------------------------------ random scenario


@dataclass
class Reference:
    """Everything the test itself knows about what it fed the buffer."""

    rows: dict[tuple[int, int], list[dict]] = field(default_factory=lambda: defaultdict(list))
    completed: dict[int, dict] = field(default_factory=dict)  # episode -> per-column returns/lengths/bindings
    open_episodes: set[int] = field(default_factory=set)


def _simulate(
    buffer: MultiAgentRolloutBuffer,
    *,
    num_envs: int,
    steps: int,
    seed: int,
    agent_ids: list[int],
    n_bindings: int = 2,
) -> Reference:
    """Random envs: variable episode lengths, agents joining late and leaving early, idle envs."""
    g = torch.Generator().manual_seed(seed)
    A = len(agent_ids)
    ref = Reference()
    id_pool = (torch.randperm(10_000, generator=g) + 1_000).tolist()
    plans: list[dict | None] = [None] * num_envs

    def randint(lo: int, hi: int) -> int:
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    for _ in range(steps):
        obs = torch.randn(num_envs, A, OBS_DIM, generator=g)
        hidden = torch.randn(num_envs, A, HIDDEN, generator=g)
        reward = torch.randn(num_envs, A, 1, generator=g)
        action = torch.randint(0, 7, (num_envs, A), generator=g)
        episode_id = torch.zeros(num_envs, A, dtype=torch.long)
        valid = torch.zeros(num_envs, A, dtype=torch.bool)
        done = torch.zeros(num_envs, A, 1, dtype=torch.bool)
        binding = torch.zeros(num_envs, A, dtype=torch.long)
        for e in range(num_envs):
            if plans[e] is None:
                if torch.rand(1, generator=g).item() < 0.25:
                    continue  # idle env: every row invalid
                T = randint(1, 12)
                anchor = randint(0, A - 1)
                join = [0 if a == anchor else randint(0, T - 1) for a in range(A)]
                leave = [T - 1 if a == anchor else randint(join[a], T - 1) for a in range(A)]
                plans[e] = {
                    "id": id_pool.pop(),
                    "T": T,
                    "t": 0,
                    "join": join,
                    "leave": leave,
                    "binding": [randint(0, n_bindings - 1) for _ in range(A)],
                }
                ref.open_episodes.add(plans[e]["id"])
            p = plans[e]
            t = p["t"]
            episode_id[e] = p["id"]
            binding[e] = torch.tensor(p["binding"])
            for a in range(A):
                if p["join"][a] <= t <= p["leave"][a]:
                    valid[e, a] = True
                    done[e, a, 0] = t == p["leave"][a]
                    ref.rows[(p["id"], agent_ids[a])].append(
                        {
                            "time": t,
                            "env_index": e,
                            "binding": p["binding"][a],
                            "observation": obs[e, a],
                            "hidden": hidden[e, a],
                            "reward": reward[e, a],
                            "action": action[e, a],
                            "done": bool(done[e, a, 0]),
                        }
                    )
            p["t"] += 1
            if p["t"] == p["T"]:
                ref.open_episodes.discard(p["id"])
                ref.completed[p["id"]] = {
                    "env_index": e,
                    "binding": p["binding"],
                    "lengths": [p["leave"][a] - p["join"][a] + 1 for a in range(A)],
                    "returns": [
                        sum(r["reward"].double().item() for r in ref.rows.get((p["id"], agent_ids[a]), []))
                        for a in range(A)
                    ],
                }
                plans[e] = None
        step = TensorDict(
            {
                "observation": obs,
                "action": action,
                "action_log_prob": -action.float(),
                "reward": reward,
                "done": done,
                ("next", "observation"): obs + 1,
                ("extras", "hidden"): hidden,
                "env_index": torch.arange(num_envs).unsqueeze(1).expand(num_envs, A),
                "agent_id": torch.tensor(agent_ids).expand(num_envs, A),
                "episode_id": episode_id,
                "binding_id": binding,
                "loss_profile_id": binding * 10 + 1,
                "is_trainable_agent": binding == 0,
                "valid": valid,
            },
            batch_size=[num_envs, A],
        )
        buffer.add_batch(step)
    return ref


@pytest.fixture(scope="module")
def scenario() -> tuple[MultiAgentRolloutBuffer, Reference, list[int]]:
    agent_ids = [2, 5, 7]  # not 0..A-1: the buffer must map ids to columns
    buffer = MultiAgentRolloutBuffer(n_agents=len(agent_ids), capacity=64)
    ref = _simulate(buffer, num_envs=6, steps=120, seed=0, agent_ids=agent_ids)
    return buffer, ref, agent_ids


def test_every_trajectory_reconstructed_exactly(scenario) -> None:
    buffer, ref, agent_ids = scenario
    assert len(ref.completed) > 30 and ref.open_episodes  # the scenario exercises what it claims
    assert any(r[0]["time"] > 0 for r in ref.rows.values())  # late joiners
    assert len(buffer) == sum(len(r) for r in ref.rows.values())
    assert buffer.capacity >= len(buffer) and buffer.capacity > 64  # grew by doubling
    for (episode, agent), expected in ref.rows.items():
        traj = buffer.trajectory(episode, agent)
        assert traj.batch_size == torch.Size([len(expected)])
        assert traj[keys.TIME_INDEX].tolist() == [r["time"] for r in expected]
        assert torch.equal(traj["observation"], torch.stack([r["observation"] for r in expected]))
        assert torch.equal(traj["next", "observation"], torch.stack([r["observation"] for r in expected]) + 1)
        assert torch.equal(traj["extras", "hidden"], torch.stack([r["hidden"] for r in expected]))
        assert torch.equal(traj["reward"], torch.stack([r["reward"] for r in expected]))
        assert torch.equal(traj["action"], torch.stack([r["action"] for r in expected]))
        assert traj["done"][:, 0].tolist() == [r["done"] for r in expected]
        assert traj["episode_id"].unique().tolist() == [episode]
        assert traj["agent_id"].unique().tolist() == [agent]
        assert traj["env_index"].tolist() == [r["env_index"] for r in expected]
        b = expected[0]["binding"]
        assert traj["binding_id"].unique().tolist() == [b]
        assert traj["loss_profile_id"].unique().tolist() == [b * 10 + 1]
        assert traj["is_trainable_agent"].unique().tolist() == [b == 0]
    with pytest.raises(KeyError):
        buffer.trajectory(-5, agent_ids[0])


def test_completed_episode_statistics(scenario) -> None:
    buffer, ref, agent_ids = scenario
    table = buffer.completed_episodes()
    assert sorted(table["episode_id"].tolist()) == sorted(ref.completed)
    for i, episode in enumerate(table["episode_id"].tolist()):
        expected = ref.completed[episode]
        assert table["env_index"][i].item() == expected["env_index"]
        assert table["episode_length"][i].tolist() == expected["lengths"]
        assert table["episode_return"][i].tolist() == pytest.approx(expected["returns"], rel=1e-12, abs=1e-12)
        assert table["present"][i].all()
        assert table["binding_id"][i].tolist() == expected["binding"]

    # Independent per-binding summary: one sample per (episode, binding).
    samples: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for expected in ref.completed.values():
        for b in set(expected["binding"]):
            cols = [a for a in range(len(agent_ids)) if expected["binding"][a] == b]
            samples[b].append(
                (sum(expected["returns"][a] for a in cols) / len(cols), max(expected["lengths"][a] for a in cols))
            )
    stats = buffer.episode_stats()
    assert set(stats) == set(samples)
    for b, values in samples.items():
        assert stats[b]["episodes"] == len(values)
        assert stats[b]["episode_return"] == pytest.approx(sum(v[0] for v in values) / len(values), rel=1e-9)
        assert stats[b]["episode_length"] == pytest.approx(sum(v[1] for v in values) / len(values), rel=1e-12)
    named = buffer.episode_stats(binding_names=["main", "rival"])
    assert named["rival"] == stats[1]


def test_as_tensordict_masks_variable_lengths(scenario) -> None:
    buffer, ref, agent_ids = scenario
    padded = buffer.as_tensordict()
    episodes = sorted({e for e, _ in ref.rows})
    E, T, A = padded.batch_size
    assert (E, A) == (len(episodes), len(agent_ids))
    assert T == max(r[-1]["time"] for r in ref.rows.values()) + 1
    expected_mask = torch.zeros(E, T, A, dtype=torch.bool)
    for (episode, agent), rows in ref.rows.items():
        e, a = episodes.index(episode), agent_ids.index(agent)
        for r in rows:
            expected_mask[e, r["time"], a] = True
            assert torch.equal(padded["observation"][e, r["time"], a], r["observation"])
    assert torch.equal(padded[keys.MASK], expected_mask)
    assert not expected_mask.all()  # variable lengths really produced padding
    assert (padded["observation"][~expected_mask] == 0).all()
    assert torch.equal(padded["episode_id"][:, 0, 0], torch.tensor(episodes))
    assert torch.equal(padded["agent_id"][0, 0], torch.tensor(agent_ids))

    complete = buffer.as_tensordict(complete_only=True)
    assert sorted(complete["episode_id"][:, 0, 0].tolist()) == sorted(ref.completed)
    rows = buffer.rows()
    assert rows.batch_size == torch.Size([len(buffer)])
    assert buffer.rows(complete_only=True).batch_size[0] == sum(
        len(r) for (e, _), r in ref.rows.items() if e in ref.completed
    )


def test_sequences_chunks_and_extras_at_chunk_start(scenario) -> None:
    buffer, ref, _ = scenario
    length, burn_in = 4, 2
    chunks = buffer.sequences(length, burn_in=burn_in)
    assert chunks.batch_size[1] == length + burn_in
    assert chunks[keys.MASK][:, 0].all()  # position 0 always holds a stored row
    trained: dict[tuple[int, int], list[int]] = defaultdict(list)
    for c in range(chunks.batch_size[0]):
        mask = chunks[keys.MASK][c]
        key = (int(chunks["episode_id"][c, 0]), int(chunks["agent_id"][c, 0]))
        expected = ref.rows[key]
        times = chunks[keys.TIME_INDEX][c][mask].tolist()
        start = [r["time"] for r in expected].index(times[0])
        window = expected[start : start + len(times)]
        assert times == [r["time"] for r in window]  # consecutive steps of one trajectory
        # The stored recurrent state at the chunk's first step, to start the policy from.
        assert torch.equal(chunks["extras", "hidden"][c, 0], expected[start]["hidden"])
        assert torch.equal(chunks["extras", "hidden"][c][mask], torch.stack([r["hidden"] for r in window]))
        assert (chunks["observation"][c][~mask] == 0).all()
        assert chunks[keys.IS_INIT][c, 0].item() == (start == 0)
        loss = chunks[keys.LOSS_MASK][c]
        assert loss.sum() <= length and not (loss & ~mask).any()
        assert loss[:burn_in].sum() == 0 or start == 0
        trained[key] += chunks[keys.TIME_INDEX][c][loss].tolist()
    # Outside the burn-in every stored step is trained on exactly once.
    assert {k: sorted(v) for k, v in trained.items()} == {k: [r["time"] for r in v] for k, v in ref.rows.items()}

    whole = buffer.sequences(None)
    assert whole.batch_size == torch.Size([len(ref.rows), max(len(r) for r in ref.rows.values())])
    assert whole[keys.MASK].sum(1).tolist() == [
        len(ref.rows[(int(e), int(a))]) for e, a in zip(whole["episode_id"][:, 0], whole["agent_id"][:, 0])
    ]
    assert torch.equal(whole[keys.LOSS_MASK], whole[keys.MASK])


def test_per_binding_selection(scenario) -> None:
    buffer, ref, _ = scenario
    for b in (0, 1):
        rows = buffer.rows(binding_id=b)
        expected = sum(len(r) for r in ref.rows.values() if r[0]["binding"] == b)
        assert rows.batch_size[0] == expected > 0
        assert (rows["binding_id"] == b).all()
        padded = buffer.as_tensordict(binding_id=b)
        assert padded[keys.MASK].sum() == expected
        assert (padded["binding_id"][padded[keys.MASK]] == b).all()
        chunks = buffer.sequences(8, binding_id=b)
        assert chunks[keys.MASK].sum() == expected
        assert (chunks["binding_id"][chunks[keys.MASK]] == b).all()
        assert (chunks["is_trainable_agent"][chunks[keys.MASK]] == (b == 0)).all()


def test_add_rollout_matches_step_by_step() -> None:
    g = torch.Generator().manual_seed(3)
    E, T, A = 3, 7, 2
    rollout = TensorDict(
        {
            "observation": torch.randn(E, T, A, OBS_DIM, generator=g),
            "reward": torch.randn(E, T, A, 1, generator=g),
            "done": torch.zeros(E, T, A, 1, dtype=torch.bool),
            "episode_id": torch.arange(E).view(E, 1, 1).expand(E, T, A),
            "valid": torch.rand(E, T, A, generator=g) > 0.3,
        },
        batch_size=[E, T, A],
    )
    rollout["valid"][:, :, 0] = True
    rollout["done"][:, 4] = True  # every env ends an episode at step 4; ids change after it
    rollout["episode_id"] = torch.where(
        torch.arange(T).view(1, T, 1) > 4, rollout["episode_id"] + E, rollout["episode_id"]
    )
    a, b = MultiAgentRolloutBuffer(A), MultiAgentRolloutBuffer(A)
    a.add_rollout(rollout)  # kept by reference
    for t in range(T):
        b.add_batch(rollout[:, t])  # copied step by step
    assert a.rollouts[0] is rollout
    assert len(a) == len(b) == int(rollout["valid"].sum())
    # Same rows (in (episode, time, agent) order), same time indices, same episode table.
    assert (a.as_tensordict() == b.as_tensordict()).all()
    assert a.rows()["env_index"].sort().values.tolist() == b.rows()["env_index"].sort().values.tolist()
    assert (a.completed_episodes() == b.completed_episodes()).all()
    stored = b.rows()
    pairs = set(zip(stored["episode_id"].tolist(), stored["agent_id"].tolist(), strict=True))
    assert len(pairs) > E * A  # the second episodes are there too
    for episode, agent in pairs:
        assert (a.trajectory(episode, agent) == b.trajectory(episode, agent)).all()
    # The one entry the buffer adds to the kept rows: each row's step within its episode.
    assert rollout["time_index"][0, :, 0].tolist() == [0, 1, 2, 3, 4, 0, 1]


def test_a_kept_rollout_is_located_row_by_row_and_never_mixed_with_copied_rows() -> None:
    E, T, A = 2, 4, 3
    rows = TensorDict(
        {
            "observation": torch.randn(E, T, A, OBS_DIM),
            "episode_id": torch.arange(E).view(E, 1, 1).expand(E, T, A),
            ("next", "reward"): torch.randn(E, T, A, 1),
            ("next", "done"): torch.zeros(E, T, A, 1, dtype=torch.bool),
        },
        batch_size=[E, T, A],
    )
    experience = TensorDict({"team": rows.exclude("next"), "next": TensorDict({"team": rows["next"]}, [E, T])}, [E, T])
    buffer = MultiAgentRolloutBuffer(A)
    buffer.add_rollout(experience, group="team")
    assert buffer.rollouts[0] is experience
    for e in range(E):
        for t in range(T):
            for agent in range(A):
                r, env, step, column = buffer.locate(e, agent, t)
                assert (r, env, step, column) == (0, e, t, agent)
    with pytest.raises(KeyError, match="no kept row"):
        buffer.locate(0, 0, T)
    with pytest.raises(ValueError, match="keeps rollouts by reference"):
        buffer.add_batch(rows[:, 0])
    copied = MultiAgentRolloutBuffer(A)
    copied.add_batch(rows[:, 0])
    with pytest.raises(ValueError, match="holds copied rows"):
        copied.add_rollout(experience, group="team")


def test_kept_rollouts_are_bounded_by_max_rows() -> None:
    E, T, A = 2, 5, 1
    buffer = MultiAgentRolloutBuffer(A, capacity=8, max_rows=20, overwrite=True)
    strict = MultiAgentRolloutBuffer(A, capacity=8, max_rows=20)

    def rollout(first_episode: int) -> TensorDict:
        done = torch.zeros(E, T, A, 1, dtype=torch.bool)
        done[:, -1] = True
        return TensorDict(
            {
                "episode_id": (first_episode + torch.arange(E)).view(E, 1, 1).expand(E, T, A),
                "reward": torch.ones(E, T, A, 1),
                "done": done,
            },
            [E, T, A],
        )

    for i in range(3):
        buffer.add_rollout(rollout(2 * i))
    assert len(buffer.rollouts) == 2 and len(buffer) == 20  # the first one was dropped
    assert sorted(buffer.completed_episodes()["episode_id"].tolist()) == [2, 3, 4, 5]
    strict.add_rollout(rollout(0))
    strict.add_rollout(rollout(2))
    with pytest.raises(RolloutBufferFullError, match="max_rows=20"):
        strict.add_rollout(rollout(4))
    assert len(strict.rollouts) == 2


# ----------------------------------------------------------------- memory bound


def _fixed_step(E: int, A: int, episode: torch.Tensor, done: bool) -> TensorDict:
    return TensorDict(
        {
            "observation": torch.ones(E, A, 3),
            "reward": torch.ones(E, A),
            "done": torch.full((E, A), done),
            "episode_id": episode.view(E, 1).expand(E, A),
        },
        batch_size=[E, A],
    )


def test_memory_bound_raises_clear_error() -> None:
    buffer = MultiAgentRolloutBuffer(n_agents=2, capacity=4, max_rows=20)
    for t in range(5):
        buffer.add_batch(_fixed_step(2, 2, torch.tensor([0, 1]), done=False))
        assert buffer.capacity == [4, 8, 16, 16, 20][t]  # doubling, capped at max_rows
    assert len(buffer) == 20 and buffer.capacity == 20  # 4 -> 8 -> 16 -> capped at 20
    with pytest.raises(RolloutBufferFullError, match="max_rows=20"):
        buffer.add_batch(_fixed_step(2, 2, torch.tensor([0, 1]), done=True))
    assert len(buffer) == 20


def test_overwrite_drops_oldest_completed_episodes() -> None:
    buffer = MultiAgentRolloutBuffer(n_agents=2, capacity=8, max_rows=32, overwrite=True)
    next_id = 0
    for _ in range(6):  # 6 episodes of 3 steps x 2 envs x 2 agents = 12 rows each
        ids = torch.tensor([next_id, next_id + 1])
        next_id += 2
        for t in range(3):
            buffer.add_batch(_fixed_step(2, 2, ids, done=t == 2))
    assert len(buffer) <= 32 and buffer.capacity == 32
    held = set(buffer.rows()["episode_id"].tolist())
    # Whole episodes are dropped oldest first: what is left is the newest ones, each complete.
    assert held == set(range(min(held), 12)) and min(held) <= 8
    assert len(buffer) == 6 * len(held)
    assert sorted(buffer.completed_episodes()["episode_id"].tolist()) == sorted(held)
    for e in held:
        assert buffer.trajectory(e, 1)[keys.TIME_INDEX].tolist() == [0, 1, 2]

    # Episodes in progress are never dropped: when they alone exceed the bound, it raises.
    small = MultiAgentRolloutBuffer(n_agents=2, capacity=4, max_rows=8, overwrite=True)
    small.add_batch(_fixed_step(2, 2, torch.tensor([0, 1]), done=False))
    small.add_batch(_fixed_step(2, 2, torch.tensor([0, 1]), done=False))
    with pytest.raises(RolloutBufferFullError, match="in progress"):
        small.add_batch(_fixed_step(2, 2, torch.tensor([0, 1]), done=False))


# ------------------------------------------------------------------- validation


def test_clear_keeps_episodes_in_progress() -> None:
    buffer = MultiAgentRolloutBuffer(n_agents=1)
    buffer.add_batch(_fixed_step(1, 1, torch.tensor([4]), done=False))
    buffer.add_batch(_fixed_step(1, 1, torch.tensor([4]), done=False))
    buffer.clear()
    buffer.add_batch(_fixed_step(1, 1, torch.tensor([4]), done=True))
    assert buffer.trajectory(4, 0)[keys.TIME_INDEX].tolist() == [2]  # the env step counter continued
    assert buffer.completed_episodes()["episode_return"].tolist() == [[3.0]]
    assert buffer.as_tensordict()[keys.MASK].shape == (1, 1, 1)  # time starts at the first stored step


def test_validation_errors_name_the_problem() -> None:
    buffer = MultiAgentRolloutBuffer(n_agents=2)
    with pytest.raises(ValueError, match="n_agents=2"):
        buffer.add_batch(_fixed_step(2, 3, torch.tensor([0, 1]), done=False))
    step = _fixed_step(2, 2, torch.tensor([0, 1]), done=False)
    with pytest.raises(ValueError, match="episode_id"):
        buffer.add_batch(step.exclude("episode_id"))
    with pytest.raises(ValueError, match="'done'"):
        buffer.add_batch(step.exclude("done"))
    buffer.add_batch(step)
    with pytest.raises(ValueError, match=r"unexpected.*extra"):
        buffer.add_batch(step.clone().set("extra", torch.zeros(2, 2)))
    buffer.add_batch(_fixed_step(2, 2, torch.tensor([0, 1]), done=True))
    with pytest.raises(ValueError, match="episode_id 0 again"):
        buffer.add_batch(_fixed_step(2, 2, torch.tensor([0, 7]), done=False))
    with pytest.raises(ValueError, match="capacity"):
        MultiAgentRolloutBuffer(2, capacity=0)
    with pytest.raises(ValueError, match="max_rows"):
        MultiAgentRolloutBuffer(2, capacity=16, max_rows=8)
    with pytest.raises(ValueError, match="length"):
        buffer.sequences(0)


def test_time_index_counts_env_steps_while_every_agent_waits() -> None:
    buffer = MultiAgentRolloutBuffer(n_agents=2)
    waiting = _fixed_step(1, 2, torch.tensor([5]), done=False).set("valid", torch.zeros(1, 2, dtype=torch.bool))
    acting = _fixed_step(1, 2, torch.tensor([5]), done=False).set("valid", torch.ones(1, 2, dtype=torch.bool))
    buffer.add_batch(waiting)  # before the episode's first valid row: not part of it
    buffer.add_batch(acting)
    buffer.add_batch(waiting)
    buffer.add_batch(acting)
    assert buffer.trajectory(5, 0)[keys.TIME_INDEX].tolist() == [0, 2]
    assert buffer.as_tensordict()[keys.MASK][0, :, 0].tolist() == [True, False, True]


def test_new_episode_id_closes_an_unfinished_episode() -> None:
    buffer = MultiAgentRolloutBuffer(n_agents=2)
    buffer.add_batch(_fixed_step(1, 2, torch.tensor([3]), done=False))
    buffer.add_batch(_fixed_step(1, 2, torch.tensor([3]), done=False))
    buffer.add_batch(_fixed_step(1, 2, torch.tensor([9]), done=False))
    table = buffer.completed_episodes()
    assert table["episode_id"].tolist() == [3]
    assert table["episode_length"].tolist() == [[2, 2]]
    assert buffer.trajectory(9, 1)[keys.TIME_INDEX].tolist() == [0]


def test_kept_rollouts_alone_keep_locate_and_follow_episodes_across_clears() -> None:
    # KeptRollouts (clear, add_rollout, locate) gives the same episode table and time indices as
    # the full buffer, an episode spanning a clear included.
    E, T, A = 2, 3, 2

    def rollout(start: int, end_at: int | None) -> TensorDict:
        done = torch.zeros(E, T, A, 1, dtype=torch.bool)
        episode_id = torch.arange(E).view(E, 1, 1).expand(E, T, A) + start
        if end_at is not None:
            done[:, end_at] = True
            episode_id = torch.where(torch.arange(T).view(1, T, 1) > end_at, episode_id + E, episode_id)
        return TensorDict(
            {
                "observation": torch.randn(E, T, A, OBS_DIM),
                "episode_id": episode_id,
                ("next", "reward"): torch.ones(E, T, A, 1),
                ("next", "done"): done,
            },
            batch_size=[E, T, A],
        )

    kept, full = KeptRollouts(A), MultiAgentRolloutBuffer(A)
    first, second = rollout(0, None), rollout(0, 1)  # one episode per env, 5 steps over two rollouts
    for store in (kept, full):
        store.add_rollout(first.clone())
        store.clear()
        store.add_rollout(second.clone())
    assert len(kept) == len(full) == E * T * A
    assert kept.locate(1, 1, 4) == full.locate(1, 1, 4) == (0, 1, 1, 1)  # time 4: the clear kept the count
    assert kept.rollouts[0]["time_index"][0, :, 0].tolist() == [3, 4, 0]
    table, reference = kept.completed_episodes(), full.completed_episodes()
    assert (table == reference).all()
    assert table["episode_length"].tolist() == [[5, 5], [5, 5]]
    assert kept.episode_stats() == full.episode_stats()
