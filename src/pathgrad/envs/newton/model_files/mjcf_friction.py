"""An MJCF file's joint friction loss, as close as a force of the state comes to MuJoCo's.

MuJoCo's ``frictionloss`` is dry friction, a soft constraint bounded by the friction loss
``F`` (N m on a hinge, N on a slide). With the joint's velocity ``v``, its effective mass
``m`` at ``qpos0`` (MuJoCo's ``1 / dof_invweight0``) and the acceleration ``a`` every other
force would give it, the constraint's force is

    ``clamp(-d m (a + b v), -F, F)``,  ``b = 2 / (dmax tc)``

from the joint's ``solreffriction`` (time constant ``tc``, default 0.02 s, at least two
timesteps under ``refsafe``; a negative first number: ``b = -solref[1] / dmax``) and
``solimpfriction`` (``d`` its first number, 0.9 by default, ``dmax`` its second, 0.95).
pathgrad applies ``clamp(-d m b v, -F, F)``: a damper that saturates at the friction loss,
computed at every timestep of the file (:class:`FrictionLoss`). Sliding, it is MuJoCo's
force (``b v`` outweighs ``a`` there: ``b`` is about 100/s by default); what it leaves out
is the ``-d m a`` that lets MuJoCo's constraint hold a joint still against a load below
``F``: a loaded joint creeps at ``load / (d m b)`` instead. Ball and free joints' friction
loss is left out (named at construction).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from pathgrad.envs.newton.model_files.mjcf_limits import LimitReference

__all__ = ["FrictionLoss", "friction_damping"]

MUJOCO_SOLIMP = (0.9, 0.95)  # MuJoCo's default solimp: its impedance at 0 and its largest


def friction_damping(
    solref: str | None, solimp: str | None, mass: float, timestep: float | None,
    refsafe: bool, joint: str,
) -> float:  # fmt: skip
    """The damping ``d m b`` (N m s/rad or N s/m) of a joint's friction loss while it slips.

    Raises:
        ValueError: For a ``solreffriction`` or ``solimpfriction`` that MuJoCo would reject.
    """
    reference = LimitReference.parse(solref, joint, attribute="solreffriction")
    numbers = _numbers(solimp, joint)
    impedance, largest = (numbers + list(MUJOCO_SOLIMP)[len(numbers):])[:2]
    if reference.first < 0.0:  # direct: -stiffness, -damping
        rate = -min(reference.second, 0.0) / largest
    else:
        _, per_mass = reference.per_unit_mass(timestep, refsafe)  # 2 / tc
        rate = per_mass / largest
    return impedance * mass * rate


def _numbers(text: str | None, joint: str) -> list[float]:
    if text is None:
        return []
    try:
        values = [float(value) for value in text.split()]
    except ValueError:
        values = []
    if not values or not all(0.0 < value < 1.0 for value in values[:2]):
        raise ValueError(
            f"joint '{joint}': solimpfriction={text!r} must start with two numbers between 0 "
            "and 1 (the impedance at 0 and its largest value)."
        )
    return values


class FrictionLoss:
    """The generalized forces ``[N, dofs]`` of the file's hinges' and slides' friction loss.

    Args:
        dofs: Width of ``joint_qd``.
        columns: Each rubbing joint's ``joint_qd`` column.
        limits: Each one's friction loss ``F``.
        damping: Each one's damping while it slips (:func:`friction_damping`).
        device: Torch device.
    """

    def __init__(
        self, dofs: int, columns: Sequence[int], limits: Sequence[float],
        damping: Sequence[float], device: Any,
    ) -> None:  # fmt: skip
        self.dofs = dofs
        self.columns = torch.as_tensor(list(columns), dtype=torch.long, device=device)
        self.limits = torch.as_tensor(list(limits), dtype=torch.float32, device=device)
        self.damping = torch.as_tensor(list(damping), dtype=torch.float32, device=device)

    def joint_forces(self, joint_qd: torch.Tensor) -> torch.Tensor:
        velocity = joint_qd[:, self.columns]
        force = torch.clamp(-self.damping * velocity, -self.limits, self.limits)
        return joint_qd.new_zeros(joint_qd.shape[0], self.dofs).index_add(1, self.columns, force)

