"""``check_env_gradients``: an env's Jacobians against finite differences or a float64 twin."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.autograd.gradcheck import GradcheckError

from pathgrad.core.env_contract import (
    EnvCheckError,
    Problem,
    action_dim,
    env_dtype,
    step_problems,
)
from pathgrad.envs.base import BatchedDifferentiableEnv
from pathgrad.testing.jacobians import finite_differences, jacobian, jacobians

__all__ = ["check_env_gradients"]

OUTPUTS = ("reward", "observation", "final_observation")
# Members whose problems leave a step's outputs unreadable.
_UNREADABLE = {"step()", "info"}


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

    First, the chain's steps must meet the contract (shapes, dtypes and device
    of every output and state entry, bool done flags), every output must be
    finite and have a gradient path to the inputs: a detached reward, or one
    rebuilt from NumPy, fails here (gradcheck alone skips such outputs). Then:

    - float64 env: ``torch.autograd.gradcheck`` (central differences, tight).
    - float32 env with ``reference_env`` (the same dynamics in float64, for
      example the torch twin of a simulator env): the env's Jacobian must match
      the reference's analytic Jacobian (itself checked first by gradcheck).
    - float32 env without a reference: central differences with a step suited
      to float32 (``1e-3`` relative), compared output by output in norm.

    In the float32 modes every Jacobian entry must be finite and an output's
    Jacobian passes when ``||J - J_ref|| <= rtol * ||J_ref||`` (Frobenius
    norms; ``rtol`` 2%).

    An env written against the bare contract (not a ``BatchedDifferentiableEnv``:
    no state to set) is checked in its actions only, each evaluation replayed
    from ``reset(seed=seed)``; ``reset_at_step`` does not apply to it.

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
        pathgrad.testing.EnvCheckError: For a broken contract, a non-finite
            output or Jacobian entry, or an output without a gradient path
            (one line naming it; a ``GradcheckError``).
        torch.autograd.gradcheck.GradcheckError: If a gradient disagrees.
    """
    source = check_gradients(
        env,
        num_steps,
        seed=seed,
        state_keys=state_keys,
        action_scale=action_scale,
        initial_state=initial_state,
        reset_at_step=reset_at_step,
        reference_env=reference_env,
        reference_state=reference_state,
        rtol=rtol,
        **gradcheck_kwargs,
    )
    return bool(source)


def check_gradients(
    env: Any,
    num_steps: int,
    *,
    seed: int = 0,
    state_keys: Sequence[str] | None = None,
    action_scale: float = 0.5,
    initial_state: dict[str, torch.Tensor] | None = None,
    reset_at_step: int | None = 2,
    reference_env: Any = None,
    reference_state: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None = None,
    rtol: float = 2e-2,
    contract: bool = True,
    **gradcheck_kwargs: Any,
) -> str:
    """:func:`check_env_gradients`, returning what the Jacobians were compared with.

    ``contract=False`` leaves the contract to the caller (``check_env`` checks it
    once). Returns ``""`` when gradcheck was told not to raise and failed.
    """
    options = dict(
        num_steps=num_steps,
        seed=seed,
        state_keys=state_keys,
        action_scale=action_scale,
        initial_state=initial_state,
        reset_at_step=reset_at_step,
    )
    if reference_env is not None and env_dtype(reference_env) != torch.float64:
        raise ValueError("reference_env must be a float64 env (dtype='float64').")
    dtype = env_dtype(env)
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"check_env_gradients needs a float32 or float64 env, got {dtype}.")
    replayed = not isinstance(env, BatchedDifferentiableEnv)
    if reference_env is not None and replayed == isinstance(
        reference_env, BatchedDifferentiableEnv
    ):
        raise ValueError(
            "reference_env must be built like env: both on BatchedDifferentiableEnv or neither."
        )
    if replayed:
        given = [key for key in ("state_keys", "initial_state") if options[key] is not None]
        if given or reference_state is not None:
            raise ValueError(
                f"{', '.join(given) or 'reference_state'} needs a BatchedDifferentiableEnv "
                f"(its state), not a {type(env).__name__}."
            )
        rollout, inputs = _replay(env, **options)
    else:
        rollout, inputs = _rollout(env, **options)
    outputs = rollout(*inputs)  # the first evaluation: it records the resets and the contract
    if contract and rollout.problems:
        step, first = rollout.problems[0]
        others = dict.fromkeys(p.member for _, p in rollout.problems if p.member != first.member)
        also = f" (also: {', '.join(others)})" if others else ""
        raise EnvCheckError(f"step {step}: {first}{also}")
    _check_paths(rollout, outputs, inputs)
    if dtype == torch.float64:
        gradcheck_kwargs.setdefault("eps", 1e-6)
        try:
            passed = torch.autograd.gradcheck(rollout, inputs, **gradcheck_kwargs)
        except GradcheckError as error:
            raise GradcheckError(f"{_explain(error, rollout, inputs)}\n{error}") from error
        return "torch.autograd.gradcheck (float64 central differences)" if passed else ""
    analytic = jacobians(rollout, inputs)
    _check_finite(analytic, "the Jacobian", rollout, inputs)
    if reference_env is not None:
        try:
            check_gradients(reference_env, **options, **gradcheck_kwargs)
        except GradcheckError as error:
            raise type(error)(f"reference_env: {error}") from error
        reference, reference_inputs = _twin(rollout, inputs, reference_env, reference_state)
        expected = jacobians(reference, reference_inputs)
        source = "the float64 reference env's Jacobian"
    else:
        expected = finite_differences(rollout, inputs)
        source = "central finite differences (float32 step)"
    _check_finite(expected, source, rollout, inputs)
    for index, (got, want) in enumerate(zip(analytic, expected, strict=True)):
        error = float(torch.linalg.norm(got - want))
        scale = float(torch.linalg.norm(want))
        if not math.isfinite(error) or error > rtol * max(scale, 1e-6):
            raise GradcheckError(
                f"Jacobian of the {_output_name(index)} disagrees with {source}: "
                f"relative error {error / max(scale, 1e-12):.3g} > rtol {rtol:g}."
            )
    return source


class _Chain:
    """The env's chain of steps as a function of (initial state entries..., actions).

    The reset draws of the first call are recorded and replayed by later calls
    (``fresh``), so every evaluation, and a twin env given the same draws, sees
    the same auto-resets. The first call also records the contract problems of
    every step (``problems``).
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
        self.problems: list[tuple[int, Problem]] = []

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
                result = env.step(step_actions)
            finally:
                del env.draw_reset_states
            outputs += _outputs(env, step, result, self.problems if record else None)
        return tuple(outputs)


class _Replay:
    """A bare-contract env's chain as a function of its actions, replayed from a seeded reset."""

    keys: list[str] = []

    def __init__(self, env: Any, seed: int) -> None:
        self.env, self.seed = env, seed
        self.problems: list[tuple[int, Problem]] = []
        self.recorded = False

    def __call__(self, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        self.env.reset(seed=self.seed)
        record, self.recorded = not self.recorded, True
        outputs: list[torch.Tensor] = []
        for step, step_actions in enumerate(actions):
            result = self.env.step(step_actions)
            outputs += _outputs(self.env, step, result, self.problems if record else None)
        return tuple(outputs)


def _outputs(
    env: Any, step: int, result: Any, problems: list[tuple[int, Problem]] | None
) -> list[torch.Tensor]:
    """Reward, observation and final observation of a step; contract problems to ``problems``."""
    if problems is not None:
        found = step_problems(env, result)
        for problem in found:
            if problem.member in _UNREADABLE or problem.text == "missing":
                raise EnvCheckError(f"step {step}: {problem}")
        problems += [(step, problem) for problem in found]
    observation, reward, _, _, info = result
    return [reward, observation, info["final_observation"]]


def _actions(env: Any, num_steps: int, seed: int, scale: float) -> torch.Tensor:
    """Seeded normal actions ``[num_steps, N, A]`` in the env's dtype and device, graph leaves."""
    actions = scale * torch.randn(
        num_steps,
        env.num_envs,
        action_dim(env),
        generator=torch.Generator().manual_seed(seed),
        dtype=torch.float64,
    )
    return actions.to(device=env.device, dtype=env_dtype(env)).requires_grad_()


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
    inputs = tuple(start[key].clone().requires_grad_() for key in keys)
    actions = _actions(env, num_steps, seed, action_scale)
    return _Chain(env, start, keys, elapsed), (*inputs, actions)


def _replay(
    env: Any, *, num_steps: int, seed: int, action_scale: float, **_: Any
) -> tuple[_Replay, tuple[torch.Tensor, ...]]:
    """The replayed chain of a bare-contract env and its only input, the actions."""
    return _Replay(env, seed), (_actions(env, num_steps, seed, action_scale),)


def _twin(
    rollout: _Chain | _Replay,
    inputs: tuple[torch.Tensor, ...],
    reference_env: Any,
    reference_state: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] | None,
) -> tuple[_Chain | _Replay, tuple[torch.Tensor, ...]]:
    """The reference env's chain from the same inputs and reset draws, in float64."""
    twin_inputs = tuple(x.detach().double().requires_grad_() for x in inputs)
    if isinstance(rollout, _Replay):
        return _Replay(reference_env, rollout.seed), twin_inputs
    mapping = reference_state or (lambda state: state)
    reference = _Chain(
        reference_env,
        _as_float64(rollout.start),
        rollout.keys,
        rollout.elapsed,
        state_map=lambda state: _as_float64(mapping(state)),
    )
    reference.fresh = [_as_float64(mapping(fresh)) for fresh in rollout.fresh]
    return reference, twin_inputs


def _as_float64(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.double() if v.is_floating_point() else v for k, v in state.items()}


def _output_name(index: int) -> str:
    step, kind = divmod(index, len(OUTPUTS))
    return f"{OUTPUTS[kind]} of step {step}"


def _input_name(rollout: _Chain | _Replay, inputs: tuple[torch.Tensor, ...], column: int) -> str:
    """The input entry that Jacobian column ``column`` differentiates by."""
    for index, tensor in enumerate(inputs):
        if column < tensor.numel():
            if index < len(rollout.keys):
                row = column // max(tensor[0].numel(), 1) if tensor.ndim else 0
                return f"the initial state entry '{rollout.keys[index]}' (row {row})"
            step, rest = divmod(column, tensor[0].numel())
            return f"the actions of step {step} (row {rest // tensor.shape[-1]})"
        column -= tensor.numel()
    return f"input column {column}"


def _input_index_name(rollout: _Chain | _Replay, index: int) -> str:
    return (
        f"the initial state entry '{rollout.keys[index]}'"
        if index < len(rollout.keys)
        else "the actions"
    )


def _where(bad: torch.Tensor, values: torch.Tensor) -> str:
    """``"nan at row 1 (1 of 4 entries)"``: the first non-finite entry (``bad`` marks them)."""
    index = tuple(int(i) for i in bad.nonzero()[0])
    entry = f", entry {index[1] if len(index) == 2 else index[1:]}" if len(index) > 1 else ""
    count = f"{int(bad.sum())} of {bad.numel()} entries"
    return f"{float(values[index])} at row {index[0]}{entry} ({count})"


def _check_paths(
    rollout: _Chain | _Replay, outputs: tuple[torch.Tensor, ...], inputs: tuple[torch.Tensor, ...]
) -> None:
    """Every output must be a finite tensor with a gradient path to the inputs."""
    for index, output in enumerate(outputs):
        name = _output_name(index)
        if not isinstance(output, torch.Tensor) or not output.is_floating_point():
            raise EnvCheckError(f"the {name} is not a floating tensor: {output!r:.60}")
        bad = ~torch.isfinite(output.detach())
        if bad.any():
            raise EnvCheckError(f"the {name} is not finite: {_where(bad, output.detach())}")
        grads = (
            torch.autograd.grad(output.sum(), inputs, retain_graph=True, allow_unused=True)
            if output.requires_grad
            else (None,)
        )
        if all(grad is None for grad in grads):
            raise EnvCheckError(
                f"the {name} has no gradient path to the actions or the carried state "
                "(detached, or rebuilt from NumPy?)"
            )


def _check_finite(
    matrices: list[torch.Tensor], source: str, rollout: Any, inputs: tuple[torch.Tensor, ...]
) -> None:
    """Every entry of every Jacobian must be finite; the first bad one is named."""
    for index, matrix in enumerate(matrices):
        bad = ~torch.isfinite(matrix)
        if bad.any():
            entry, column = (int(i) for i in bad.nonzero()[0])
            row = entry // max(matrix.shape[0] // rollout.env.num_envs, 1)
            raise EnvCheckError(
                f"{source} of the {_output_name(index)} (row {row}) with respect to "
                f"{_input_name(rollout, inputs, column)} is {float(matrix[entry, column])} "
                f"({int(bad.sum())} of {bad.numel()} entries are not finite)"
            )


_MISMATCH = re.compile(r"output (\d+) with respect to input (\d+)")


def _explain(error: GradcheckError, rollout: Any, inputs: tuple[torch.Tensor, ...]) -> str:
    """One line naming the output and input of a gradcheck mismatch."""
    match = _MISMATCH.search(str(error))
    if match is None:
        return str(error).splitlines()[0]
    output, input_index = int(match.group(1)), int(match.group(2))
    name, wrt = _output_name(output), _input_index_name(rollout, input_index)
    bad = ~torch.isfinite(jacobian(rollout(*inputs)[output], inputs))
    if bad.any():
        count = f"{int(bad.sum())} of {bad.numel()}"
        return f"the Jacobian of the {name} holds non-finite entries ({count})"
    return (
        f"the Jacobian of the {name} with respect to {wrt} disagrees with central finite "
        "differences (gradcheck)"
    )
