"""What a Newton env's actions drive: the DOFs of the named joints, and their scale."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import newton
import numpy as np
import torch

__all__ = ["action_scales", "actuated_dofs"]


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
            if label == name or label.rsplit("/", 1)[-1] == name
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


def action_scales(action_scale: Any, action_dim: int, device: torch.device) -> torch.Tensor:
    """``action_scale`` (a number or one per actuated DOF) as a ``[action_dim]`` tensor.

    Raises:
        ValueError: For a wrong length, a non-number, or a NaN, infinite or zero scale.
    """
    expected = f"a number or {action_dim} values (one per actuated DOF)"
    try:
        scale = np.asarray(action_scale, dtype=np.float32)
    except (TypeError, ValueError):
        raise ValueError(f"action_scale must be {expected}, got {action_scale!r}.") from None
    if scale.ndim > 1 or (scale.ndim == 1 and scale.shape[0] != action_dim):
        raise ValueError(f"action_scale must be {expected}, got {action_scale!r}.")
    if not np.all(np.isfinite(scale) & (scale != 0.0)):
        raise ValueError(
            f"action_scale must be finite and non-zero (an action scaled by 0 moves nothing; "
            f"a negative scale reverses its DOF), got {action_scale!r}."
        )
    scale = np.broadcast_to(scale, (action_dim,))
    return torch.tensor(scale.copy(), device=device)
