"""The env contract member by member: what each must be, and one line when it is not.

Every problem is a :class:`Problem`: the member (``reward``,
``info['metrics']['success']``, ``state['velocity']``) and what was expected
against what came, as ``"reward: expected shape (4,), got (4, 1)"``. The
trainer's collector checks the first reset and step of every env it drives
(:func:`check_first_result`, once: nothing later); :mod:`pathgrad.testing`
checks all of it.
"""

from __future__ import annotations

import dataclasses
import numbers
import warnings
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from gymnasium.spaces import Box
from torch.autograd.gradcheck import GradcheckError

__all__ = [
    "EnvCheckError",
    "EnvContractError",
    "check_first_result",
    "check_reward_path",
    "check_space_widths",
    "Problem",
    "action_dim",
    "env_dtype",
    "env_problems",
    "observation_dim",
    "observation_shape",
    "reset_problems",
    "state_problems",
    "step_problems",
    "tensor_problems",
]


class EnvCheckError(GradcheckError):
    """An env failed a check (a broken contract, a cut gradient path, a non-finite value).

    A :class:`~torch.autograd.gradcheck.GradcheckError`, as a wrong gradient is.
    """


class EnvContractError(ValueError):
    """An env's reset or step broke the contract the trainer relies on (one line)."""


# What training reads of a reset or a step; metrics and state are checked by pathgrad.testing.
_TRAINING_MEMBERS = ("reset()", "step()", "observation", "reward", "terminated", "truncated",
                     "info['final_observation']", "reset() info")  # fmt: skip


def check_first_result(
    env: Any,
    kind: str,
    result: Any,
    *,
    needs_final_observation: bool = True,
    policy_dtype: torch.dtype | None = None,
) -> None:
    """Check what the first ``reset`` or ``step`` (``kind``) of ``env`` returned.

    It judges what training needs, as the reference does: shapes, devices and
    flags, and an observation in the dtype of the policy's parameters
    (``policy_dtype``, where the caller has the policy). A tensor whose dtype
    differs from the one the env declares (``env.dtype`` or its observation
    space's) trains all the same: one warning per env, not an error.
    ``info['final_observation']`` may be missing unless ``needs_final_observation``
    (the critic algorithms bootstrap from it; APG does not, nor do the reference's
    envs always give it). Given, it is checked either way.

    Raises:
        EnvContractError: Naming the env class, the member, what was expected
            and what came, for the first problem (and how many more there are).
    """
    found = reset_problems(env, result) if kind == "reset" else step_problems(env, result)
    problems = [
        problem
        for problem in found
        if problem.member in _TRAINING_MEMBERS or problem.text.startswith(_NOT_FINITE)
    ]
    if not needs_final_observation:
        missing = Problem("info['final_observation']", "missing")
        problems = [problem for problem in problems if problem != missing]
    declared = [problem for problem in problems if _DECLARED_DTYPE in problem.text]
    problems = [problem for problem in problems if _DECLARED_DTYPE not in problem.text]
    observation = result[0] if isinstance(result, tuple) and result else None
    if (
        policy_dtype is not None
        and isinstance(observation, torch.Tensor)
        and observation.is_floating_point()
        and observation.dtype != policy_dtype
    ):
        problems.insert(0, Problem("observation", (
            f"dtype {observation.dtype}, but the policy's parameters are {policy_dtype}: "
            "build the policy in the observations' dtype (or emit observations in the "
            "policy's)"
        )))  # fmt: skip
    if problems:
        more = f" (and {len(problems) - 1} more: `pathgrad check-env` lists them)"
        raise EnvContractError(
            f"{type(env).__name__}.{kind}() broke the env contract: {problems[0]}"
            f"{more if len(problems) > 1 else ''}."
        )
    if declared and _first_warning(env):
        warnings.warn(
            f"{type(env).__name__}.{kind}(): {declared[0]}; it trains in the dtype it emits, "
            "but a space (or env.dtype) that says what the env returns avoids surprises.",
            UserWarning,
            stacklevel=3,
        )


_DECLARED_DTYPE = "(the env's dtype)"  # in a dtype problem measured against the declared dtype
_WARNED = weakref.WeakSet()  # envs already warned about their declared dtype
_WARNED_IDS: set[int] = set()  # ... those that take no weak reference


def _first_warning(env: Any) -> bool:
    """Whether ``env`` has not been warned about its declared dtype yet (and now is)."""
    try:
        if env in _WARNED:
            return False
        _WARNED.add(env)
    except TypeError:
        if id(env) in _WARNED_IDS:
            return False
        _WARNED_IDS.add(id(env))
    return True


def check_reward_path(env: Any, actions: list[Any], rewards: list[Any]) -> bool:
    """Check that some reward of a window has a gradient path to its actions.

    Returns whether the check could run (grad mode on and actions that
    require grad); a window without one says nothing.

    Raises:
        EnvContractError: When no reward of the window requires grad: the
            return has no gradient for the policy (a detached reward, ``.item()``
            or NumPy in ``step``).
    """
    if not torch.is_grad_enabled() or not any(
        isinstance(action, torch.Tensor) and action.requires_grad for action in actions
    ):
        return False
    if not any(isinstance(reward, torch.Tensor) and reward.requires_grad for reward in rewards):
        raise EnvContractError(
            f"{type(env).__name__}.step() broke the env contract: reward: no reward of the "
            f"first {len(rewards)} steps has a gradient path to the actions (detached, "
            "`.item()`, or rebuilt from NumPy?), so the return gives the policy no gradient; "
            "`pathgrad check-env` names the step."
        )
    return True


@dataclasses.dataclass(frozen=True)
class Problem:
    """One broken rule: the member it concerns and what is wrong."""

    member: str
    text: str

    def __str__(self) -> str:
        return f"{self.member}: {self.text}"


def env_dtype(env: Any) -> torch.dtype | None:
    """The env's dtype: ``env.dtype``, else that of its observation space."""
    dtype = getattr(env, "dtype", None)
    if isinstance(dtype, torch.dtype):
        return dtype
    return _torch_dtype(getattr(getattr(env, "single_observation_space", None), "dtype", None))


def check_space_widths(env: Any) -> None:
    """``env.observation_dim`` (at least 1) and ``env.action_dim`` (at least 0) are integers.

    Raises:
        EnvContractError: Naming the class attribute and what it holds.
    """
    for name, least in (("observation_dim", 1), ("action_dim", 0)):
        width = getattr(env, name, None)
        if isinstance(width, bool) or not isinstance(width, numbers.Integral) or width < least:
            raise EnvContractError(
                f"{type(env).__name__}.{name} must be an integer of at least {least} (the "
                f"width of one {name.removesuffix('_dim')}), got {width!r}."
            )


def observation_dim(env: Any) -> int | None:
    """Width of one observation (its space's shape), ``None`` if the space is not a 1-D Box."""
    return _box_width(getattr(env, "single_observation_space", None))


def action_dim(env: Any) -> int | None:
    """Width of one action (its space's shape), ``None`` if the space is not a 1-D Box."""
    return _box_width(getattr(env, "single_action_space", None))


def env_problems(env: Any) -> list[Problem]:
    """The env's attributes: sizes, device, spaces, dtype and time limit."""
    problems = []
    num_envs = getattr(env, "num_envs", None)
    if not _positive_int(num_envs):
        problems.append(Problem("num_envs", f"expected a positive int, got {num_envs!r}"))
    if not isinstance(getattr(env, "device", None), torch.device):
        problems.append(Problem("device", f"expected a torch.device, got {_kind(env, 'device')}"))
    dtype = env_dtype(env)
    for name in ("single_observation_space", "single_action_space"):
        space = getattr(env, name, None)
        if _box_width(space) is None:
            problems.append(Problem(name, f"expected a 1-D gymnasium Box, got {space!r}"))
        elif dtype is not None and _torch_dtype(space.dtype) != dtype:
            problems.append(
                Problem(name, f"expected dtype {_np_name(dtype)} (the env's), got {space.dtype}")
            )
    steps = getattr(env, "max_episode_steps", None)
    if not _positive_int(steps):
        problems.append(Problem("max_episode_steps", f"expected a positive int, got {steps!r}"))
    if dtype not in (torch.float32, torch.float64):
        problems.append(Problem("dtype", f"expected torch.float32 or torch.float64, got {dtype}"))
    mask = getattr(env, "observation_normalize_mask", None)
    width = observation_dim(env)
    entries = list(mask) if isinstance(mask, (list, tuple, np.ndarray)) else mask
    if entries is not None and (
        not isinstance(entries, list)
        or len(entries) != width
        or not all(isinstance(m, (bool, np.bool_)) for m in entries)
    ):
        problems.append(
            Problem("observation_normalize_mask", f"expected {width} bools, got {mask!r:.80}")
        )
    observation_size = getattr(env, "observation_dim", None)
    if isinstance(observation_size, int) and width is not None and observation_size != width:
        problems.append(
            Problem("observation_dim", f"expected {width} (the space's), got {observation_size}")
        )
    return problems


def reset_problems(env: Any, result: Any) -> list[Problem]:
    """What ``reset`` returned: ``(observation [N, D], info mapping)``."""
    if not isinstance(result, tuple) or len(result) != 2:
        return [Problem("reset()", f"expected a tuple (observation, info), got {_summary(result)}")]
    observation, info = result
    problems = _observation_problems(env, "observation", observation)
    if not isinstance(info, Mapping):
        problems.append(Problem("reset() info", f"expected a mapping, got {_summary(info)}"))
    return _non_finite_start(env, observation) + problems + state_problems(env)


_NOT_FINITE = "not finite"  # a problem of a first reset that nothing can train from


def _non_finite_start(env: Any, observation: Any) -> list[Problem]:
    """A first reset's non-finite entries: the carried state's NaNs first (the cause, named
    by the env's ``state_entry_name(key, column)`` where it has one; an infinite entry may be
    a record's sentinel), then the observation's NaNs and infinities."""
    state = getattr(env, "state", None)
    members = list(state.items()) if isinstance(state, Mapping) else []
    namer = getattr(env, "state_entry_name", None)
    problems = []
    for key, value in [*((f"state[{k!r}]", v) for k, v in members), ("observation", observation)]:
        if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.ndim == 0:
            continue
        flat = value.detach().reshape(value.shape[0], -1)
        bad = torch.isnan(flat) if key != "observation" else ~torch.isfinite(flat)
        if not bool(bad.any()):
            continue
        row, column = (int(i) for i in bad.nonzero()[0])
        number = float(flat[row, column])
        rows = int(bad.any(1).sum())
        name = namer(key[7:-2], column) if callable(namer) and key != "observation" else None
        where = f"entry {column}" + (f" ({name})" if name else "")
        problems.append(Problem(key, (
            f"{_NOT_FINITE} ({number}) in row {row}, {where}; {rows} of {value.shape[0]} rows "
            "have such entries: the initial state must be finite"
        )))  # fmt: skip
    return problems[:1] if problems and problems[0].member != "observation" else problems


def step_problems(env: Any, result: Any) -> list[Problem]:
    """What ``step`` returned, its info's ``final_observation`` and ``metrics``, and the state."""
    if not isinstance(result, tuple) or len(result) != 5:
        return [
            Problem(
                "step()",
                "expected a tuple (observation, reward, terminated, truncated, info), "
                f"got {_summary(result)}",
            )
        ]
    observation, reward, terminated, truncated, info = result
    rows = (_rows(env),)
    problems = _observation_problems(env, "observation", observation)
    problems += tensor_problems(env, "reward", reward, rows)
    problems += tensor_problems(env, "terminated", terminated, rows, dtype=torch.bool)
    problems += tensor_problems(env, "truncated", truncated, rows, dtype=torch.bool)
    if not isinstance(info, Mapping):
        return [*problems, Problem("info", f"expected a mapping, got {_summary(info)}")]
    for key in ("final_observation", "metrics"):
        if key not in info:
            problems.append(Problem(f"info['{key}']", "missing"))
    if "final_observation" in info:
        problems += _observation_problems(
            env, "info['final_observation']", info["final_observation"]
        )
    metrics = info.get("metrics", {})
    if not isinstance(metrics, Mapping):
        problems.append(Problem("info['metrics']", f"expected a mapping, got {_summary(metrics)}"))
        metrics = {}
    for name, value in metrics.items():
        problems += _metric(env, f"info['metrics'][{name!r}]", value)
    return problems + state_problems(env)


def _observation_problems(env: Any, member: str, value: Any) -> list[Problem]:
    """An observation's problems; a wrong width ends with the env's ``observation_dim_note``
    (where the expected width came from), when it has one."""
    problems = tensor_problems(env, member, value, observation_shape(env))
    note = getattr(env, "observation_dim_note", None)
    width = isinstance(value, torch.Tensor) and value.ndim == 2  # a flat one lacks its rows
    if problems and isinstance(note, str) and width and "expected shape" in problems[0].text:
        problems[0] = Problem(member, f"{problems[0].text}; {note}")
    return problems


def state_problems(env: Any) -> list[Problem]:
    """The carried state (``env.state``, where the env has one): ``[N, ...]`` tensors."""
    state = getattr(env, "state", None)
    if not isinstance(state, Mapping):
        return []
    problems = []
    for key, value in state.items():
        member = f"state[{key!r}]"
        if not isinstance(value, torch.Tensor) or value.ndim == 0:
            problems.append(Problem(member, f"expected an [N, ...] tensor, got {_summary(value)}"))
            continue
        shape = (_rows(env), *value.shape[1:])
        dtype = env_dtype(env) if value.is_floating_point() else None
        problems += tensor_problems(env, member, value, shape, dtype=dtype)
    return problems


def tensor_problems(
    env: Any,
    member: str,
    value: Any,
    shape: tuple[int | None, ...],
    *,
    dtype: torch.dtype | None | str = "env",
) -> list[Problem]:
    """``value`` must be a tensor of ``shape`` (``None``: any size), ``dtype`` and the env's device.

    ``dtype="env"`` stands for the env's dtype; ``None`` accepts any.
    """
    if not isinstance(value, torch.Tensor):
        return [Problem(member, f"expected a torch.Tensor, got {_summary(value)}")]
    got = tuple(value.shape)
    if len(got) != len(shape) or any(
        w is not None and w != g for w, g in zip(shape, got, strict=True)
    ):
        return [Problem(member, f"expected shape {_shape(shape)}, got {got}")]
    want = env_dtype(env) if dtype == "env" else dtype
    if want is not None and value.dtype != want:
        mine = " (the env's dtype)" if dtype == "env" else ""
        return [Problem(member, f"expected dtype {want}{mine}, got {value.dtype}")]
    device = getattr(env, "device", None)
    if isinstance(device, torch.device) and not _same_device(value.device, device):
        return [Problem(member, f"expected device {device} (the env's), got {value.device}")]
    return []


def _metric(env: Any, member: str, value: Any) -> list[Problem]:
    """A metric: ``[N]`` or ``[N, k]``, in the env's dtype or bool."""
    if not isinstance(value, torch.Tensor) or value.ndim not in (1, 2):
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else _summary(value)
        return [Problem(member, f"expected an [N] or [N, k] tensor, got {shape}")]
    dtype = torch.bool if value.dtype == torch.bool else "env"
    return tensor_problems(env, member, value, (_rows(env), *value.shape[1:]), dtype=dtype)


def observation_shape(env: Any) -> tuple[int | None, ...]:
    """``(N, D)`` of a batch of observations (``None`` where the env does not say)."""
    return (_rows(env), observation_dim(env))


def _rows(env: Any) -> int | None:
    num_envs = getattr(env, "num_envs", None)
    return num_envs if _positive_int(num_envs) else None


def _box_width(space: Any) -> int | None:
    if not isinstance(space, Box) or len(space.shape) != 1:
        return None
    return int(space.shape[0])


def _torch_dtype(dtype: Any) -> torch.dtype | None:
    if dtype is None:
        return None
    try:
        return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype
    except (TypeError, ValueError):
        return None


def _positive_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value > 0


def _same_device(got: torch.device, want: torch.device) -> bool:
    return got.type == want.type and (want.index is None or got.index == want.index)


def _shape(shape: tuple[int | None, ...]) -> str:
    text = ", ".join("?" if size is None else str(size) for size in shape)
    return f"({text},)" if len(shape) == 1 else f"({text})"


def _np_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _summary(value: Any) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return type(value).__name__


def _kind(owner: Any, name: str) -> str:
    return _summary(getattr(owner, name)) if hasattr(owner, name) else "nothing"
