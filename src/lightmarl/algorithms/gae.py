"""Generalized advantage estimation over each agent's own valid rows.

Schulman et al. 2016 (GAE). TorchRL's `vec_generalized_advantage_estimate`
does the recursion; `valid_row_gae` first compacts each (env, agent) sequence into the
agent's transitions (`lightmarl.algorithms.open_transitions`), so turn-based envs and agents
that leave mid-episode get the right credit.
"""

from __future__ import annotations

import torch
from torchrl.objectives.value.functional import vec_generalized_advantage_estimate

from lightmarl.algorithms.open_transitions import AgentTransitions, agent_transitions


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
    turn_based: bool = False,
    counted: torch.Tensor | None = None,
    transitions: AgentTransitions | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over each sequence's agent transitions: a transition runs from one valid row to the next.

    In turn-based envs an agent's rows alternate with rows where another agent acts (``valid``
    False), and rewards or the episode's end can arrive on those; in parallel envs an agent
    that left mid-episode has invalid rows until the reset. Each sequence (one env and agent,
    along ``time_dim``) is *compacted* into the agent's transitions
    (`agent_transitions`): valid row ``t`` becomes
    one transition whose

    * reward is the sum of the rewards of its rows (undiscounted: they arrive within one of the
      agent's own steps): rows ``t .. e`` and, in turn-based envs, the rows of the episode
      before the agent's first move when ``t`` is that move,
    * end row ``e`` is the first row from ``t`` on that is ``done``, else the row before the
      agent's next valid row, else the sequence's last row,
    * ``done`` / ``terminated`` / next value are those of row ``e`` (so the next value is the
      critic's value of the agent's observation after row ``e``: in turn-based envs, what it
      sees at its next turn),

    then TorchRL's `vec_generalized_advantage_estimate`
    runs on the compacted sequences and the results go back to the valid rows. With every row
    valid, each transition is its own row and this is TorchRL's GAE. A transition still open at
    the last row (turn-based) bootstraps from that row's next value here; the on-policy learner
    keeps it out of the loss and closes it with the next rollout
    (`OpenTransitions`).

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
        turn_based: rows where the agent did not act carry its rewards (see
            `agent_transitions`).
        counted: rows whose reward counts (``valid``'s shape; default all): rows of a kept tail
            whose reward is already in an earlier update's transition do not.
        transitions: the sequences' transitions, when the caller already grouped them.

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

    def seq(x: torch.Tensor) -> torch.Tensor:
        return x.expand(shape).movedim(time_dim, -1).reshape(-1, steps)

    v, nv, r = seq(value), seq(next_value), seq(reward).to(value.dtype)
    d, term, ok = seq(done).bool(), seq(terminated).bool(), seq(valid).bool()
    if counted is not None:
        while counted.dim() < value.dim():
            counted = counted.unsqueeze(-1)
        r = torch.where(seq(counted).bool(), r, 0)
    n = v.shape[0]
    if transitions is None:
        transitions = agent_transitions(ok, d, turn_based)
    width = transitions.width
    # Rows outside every transition may hold anything (an absent agent's NaN): they are never read.
    reward_c = transitions.sum_rows(torch.where(transitions.slot >= 0, r, 0))
    used = transitions.used  # padding transitions (shorter sequences) stay zero and done: they add nothing
    end_flat = transitions.flat_end(steps)
    value_c = torch.zeros(n * width, dtype=v.dtype, device=v.device)
    start_slot = ok.long().cumsum(1) - 1
    index = torch.arange(n, device=v.device).unsqueeze(1) * width + start_slot
    value_c[index[ok]] = v[ok]
    next_value_c = torch.where(used, nv.reshape(-1)[end_flat], 0)
    done_c = torch.where(used, d.reshape(-1)[end_flat], True)
    terminated_c = torch.where(used, term.reshape(-1)[end_flat], True)
    # Under mixed precision (bf16-mixed) the estimator's matrix products would run in bf16: discounted
    # sums over a rollout need float32, and the result must match the values' dtype.
    with torch.autocast(device_type=v.device.type, enabled=False):
        if gamma * lmbda == 0:
            # GAE is then the one-step TD error; TorchRL's vectorized estimator fails on a zero
            # decay (it builds its decay matrix from powers of gamma * lmbda).
            bootstrap = torch.where(terminated_c, 0.0, gamma * next_value_c.float())
            advantage_c = reward_c.float() + bootstrap - value_c.float()
        else:
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
