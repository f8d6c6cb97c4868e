"""Generalized advantage estimation over each agent's own valid rows.

Schulman et al. 2016 (GAE). TorchRL's :func:`~torchrl.objectives.value.functional.vec_generalized_advantage_estimate`
does the recursion; :func:`valid_row_gae` first compacts each (env, agent) sequence to the rows
where the agent acted, so turn-based envs and agents that leave mid-episode get the right credit.
"""

from __future__ import annotations

import torch
from torchrl.objectives.value.functional import vec_generalized_advantage_estimate


def valid_row_gae(
    gamma: float,
    lmbda: float,
    value: torch.Tensor,
    next_value: torch.Tensor,
    reward: torch.Tensor,
    done: torch.Tensor,
    terminated: torch.Tensor,
    valid: torch.Tensor,
    time_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over each sequence's valid rows: a transition runs from one valid row to the next.

    In turn-based envs an agent's rows alternate with rows where another agent acts (``valid``
    False), and rewards or the episode's end can arrive on those; in parallel envs an agent
    that left mid-episode has invalid rows until the reset. Each sequence (one env and agent,
    along ``time_dim``) is *compacted*: its valid row ``t`` becomes one transition whose

    * reward is the sum of the rewards on rows ``t .. e`` (undiscounted: they arrive within one
      of the agent's own steps),
    * end row ``e`` is the first row from ``t`` on that is ``done``, else the row before the
      agent's next valid row, else the sequence's last row,
    * ``done`` / ``terminated`` / next value are those of row ``e`` (so the next value is the
      critic's value of the agent's observation after row ``e``: in turn-based envs, what it
      sees at its next turn),

    then TorchRL's :func:`~torchrl.objectives.value.functional.vec_generalized_advantage_estimate`
    runs on the compacted sequences and the results go back to the valid rows. Rewards after a
    done row and before the agent's next valid row (its next episode, before its first turn) are
    dropped, as are rows before a sequence's first valid row. With every row valid, each
    transition is its own row and this is TorchRL's GAE.

    Args:
        gamma: discount factor.
        lmbda: GAE lambda.
        value: critic values of the rows ``[*batch, T, *features]`` (time at ``time_dim``).
        next_value: critic values of each row's next observation, same shape.
        reward: ``("next", reward)``, same shape.
        done: ``("next", done)``, same shape (bool).
        terminated: ``("next", terminated)``, same shape (bool).
        valid: the rows' ``valid`` flags, ``value``'s shape or without its trailing feature dims.
        time_dim: the time dimension.

    Returns:
        ``(advantage, value_target)`` shaped like ``value``; on invalid rows advantage is 0 and
        value_target is the row's value.
    """
    shape = value.shape
    time_dim = time_dim % value.dim()
    while valid.dim() < value.dim():
        valid = valid.unsqueeze(-1)
    valid = valid.expand(shape)
    steps = shape[time_dim]

    def sequences(x: torch.Tensor) -> torch.Tensor:
        return x.expand(shape).movedim(time_dim, -1).reshape(-1, steps)

    v, nv, r = sequences(value), sequences(next_value), sequences(reward).to(value.dtype)
    d, term, ok = sequences(done).bool(), sequences(terminated).bool(), sequences(valid).bool()
    n = v.shape[0]
    slot = ok.long().cumsum(1) - 1  # which valid row's transition a row belongs to (-1: none yet)
    dones_before = d.long().cumsum(1) - d.long()  # done rows strictly before each row
    # dones_before at the row's transition start (non-decreasing in time, so a running max finds it)
    start_dones = torch.where(ok, dones_before, 0).cummax(1).values
    member = (slot >= 0) & (dones_before == start_dones)  # no done between the transition's start and the row
    width = max(int(ok.sum(1).max()), 1) if n else 1
    index = torch.arange(n, device=v.device).unsqueeze(1) * width + slot  # flat [n * width] transition index
    reward_c = torch.zeros(n * width, dtype=v.dtype, device=v.device).index_add_(0, index[member], r[member])
    time = torch.arange(steps, device=v.device).expand(n, steps)
    end = torch.full((n * width,), -1, dtype=torch.long, device=v.device)
    end.scatter_reduce_(0, index[member], time[member], reduce="amax")
    used = end >= 0  # padding transitions (shorter sequences) stay zero and done: they add nothing
    end_flat = torch.arange(n * width, device=v.device) // width * steps + end.clamp(min=0)
    value_c = torch.zeros(n * width, dtype=v.dtype, device=v.device)
    value_c[index[ok]] = v[ok]
    next_value_c = torch.where(used, nv.reshape(-1)[end_flat], 0)
    done_c = torch.where(used, d.reshape(-1)[end_flat], True)
    terminated_c = torch.where(used, term.reshape(-1)[end_flat], True)
    # Under mixed precision (bf16-mixed) the estimator's matrix products would run in bf16: discounted
    # sums over a rollout need float32, and the result must match the values' dtype.
    with torch.autocast(device_type=v.device.type, enabled=False):
        advantage_c, _ = vec_generalized_advantage_estimate(
            gamma,
            lmbda,
            value_c.view(n, width, 1).float(),
            next_value_c.view(n, width, 1).float(),
            reward_c.view(n, width, 1).float(),
            done=done_c.view(n, width, 1),
            terminated=terminated_c.view(n, width, 1),
            time_dim=-2,
        )
    advantage = torch.zeros_like(v)
    advantage[ok] = advantage_c.reshape(-1)[index[ok]].to(v.dtype)
    value_target = advantage + v

    def rows(x: torch.Tensor) -> torch.Tensor:
        moved = list(shape)
        moved.append(moved.pop(time_dim))
        return x.reshape(moved).movedim(-1, time_dim)

    return rows(advantage), rows(value_target)
