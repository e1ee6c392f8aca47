"""The damping of an MJCF file's free joints, which Featherstone does not apply.

MuJoCo damps a free joint in its own velocity coordinates: ``-d v_o`` on the velocity of
the body's origin (world frame) and ``-d w_b`` on its angular velocity (body frame), ``d``
the joint's ``damping``. Newton's free joint moves with the centre of mass's velocity ``v``
and the world angular velocity ``w`` and takes a force at the centre of mass and a torque
about it, so the same damping is, with ``r`` the centre of mass from the origin (world):
``v_o = v - w x r``, force ``f = -d v_o``, torque ``f x r - d w``
(:class:`FreeJointDamping`, computed at every timestep of the file). A light object's
damping is stiff (the Shadow hand's pen: 0.01 on 1.3e-6 kg m^2 about its axis, explicit only
below 0.27 ms), so where the file's damping is implicit (``implicit_damping``) the free
joint's DOFs also get ``h d`` of armature, ``h`` the step over which the force is held:
``(M + h d) v' = M v + h f``, MuJoCo's implicit Euler, exact where the centre of mass is
at the origin (elsewhere the coupling of ``r`` stays explicit).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["FreeJointDamping"]


class FreeJointDamping:
    """The generalized forces ``[N, dofs]`` of free joints' damping.

    Args:
        dofs: Width of ``joint_qd``.
        joints: Each damped free joint's first ``joint_q`` coordinate, first ``joint_qd``
            column, damping and centre of mass in its body frame.
        device: Torch device.
    """

    def __init__(
        self, dofs: int, joints: Sequence[tuple[int, int, float, Sequence[float]]], device: Any
    ) -> None:
        self.dofs = dofs
        self.coordinates = [q for q, _, _, _ in joints]
        self.columns = [qd for _, qd, _, _ in joints]
        self.damping = [float(d) for _, _, d, _ in joints]
        self.centres = torch.tensor([list(c) for _, _, _, c in joints], dtype=torch.float32,
                                    device=device)  # fmt: skip
        self._columns = [torch.arange(qd, qd + 6, device=device) for qd in self.columns]

    def joint_forces(self, joint_q: torch.Tensor, joint_qd: torch.Tensor) -> torch.Tensor:
        forces = joint_qd.new_zeros(joint_qd.shape[0], self.dofs)
        for k, (q, qd, damping) in enumerate(zip(self.coordinates, self.columns, self.damping,
                                                 strict=True)):  # fmt: skip
            xyzw = joint_q[:, q + 3 : q + 7]
            lever = _rotate(xyzw, self.centres[k].to(joint_q.dtype).expand(len(joint_q), 3))
            velocity, spin = joint_qd[:, qd : qd + 3], joint_qd[:, qd + 3 : qd + 6]
            force = -damping * (velocity - torch.cross(spin, lever, dim=-1))
            torque = torch.cross(force, lever, dim=-1) - damping * spin
            forces = forces.index_add(1, self._columns[k], torch.cat([force, torque], -1))
        return forces


def _rotate(xyzw: torch.Tensor, vector: torch.Tensor) -> torch.Tensor:
    """``vector`` rotated by the unit quaternions ``xyzw`` (Newton's order), row by row."""
    xyz, w = xyzw[:, :3], xyzw[:, 3:]
    twice = 2.0 * torch.cross(xyz, vector, dim=-1)
    return vector + w * twice + torch.cross(xyz, twice, dim=-1)
