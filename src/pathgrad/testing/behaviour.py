"""What an env must do over several steps: repeat a seeded run, restore, detach, stay finite.

Each check returns its failures (one line each) and a note saying what it
ran; a check that does not apply raises :class:`Skipped`.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from pathgrad.core.env_contract import (
    Problem,
    action_dim,
    env_dtype,
    step_problems,
)

__all__ = [
    "Skipped",
    "check_detach_state",
    "check_reproducibility",
    "check_rollout",
    "check_state_dict",
    "random_actions",
]

Trace = list[tuple[str, torch.Tensor]]


class Skipped(Exception):
    """The check does not apply to this env; the message says why."""


def random_actions(env: Any, count: int, seed: int) -> list[torch.Tensor]:
    """``count`` seeded actions ``[N, A]``: uniform within the bounds, normal where unbounded."""
    space = env.single_action_space
    low = torch.as_tensor(np.asarray(space.low, dtype=np.float64))
    high = torch.as_tensor(np.asarray(space.high, dtype=np.float64))
    bounded = torch.isfinite(low) & torch.isfinite(high)
    generator = torch.Generator().manual_seed(seed)
    shape = (count, env.num_envs, action_dim(env))
    uniform = torch.rand(shape, generator=generator, dtype=torch.float64)
    normal = torch.randn(shape, generator=generator, dtype=torch.float64)
    span = torch.where(bounded, high - low, 0.0)
    actions = torch.where(bounded, torch.where(bounded, low, 0.0) + span * uniform, normal)
    return list(actions.to(device=env.device, dtype=env_dtype(env)).unbind(0))


def check_reproducibility(env: Any, seed: int, num_steps: int) -> tuple[list[str], str]:
    """Two runs from ``reset(seed=seed)`` with the same actions give the same values."""
    actions = random_actions(env, num_steps, seed)
    first, second = _trace(env, seed, actions), _trace(env, seed, actions)
    difference = _first_difference(first, second)
    note = f"reset(seed={seed}) and {num_steps} steps, twice"
    if difference is None:
        return [], note
    return [f"{difference} between two runs from reset(seed={seed}) with the same actions"], note


def check_state_dict(env: Any, seed: int, num_steps: int) -> tuple[list[str], str]:
    """A state saved by ``state_dict()`` (through ``torch.save``) and loaded continues exactly."""
    if not callable(getattr(env, "state_dict", None)) or not callable(
        getattr(env, "load_state_dict", None)
    ):
        raise Skipped("no state_dict()/load_state_dict(); optional, needed for exact resume")
    failures = []
    actions = random_actions(env, 2 * num_steps + 2, seed + 1)
    warm, after, elsewhere = actions[:2], actions[2 : 2 + num_steps], actions[2 + num_steps :]
    with torch.no_grad():
        env.reset(seed=seed)
        for action in warm:
            env.step(action)
        saved = env.state_dict()
        try:
            buffer = io.BytesIO()
            torch.save(saved, buffer)
            buffer.seek(0)
            saved = torch.load(buffer, weights_only=True)
        except Exception as error:  # noqa: BLE001 - any failure is the env's
            failures.append(
                "state_dict() does not survive torch.save and torch.load(weights_only=True) "
                f"(as checkpoints need): {_first_line(error)}"
            )
        original = _steps(env, after)
        expected = env.state_dict()
        env.reset(seed=seed + 1)  # move the env elsewhere, then restore
        for action in elsewhere:
            env.step(action)
        env.load_state_dict(saved)
        restored = _steps(env, after)
        difference = _first_difference(original, restored)
        if difference is not None:
            failures.append(f"after load_state_dict(), {difference} from the run it was saved in")
        else:
            mismatch = _nested_difference(expected, env.state_dict(), "state_dict()")
            if mismatch is not None:
                failures.append(
                    f"after load_state_dict() and the same {num_steps} steps, {mismatch} "
                    "(it does not restore everything state_dict() saves)"
                )
    return failures, f"saved after 2 steps, restored elsewhere, {num_steps} steps compared"


def check_detach_state(
    env: Any, seed: int, num_steps: int, *, compare: bool = True
) -> tuple[list[str], str]:
    """``detach_state()`` cuts the graph, returns the current observation, keeps the episode.

    ``compare``: also compare the steps after it with a run without it (needs a
    reproducible env).
    """
    if not callable(getattr(env, "detach_state", None)):
        return ["detach_state: missing (the truncation boundary of training)"], ""
    failures: list[str] = []
    warm = [action.clone().requires_grad_() for action in random_actions(env, 2, seed + 2)]
    after = random_actions(env, num_steps, seed + 3)
    env.reset(seed=seed)
    for action in warm:
        observation = env.step(action)[0]
    elapsed = _elapsed(env)
    returned = env.detach_state()
    if not isinstance(returned, torch.Tensor) or returned.shape != observation.shape:
        got = tuple(returned.shape) if isinstance(returned, torch.Tensor) else returned
        failures.append(
            f"detach_state() returned {got!r:.60}, expected an observation like the last "
            f"step's, of shape {tuple(observation.shape)}"
        )
    else:
        if returned.requires_grad:
            failures.append("detach_state() returned an observation that still requires grad")
        row = _first_row_differing(returned.detach(), observation.detach())
        if row is not None:
            failures.append(
                f"detach_state() returned an observation that is not the last step's (row {row}): "
                "it must keep the episode going, not reset it"
            )
    if elapsed is not None and not torch.equal(elapsed, _elapsed(env)):
        failures.append("detach_state() changed elapsed_steps: it must keep the episode going")
    result = env.step(after[0].clone().requires_grad_())
    for name, output in (("reward", result[1]), ("observation", result[0])):
        if _depends_on(output, warm):
            failures.append(
                f"after detach_state(), the next step's {name} still depends on the actions "
                "before it: the graph is not cut"
            )
    if compare:
        with torch.no_grad():
            detached = _step_trace(0, result) + _steps(env, after[1:], start=1)
            env.reset(seed=seed)
            for action in warm:
                env.step(action.detach())
            plain = _steps(env, after)
        difference = _first_difference(plain, detached)
        if difference is not None:
            failures.append(
                f"after detach_state(), {difference} from a run without it: it must keep "
                "the episode going"
            )
    return failures, f"after 2 steps, then {num_steps} steps compared with a run without it"


def check_rollout(
    env: Any, seed: int, num_steps: int, contract: list[tuple[Problem, str]]
) -> tuple[list[str], str]:
    """A random-action rollout stays finite; each step's contract problems go to ``contract``.

    An env with a ``simulation_problems()`` method (a Newton env: contacts its
    buffer dropped) fails the rollout on each line it returns afterwards.
    """
    actions = random_actions(env, num_steps, seed + 4)
    finished = 0
    with torch.no_grad():
        env.reset(seed=seed)
        for step, action in enumerate(actions):
            result = env.step(action)
            problems = step_problems(env, result)
            contract += [(problem, f"rollout step {step}") for problem in problems]
            if any(problem.member in ("step()", "info") for problem in problems):
                return [], f"stopped at step {step}: see contract"
            bad = _non_finite(env, result)
            if bad is not None:
                return [f"step {step}, {bad}{env_hint(env)}"], ""
            finished += int((result[2] | result[3]).sum()) if _flags(result) else 0
    simulation_problems = getattr(env, "simulation_problems", None)  # an engine's own account
    failures = list(simulation_problems()) if callable(simulation_problems) else []
    if failures:
        return failures, ""
    return (
        [],
        f"{num_steps} steps, {finished} episodes finished over {env.num_envs} rows, all finite",
    )


def env_hint(env: Any) -> str:
    """``"; <the env's instability_hint()>"`` for a non-finite value, where the env has one."""
    hint = getattr(env, "instability_hint", None)
    return f"; {hint()}" if callable(hint) else ""


def _trace(env: Any, seed: int, actions: Sequence[torch.Tensor]) -> Trace:
    """Every value of a run from ``reset(seed=seed)`` with ``actions``, labelled."""
    with torch.no_grad():
        observation, _ = env.reset(seed=seed)
        return [(f"the observation of reset(seed={seed})", observation), *_steps(env, actions)]


def _steps(env: Any, actions: Sequence[torch.Tensor], start: int = 0) -> Trace:
    """The outputs of stepping ``env`` with ``actions``, labelled from step ``start``."""
    return [
        entry
        for index, action in enumerate(actions)
        for entry in _step_trace(start + index, env.step(action))
    ]


def _step_trace(index: int, result: tuple[Any, ...]) -> Trace:
    observation, reward, terminated, truncated, info = result
    values = (observation, reward, terminated, truncated, info["final_observation"])
    names = ("observation", "reward", "terminated", "truncated", "final_observation")
    return [(f"step {index}'s {n}", v.detach()) for n, v in zip(names, values, strict=True)]


def _first_difference(first: Trace, second: Trace) -> str | None:
    """``"step 2's reward differs (row 1)"`` for the first value that differs."""
    for (name, a), (_, b) in zip(first, second, strict=True):
        if a.shape != b.shape:
            return f"{name} has shape {tuple(a.shape)}, then {tuple(b.shape)}"
        row = _first_row_differing(a, b)
        if row is not None:
            return f"{name} differs (row {row})"
    return None


def _first_row_differing(a: torch.Tensor, b: torch.Tensor) -> int | None:
    if a.shape != b.shape:
        return 0
    same = a == b
    if a.is_floating_point() and b.is_floating_point():
        same = same | (torch.isnan(a) & torch.isnan(b))
    rows = ~same.reshape(same.shape[0], -1).all(dim=1) if same.ndim else ~same.reshape(1)
    return int(rows.nonzero()[0]) if rows.any() else None


def _nested_difference(a: Any, b: Any, path: str) -> str | None:
    """Where two ``state_dict()`` results differ (``"state_dict()['generator'] differs"``)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if set(a) != set(b):
            return f"{path} has entries {sorted(map(str, b))}, expected {sorted(map(str, a))}"
        for key in a:
            found = _nested_difference(a[key], b[key], f"{path}[{key!r}]")
            if found is not None:
                return found
        return None
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        same = a.shape == b.shape and _first_row_differing(a.cpu(), b.cpu()) is None
        return None if same else f"{path} differs"
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            found = _nested_difference(x, y, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    try:
        return None if bool(a == b) else f"{path} differs"
    except Exception:  # noqa: BLE001 - values that do not compare are different
        return f"{path} differs"


def _depends_on(output: Any, inputs: list[torch.Tensor]) -> bool:
    """Whether ``output`` has a nonzero gradient with respect to any of ``inputs``."""
    if not isinstance(output, torch.Tensor) or not output.requires_grad:
        return False
    grads = torch.autograd.grad(output.sum(), inputs, retain_graph=True, allow_unused=True)
    return any(grad is not None and bool(grad.ne(0).any()) for grad in grads)


def _elapsed(env: Any) -> torch.Tensor | None:
    elapsed = getattr(env, "elapsed_steps", None)
    return elapsed.clone() if isinstance(elapsed, torch.Tensor) else None


def _flags(result: tuple[Any, ...]) -> bool:
    return all(isinstance(flag, torch.Tensor) and flag.dtype == torch.bool for flag in result[2:4])


def _non_finite(env: Any, result: tuple[Any, ...]) -> str | None:
    """``"row 1: reward is nan; also not finite: state['v']"``, or ``None`` if all is finite."""
    observation, reward, _, _, info = result
    values = {"reward": reward, "observation": observation}
    if isinstance(info, Mapping):
        values["info['final_observation']"] = info.get("final_observation")
        metrics = info.get("metrics")
        for name, value in metrics.items() if isinstance(metrics, Mapping) else ():
            values[f"info['metrics'][{name!r}]"] = value
    state = getattr(env, "state", None)
    for key, value in state.items() if isinstance(state, Mapping) else ():
        values[f"state[{key!r}]"] = value
    rows: dict[str, torch.Tensor] = {}
    for member, value in values.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.ndim:
            bad = ~torch.isfinite(value.detach()).reshape(value.shape[0], -1).all(dim=1)
            if bad.any():
                rows[member] = bad
    if not rows:
        return None
    row = min(int(bad.nonzero()[0]) for bad in rows.values())
    members = [member for member, bad in rows.items() if row < bad.numel() and bad[row]]
    value = values[members[0]].detach().reshape(values[members[0]].shape[0], -1)[row]
    first = float(value[~torch.isfinite(value)][0])
    also = f"; also not finite: {', '.join(members[1:])}" if members[1:] else ""
    return f"row {row}: {members[0]} is {first}{also}"


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
