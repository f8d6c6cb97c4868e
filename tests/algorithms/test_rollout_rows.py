"""The rows an update learns from (`RolloutRows` / `TurnBasedRows`) and the auxiliary-loss contract."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from lightmarl import keys
from lightmarl.algorithms import (
    PPO,
    AuxiliaryLoss,
    AuxiliaryRows,
    IndependentMARLTrainer,
    PlainStepper,
    RolloutRows,
    TurnBasedRows,
    UpdateRows,
    loss_row_mask,
)
from lightmarl.algorithms.ppo import PPOUnitTrainer
from lightmarl.data.collector import RolloutCollector
from lightmarl.envs import PettingZooEnvConfig
from lightmarl.policies import MLPActorCritic, MultiAgentPolicy
from lightmarl.population import BindingTable, PolicyBinding

MOVES = 5


def reply_collector(rollout_steps: int):
    config = PettingZooEnvConfig(
        env_fn="lightmarl.envs.testing.ReplyRewardEnv", env_kwargs={"moves": MOVES}, num_envs=2
    )
    spec = config.spec()
    table = BindingTable([PolicyBinding("main", class_path="x.y")], spec, ["main", "main"])
    policy = MLPActorCritic(spec.groups["player"], hidden_sizes=(8,))
    return table, RolloutCollector(config.make_vector(seed=0), MultiAgentPolicy({"main": policy}, table), rollout_steps)


def test_plain_rows_are_each_rollout_as_a_copy_of_its_own(spread_config):
    spec = spread_config.spec()
    table = BindingTable([PolicyBinding("main", class_path="x.y")], spec)
    policy = MLPActorCritic(spec.groups["agent"], hidden_sizes=(8,))
    experience = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy({"main": policy}, table), 4).collect()
    rows = RolloutRows("agent").take(experience)
    assert rows.carried == 0 and rows.transitions is None and rows.closed is None and bool(rows.counted.all())
    mask = torch.rand(rows.data.get("agent").shape) < 0.5
    assert rows.learnable(mask) is mask and rows.new(mask) is mask
    rows.data.set(("agent", keys.LOSS_MASK), mask)
    assert keys.LOSS_MASK not in experience.get("agent").keys()  # the update's writes stay its own


def test_turn_based_rows_learn_each_move_once_when_its_reply_has_come():
    table, collector = reply_collector(rollout_steps=3)
    source = TurnBasedRows("player", table.index["main"])
    learned, moves, carried = 0, 0, []
    for _ in range(8):
        experience = collector.collect()
        moves += int(experience.get(("player", keys.VALID)).sum())
        rows = source.take(experience)
        assert isinstance(rows, UpdateRows) and rows.transitions is not None and rows.closed is not None
        valid = rows.data.get(("player", keys.VALID))
        assert rows.data.shape[1] == rows.carried + 3
        carried.append(rows.carried)
        learnable = rows.learnable(valid)
        assert not bool((learnable & ~rows.closed).any())
        learned += int(learnable.sum())
        fresh = rows.new(valid)
        assert not bool(fresh[:, : rows.carried].any()) and torch.equal(
            fresh[:, rows.carried :], valid[:, rows.carried :]
        )
    # Games of 5 moves, rollouts of 3 steps: most rollouts end on a move still waiting for its reply.
    assert carried[0] == 0 and sum(c > 0 for c in carried) >= 4
    # Every move is learned exactly once: all but the ones still open at the end.
    tail = source.open_transitions.tail
    still_open = 0 if tail is None else int(tail.get(("player", keys.LEARNABLE)).sum())
    assert learned == moves - still_open


class _ZeroLogits(AuxiliaryLoss):
    """Pull the logits of the binding's rows at even env steps towards 0, with a weight that doubles each update."""

    name = "zero_logits"

    def __init__(self, unit: PPOUnitTrainer) -> None:
        self.unit = unit
        self.prepared: list[AuxiliaryRows] = []
        self.batches = 0

    def rows(self, rows: UpdateRows, *, updates: int, fraction_done: float) -> AuxiliaryRows:
        mask = loss_row_mask(rows.data.get("agent"), self.unit.table, self.name, binding_id=self.unit.binding_id)
        mask[:, 1::2] = False
        prepared = AuxiliaryRows(
            metric="zero_logits_rows", mask=mask, entries={("agent", "zero_mask"): mask}, coeff=2.0**updates
        )
        self.prepared.append(prepared)
        return prepared

    def loss(self, batch: TensorDictBase, prepared: AuxiliaryRows) -> dict[str, torch.Tensor]:
        self.batches += 1
        assert prepared is self.prepared[-1]
        out = self.unit.policy(batch.select(("agent", keys.OBSERVATION)).copy())
        mask = batch.get(("agent", "zero_mask"))
        square = out.get(("agent", keys.LOGITS)).pow(2).sum(-1)
        return {"loss_zero_logits": prepared.coeff * (square * mask).sum() / mask.sum().clamp_min(1)}


class _WithZeroLogits(PPOUnitTrainer):
    def _make_auxiliary_losses(self):
        return (_ZeroLogits(self),)


class _PPOWithZeroLogits(PPO):
    trainer_class = _WithZeroLogits


def test_an_auxiliary_loss_learns_in_the_main_losss_steps_from_the_rows_it_returns(spread_config):
    spec = spread_config.spec()
    table = BindingTable([PolicyBinding("main", class_path="x.y")], spec)
    policy = MLPActorCritic(spec.groups["agent"], hidden_sizes=(8,))
    collector = RolloutCollector(spread_config.make_vector(0), MultiAgentPolicy({"main": policy}, table), 4)
    trainer = IndependentMARLTrainer(table, {"main": policy}, {"main": _PPOWithZeroLogits(minibatch_size=8, epochs=2)})
    unit = trainer.unit_trainers["main"]
    aux = unit.auxiliary[0]
    assert unit.loss_names == ("ppo", "zero_logits")
    optimizers = trainer.make_optimizers()
    experience = collector.collect()
    before = policy(experience.select(("agent", keys.OBSERVATION)).copy()).get(("agent", keys.LOGITS)).pow(2).mean()
    for update in range(3):
        metrics = trainer.update(experience, optimizers, PlainStepper())["main"]
        # 4 envs x 2 even steps x 3 agents; 2 minibatches x 2 epochs, each with the auxiliary term.
        assert metrics["zero_logits_rows"] == 4 * 2 * 3 and aux.batches == 4 * (update + 1)
        assert aux.prepared[-1].coeff == 2.0**update and "loss_zero_logits" in metrics and "loss_objective" in metrics
    assert keys.LOSS_MASK not in experience.get("agent").keys() and "zero_mask" not in experience.get("agent").keys()
    after = policy(experience.select(("agent", keys.OBSERVATION)).copy()).get(("agent", keys.LOGITS)).pow(2).mean()
    assert after < before
