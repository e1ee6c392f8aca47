"""What a Newton env's actions drive: the DOFs of the named joints, their scale, and the
parsing of any per-DOF setting (a number or one value per DOF)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import newton
import numpy as np
import torch

from pathgrad.envs.newton.engine.kinematics import names_match

__all__ = [
    "action_scales",
    "actuated_dofs",
    "check_positive_integers",
    "control_range",
    "per_dof",
    "values_per_dof",
]


def actuated_dofs(
    world: Any, joint_labels: Sequence[str], joints: Sequence[str] | None
) -> list[int]:
    """The DOF indices that the actions drive, one per action entry.

    None of them (a passive model, or ``actuated_joints=[]``) gives an env
    without actions.

    Raises:
        ValueError: Naming a joint that does not exist, is ambiguous or is given
            twice, or ``actuated_joints`` given as one string.
    """
    starts, dims = list(world.joint_qd_start), list(world.joint_dof_dim)
    known = ", ".join(label.rsplit("/", 1)[-1] for label in joint_labels)
    if joints is None:
        free = {int(newton.JointType.FREE), int(newton.JointType.DISTANCE)}
        return [
            starts[j] + k
            for j, joint_type in enumerate(world.joint_type)
            if int(joint_type) not in free
            for k in range(sum(dims[j]))
        ]
    if isinstance(joints, str):
        raise ValueError(f"actuated_joints must be a list of joint names, got '{joints}'.")
    repeated = sorted({name for name in joints if list(joints).count(name) > 1})
    if repeated:
        raise ValueError(f"actuated joint '{repeated[0]}' is given twice.")
    dofs = []
    for name in joints:
        matches = [
            j
            for j, label in enumerate(joint_labels)
            if names_match(label, name)
        ]
        if len(matches) != 1:
            raise ValueError(
                f"actuated joint '{name}' {'is ambiguous' if matches else 'does not exist'}; "
                f"joints: {known}."
            )
        if sum(dims[matches[0]]) == 0:
            moving = [label.rsplit("/", 1)[-1] for label, dim in
                      zip(joint_labels, dims, strict=False) if sum(dim)]  # fmt: skip
            raise ValueError(
                f"actuated joint '{name}' is fixed (it has no DOF to drive); joints "
                f"with DOFs: {', '.join(moving) or 'none'}."
            )
        if int(world.joint_type[matches[0]]) == int(newton.JointType.FREE):
            warnings.warn(
                f"actuated joint '{name}' is a free joint: its 6 actions push and twist the "
                "base directly, with forces from nowhere (a legged robot moves by its own "
                "joints); leave it out of actuated_joints unless the base is meant to be "
                "driven (a thruster, a floating hand).",
                UserWarning,
                stacklevel=3,
            )
        dofs += [starts[matches[0]] + k for k in range(sum(dims[matches[0]]))]
    return dofs


def values_per_dof(
    name: str, value: Any, count: int, *, unit: str = "DOF", dtype: Any = np.float64
) -> np.ndarray:
    """``value`` (a number, or one per ``unit``) as ``count`` numbers (a number is broadcast).

    Raises:
        ValueError: For a non-number or a wrong length, naming ``name``.
    """
    expected = f"a number or {count} values (one per {unit})"
    try:
        values = np.asarray(value, dtype=dtype)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be {expected}, got {value!r}.") from None
    if values.ndim > 1 or (values.ndim == 1 and values.shape[0] != count):
        raise ValueError(f"{name} must be {expected}, got {value!r}.")
    return np.broadcast_to(values, (count,))


def action_scales(action_scale: Any, action_dim: int, device: torch.device) -> torch.Tensor:
    """``action_scale`` (a number or one per actuated DOF) as a ``[action_dim]`` tensor.

    Raises:
        ValueError: For a wrong length, a non-number, or a NaN, infinite or zero scale.
    """
    scale = values_per_dof(
        "action_scale", action_scale, action_dim, unit="actuated DOF", dtype=np.float32
    )
    if not np.all(np.isfinite(scale) & (scale != 0.0)):
        raise ValueError(
            f"action_scale must be finite and non-zero (an action scaled by 0 moves nothing; "
            f"a negative scale reverses its DOF), got {action_scale!r}."
        )
    return torch.tensor(scale.copy(), device=device)


def control_range(
    motors: Sequence[Any], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The motors' ``ctrlrange`` as (low, high) per action entry (unbounded where a motor
    has none), or None when none of them has one."""
    if not any(motor.ctrlrange is not None for motor in motors):
        return None
    bounds = [motor.ctrlrange or (-float("inf"), float("inf")) for motor in motors]
    low, high = zip(*bounds, strict=True)
    as_tensor = lambda values: torch.tensor(values, dtype=torch.float32, device=device)  # noqa: E731
    return as_tensor(low), as_tensor(high)


def per_dof(name: str, value: float | Sequence[float], dofs: int) -> list[float]:
    """``value`` as one non-negative float per DOF (a scalar is broadcast)."""
    values = values_per_dof(name, value, dofs)
    if not np.all(np.isfinite(values) & (values >= 0.0)):
        raise ValueError(f"{name} must be finite and non-negative, got {value!r}.")
    return values.tolist()


def check_positive_integers(**values: Any) -> None:
    """Raise ``ValueError`` naming the first of ``values`` that is not a positive integer."""
    for name, value in values.items():
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")
