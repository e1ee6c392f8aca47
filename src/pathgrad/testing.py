"""Checks for environment authors: gradients against central finite differences."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from pathgrad.envs.base import BatchedDifferentiableEnv

__all__ = ["check_env_gradients"]


def check_env_gradients(
    env: BatchedDifferentiableEnv,
    num_steps: int = 5,
    *,
    seed: int = 0,
    state_keys: Sequence[str] | None = None,
    action_scale: float = 0.5,
    initial_state: dict[str, torch.Tensor] | None = None,
    **gradcheck_kwargs: Any,
) -> bool:
    """Check an env's gradients with ``torch.autograd.gradcheck`` in float64.

    Runs ``num_steps`` steps from a seeded reset (or ``initial_state``) with
    seeded random actions and compares the analytic Jacobian of every step's
    reward, observation and ``info["final_observation"]`` with respect to the
    actions and the initial state against central finite differences.
    Auto-resets inside the window are replayed identically (the generator is
    restored before each evaluation).

    Args:
        env: A float64 env built on :class:`~pathgrad.envs.BatchedDifferentiableEnv`.
        num_steps: Length of the chain of steps.
        seed: Seed of the reset and of the actions.
        state_keys: Initial-state entries to differentiate; all floating ones by default.
        action_scale: Standard deviation of the random actions.
        initial_state: Start from this state instead of a seeded reset.
        **gradcheck_kwargs: Passed to ``torch.autograd.gradcheck`` (``atol``, ``rtol``...).

    Returns:
        True when the gradients agree.

    Raises:
        ValueError: If the env is not float64.
        torch.autograd.gradcheck.GradcheckError: If a gradient disagrees (import it from
            ``torch.autograd.gradcheck``).
    """
    if env.dtype != torch.float64:
        raise ValueError("check_env_gradients needs a float64 env (dtype='float64').")
    env.reset(seed=seed)
    start = {
        key: value.detach().clone()
        for key, value in (initial_state if initial_state is not None else env.state).items()
    }
    keys = (
        list(state_keys)
        if state_keys is not None
        else [key for key, value in start.items() if value.is_floating_point()]
    )
    generator_state = env.generator.get_state()
    actions = action_scale * torch.randn(
        num_steps,
        env.num_envs,
        env.action_dim,
        generator=torch.Generator().manual_seed(seed),
        dtype=torch.float64,
    ).to(env.device)

    def rollout(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        env.state = {**start, **dict(zip(keys, inputs[:-1], strict=True))}
        env.elapsed_steps = torch.zeros(env.num_envs, dtype=torch.long, device=env.device)
        env.generator.set_state(generator_state)
        outputs: list[torch.Tensor] = []
        for step_actions in inputs[-1]:
            observation, reward, _, _, info = env.step(step_actions)
            outputs += [reward, observation, info["final_observation"]]
        return tuple(outputs)

    inputs = tuple(start[key].clone().requires_grad_() for key in keys)
    inputs += (actions.clone().requires_grad_(),)
    gradcheck_kwargs.setdefault("eps", 1e-6)
    return bool(torch.autograd.gradcheck(rollout, inputs, **gradcheck_kwargs))
