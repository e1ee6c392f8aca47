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
at the origin (elsewhere the coupling of ``r`` stays explicit). Where it is explicit the
force is stable only while ``h`` times the fastest rate of ``M^-1 D`` stays below 2
(:func:`explicit_damping_bound`); substeps do not help, the force being held over ``h``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

__all__ = [
    "FreeJointDamping",
    "damping_matrix",
    "explicit_damping_bound",
    "unstable_free_damping",
]


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


def damping_matrix(damping: float, centre: Sequence[float]) -> np.ndarray:
    """``D`` of a free joint's damping force ``-D [v; w]`` in Newton's coordinates:
    ``d [[1, C], [-C, 1 - C C]]`` (symmetric, ``C`` being skew), ``C`` the cross-product
    matrix of ``centre`` (the centre of mass from the body's origin: ``C x = centre x x``)."""
    cross = np.cross(np.asarray(centre, dtype=np.float64), np.eye(3)).T  # C x = centre x x
    return damping * np.block([[np.eye(3), cross], [-cross, np.eye(3) - cross @ cross]])


def explicit_damping_bound(
    damping: float, mass: float, inertia: np.ndarray, centre: Sequence[float]
) -> float:
    """The longest step over which a free joint's damping, held explicitly, stays stable:
    ``h x max eig(M^-1 D) < 2`` with ``M = diag(m, I)`` (``inertia`` about the centre of
    mass) and ``D`` of :func:`damping_matrix`."""
    masses = np.block([[mass * np.eye(3), np.zeros((3, 3))],
                       [np.zeros((3, 3)), np.asarray(inertia, dtype=np.float64)]])  # fmt: skip
    rates = np.linalg.eigvals(np.linalg.solve(masses, damping_matrix(damping, centre)))
    fastest = float(rates.real.max())
    return 2.0 / fastest if fastest > 0.0 else float("inf")


def unstable_free_damping(model: Any, held: FreeJointDamping, step: float) -> str | None:
    """A clause naming the free joints whose explicit damping ``held`` over ``step`` (s)
    diverges, with their bounds (None where every one is stable). ``model``: Newton's."""
    starts, types = model.joint_qd_start.numpy(), model.joint_type.numpy()
    child, masses = model.joint_child.numpy(), model.body_mass.numpy()
    inertias = model.body_inertia.numpy()
    found = []
    for k, (column, damping) in enumerate(zip(held.columns, held.damping, strict=True)):
        joint = next(j for j in range(len(types)) if int(starts[j]) == column)
        body = int(child[joint])
        bound = explicit_damping_bound(damping, float(masses[body]), inertias[body],
                                       held.centres[k].tolist())  # fmt: skip
        if step >= bound:
            name = str(model.body_label[body]).rsplit("/", 1)[-1]
            found.append(f"body '{name}' (damping {damping:g} on {float(masses[body]):.3g} kg, "
                         f"stable below {bound:.3g} s)")  # fmt: skip
    if not found:
        return None
    return (
        f"the damping of free joints, applied explicitly and held over each {step:.3g} s step, "
        f"diverges on {', '.join(found)}: substeps do not help; pass implicit_damping=True "
        "(MuJoCo's Euler) or a shorter file timestep"
    )
