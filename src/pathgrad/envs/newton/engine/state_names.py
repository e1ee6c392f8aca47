"""What each column of a Newton env's state is: the joint (or body) it belongs to.

Messages about the state (a non-finite initial state, :mod:`pathgrad.core.env_contract`)
name the joint of a ``joint_q`` coordinate or a ``joint_qd`` DOF, and the body of a
``body_q`` / ``body_qd`` column, instead of an index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["column_labels", "state_column_name"]


def _short(label: str) -> str:
    return str(label).rsplit("/", 1)[-1]


def column_labels(starts: Sequence[int], total: int, labels: Sequence[str]) -> list[str]:
    """One label per column of a joint-major array: the joint's name, with the column's
    place in the joint (``hip[2]``) where the joint has several."""
    bounds = [int(start) for start in starts] + [int(total)]
    names: list[str] = []
    for joint, label in enumerate(labels):
        count = bounds[joint + 1] - bounds[joint]
        names += [_short(label)] if count == 1 else [f"{_short(label)}[{k}]" for k in range(count)]
    return names


def state_column_name(env: Any, key: str, column: int) -> str | None:
    """``"coordinate of joint 'hip'"`` for column ``column`` of ``env.state[key]``."""
    if key == "joint_q" and column < len(env.coordinate_labels):
        return f"coordinate of joint '{env.coordinate_labels[column]}'"
    if key == "joint_qd" and column < len(env.dof_labels):
        return f"velocity of joint '{env.dof_labels[column]}'"
    width = {"body_q": 7, "body_qd": 6}.get(key)
    if width is not None and column // width < len(env.body_labels):
        what = "pose" if width == 7 else "twist"
        return f"{what} of body '{_short(env.body_labels[column // width])}'"
    return None
