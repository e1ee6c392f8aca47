"""Checks for environment authors: gradients against finite differences or a float64 twin."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.autograd.gradcheck import GradcheckError

from pathgrad.envs.base import BatchedDifferentiableEnv

__all__ = ["check_env_gradients"]

Rollout = Callable[..., tuple[torch.Tensor, ...]]


def check_env_gradients(
    env: BatchedDifferentiableEnv,
    num_steps: int = 5,
    *,
    seed: int = 0,
    state_keys: Sequence[str] | None = None,
    action_scale: float = 0.5,
    initial_state: dict[str, torch.Tensor] | None = None,
    reset_at_step: int | None = 2,
    reference_env: BatchedDifferentiableEnv | None = None,
    reference_state: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None = None,
    rtol: float = 2e-2,
    **gradcheck_kwargs: Any,
) -> bool:
    """Check an env's gradients over a chain of steps that passes through a reset.

    Runs ``num_steps`` steps from a seeded reset (or ``initial_state``) with
    seeded random actions and compares the Jacobian of every step's reward,
    observation and ``info["final_observation"]`` with respect to the actions
    and the initial state. Every other env row starts ``reset_at_step`` steps
    before its time limit, so the chain crosses an auto-reset; resets are
    replayed identically (the generator is restored before each evaluation).

    - float64 env: ``torch.autograd.gradcheck`` (central differences, tight).
    - float32 env with ``reference_env`` (the same dynamics in float64, for
      example the torch twin of a simulator env): the env's Jacobian must match
      the reference's analytic Jacobian (itself checked first by gradcheck).
    - float32 env without a reference: central differences with a step suited
      to float32 (``1e-3`` relative), compared output by output in norm.

    In the float32 modes an output's Jacobian passes when
    ``||J - J_ref|| <= rtol * ||J_ref||`` (Frobenius norms; ``rtol`` 2%).

    Args:
        env: An env built on :class:`~pathgrad.envs.BatchedDifferentiableEnv`.
        num_steps: Length of the chain of steps.
        seed: Seed of the reset and of the actions.
        state_keys: Initial-state entries to differentiate; all floating ones by default.
        action_scale: Standard deviation of the random actions.
        initial_state: Start from this state instead of a seeded reset.
        reset_at_step: Step at which every other row is truncated and reset
            (``None``: no forced reset).
        reference_env: float64 env with the same dynamics, for float32 envs.
        reference_state: Maps this env's state dict to the reference env's
            (differentiably), when their entries differ; identity by default.
        rtol: Relative tolerance of the float32 comparisons.
        **gradcheck_kwargs: Passed to ``torch.autograd.gradcheck`` (float64 checks).

    Returns:
        True when the gradients agree.

    Raises:
        ValueError: If the env's dtype is neither float32 nor float64, or the
            reference is not float64.
        torch.autograd.gradcheck.GradcheckError: If a gradient disagrees.
    """
    if reference_env is not None and reference_env.dtype != torch.float64:
        raise ValueError("reference_env must be a float64 env (dtype='float64').")
    if env.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"check_env_gradients needs a float32 or float64 env, got {env.dtype}.")
    options = dict(
        num_steps=num_steps,
        seed=seed,
        state_keys=state_keys,
        action_scale=action_scale,
        initial_state=initial_state,
        reset_at_step=reset_at_step,
    )
    if env.dtype == torch.float64:
        rollout, inputs = _rollout(env, **options)
        gradcheck_kwargs.setdefault("eps", 1e-6)
        return bool(torch.autograd.gradcheck(rollout, inputs, **gradcheck_kwargs))
    rollout, inputs = _rollout(env, **options)
    analytic = _jacobians(rollout, inputs)
    if reference_env is not None:
        check_env_gradients(reference_env, **options, **gradcheck_kwargs)
        # The twin steps from the same inputs and reset draws, in float64 and its own entries.
        mapping = reference_state or (lambda state: state)
        reference = _Chain(
            reference_env,
            _as_float64(rollout.start),
            rollout.keys,
            rollout.elapsed,
            state_map=lambda state: _as_float64(mapping(state)),
        )
        reference.fresh = [_as_float64(mapping(fresh)) for fresh in rollout.fresh]
        expected = _jacobians(
            reference, tuple(x.detach().double().requires_grad_() for x in inputs)
        )
        source = "the float64 reference env's Jacobian"
    else:
        expected = _finite_differences(rollout, inputs)
        source = "central finite differences (float32 step)"
    for index, (got, want) in enumerate(zip(analytic, expected, strict=True)):
        error = float(torch.linalg.norm(got - want))
        scale = float(torch.linalg.norm(want))
        if error > rtol * max(scale, 1e-6):
            step, kind = divmod(index, 3)
            name = ("reward", "observation", "final_observation")[kind]
            raise GradcheckError(
                f"Jacobian of the {name} of step {step} disagrees with {source}: "
                f"relative error {error / max(scale, 1e-12):.3g} > rtol {rtol:g}."
            )
    return True


class _Chain:
    """The env's chain of steps as a function of (initial state entries..., actions).

    The reset draws of the first call are recorded and replayed by later calls
    (``fresh``), so every evaluation, and a twin env given the same draws, sees
    the same auto-resets.
    """

    def __init__(
        self,
        env: BatchedDifferentiableEnv,
        start: dict[str, torch.Tensor],
        keys: list[str],
        elapsed: torch.Tensor,
        state_map: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None = None,
    ) -> None:
        self.env, self.start, self.keys, self.elapsed = env, start, keys, elapsed
        self.state_map = state_map or (lambda state: state)
        self.fresh: list[dict[str, torch.Tensor]] = []

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        env = self.env
        env.state = self.state_map({**self.start, **dict(zip(self.keys, inputs[:-1], strict=True))})
        env.elapsed_steps = self.elapsed.clone()
        record = not self.fresh
        outputs: list[torch.Tensor] = []
        for step, step_actions in enumerate(inputs[-1]):
            if record:
                self.fresh.append(
                    {k: v.detach().clone() for k, v in env.draw_reset_states().items()}
                )
            env.draw_reset_states = lambda fresh=self.fresh[step]: dict(fresh)  # type: ignore[method-assign]
            try:
                observation, reward, _, _, info = env.step(step_actions)
            finally:
                del env.draw_reset_states
            outputs += [reward, observation, info["final_observation"]]
        return tuple(outputs)


def _rollout(
    env: BatchedDifferentiableEnv,
    *,
    num_steps: int,
    seed: int,
    state_keys: Sequence[str] | None,
    action_scale: float,
    initial_state: dict[str, torch.Tensor] | None,
    reset_at_step: int | None,
) -> tuple[_Chain, tuple[torch.Tensor, ...]]:
    """The chain of ``num_steps`` steps of ``env`` and its inputs (state entries, actions)."""
    env.reset(seed=seed)
    start = {
        key: value.detach().clone().to(env.device)
        for key, value in (initial_state if initial_state is not None else env.state).items()
    }
    keys = (
        list(state_keys)
        if state_keys is not None
        else [key for key, value in start.items() if value.is_floating_point()]
    )
    elapsed = torch.zeros(env.num_envs, dtype=torch.long, device=env.device)
    if reset_at_step is not None:
        elapsed[::2] = max(env.max_episode_steps - reset_at_step, 0)
    actions = action_scale * torch.randn(
        num_steps,
        env.num_envs,
        env.action_dim,
        generator=torch.Generator().manual_seed(seed),
        dtype=torch.float64,
    ).to(device=env.device, dtype=env.dtype)
    inputs = tuple(start[key].clone().requires_grad_() for key in keys)
    return _Chain(env, start, keys, elapsed), (*inputs, actions.clone().requires_grad_())


def _as_float64(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.double() if v.is_floating_point() else v for k, v in state.items()}


def _jacobians(rollout: Rollout, inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    """Analytic Jacobian ``[outputs, inputs]`` (float64) of every output of ``rollout``."""
    outputs = rollout(*inputs)
    jacobians = []
    for output in outputs:
        rows = []
        for element in output.reshape(-1):
            grads = torch.autograd.grad(element, inputs, retain_graph=True, allow_unused=True)
            rows.append(
                torch.cat(
                    [
                        (torch.zeros_like(x) if g is None else g).reshape(-1).double()
                        for g, x in zip(grads, inputs, strict=True)
                    ]
                )
            )
        jacobians.append(torch.stack(rows))
    return jacobians


@torch.no_grad()
def _finite_differences(
    rollout: Rollout, inputs: tuple[torch.Tensor, ...], relative_step: float = 1e-3
) -> list[torch.Tensor]:
    """Central-difference Jacobians with a step of about ``relative_step * max(1, |x|)``.

    The step actually taken (after rounding to the input's dtype) divides the difference.
    """
    flat = [x.detach().clone() for x in inputs]
    columns: list[list[torch.Tensor]] = []
    for tensor in flat:
        values = tensor.view(-1)
        for index in range(values.numel()):
            original = values[index].item()
            step = relative_step * max(1.0, abs(original))
            values[index] = original + step
            upper = values[index].item()
            plus = [o.double().reshape(-1) for o in rollout(*flat)]
            values[index] = original - step
            lower = values[index].item()
            minus = [o.double().reshape(-1) for o in rollout(*flat)]
            values[index] = original
            columns.append([(p - m) / (upper - lower) for p, m in zip(plus, minus, strict=True)])
    return [torch.stack([column[k] for column in columns], dim=1) for k in range(len(columns[0]))]
