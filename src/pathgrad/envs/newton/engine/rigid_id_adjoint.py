"""The adjoint of Featherstone's inverse-dynamics pass, from a lighter equivalent kernel.

Each substep of Newton's Featherstone runs ``eval_rigid_id`` (one thread per
articulation, joints in order): every body's spatial velocity and acceleration
from its parent's and its joint's, its spatial inertia moved to the solve frame
as ``T^T I T`` with two 6x6 products (``body_I_s``), and its bias force. Warp
differentiates that kernel as written: on the CPU its adjoint took 0.65 ms per
64 Ants against 0.15 ms forward, the largest kernel adjoint of a substep that
reuses the mass matrix on ``DiffRLAnt``; this module's takes 0.6-0.7 times as
long (``benchmarks/rigid_id_adjoint.py``, docs/benchmarks.md).

:func:`light_rigid_id` computes the same outputs but ``body_I_s`` without forming
6x6 matrices: ``T^T I T x`` is ``x`` moved into the body's frame, multiplied by
its inertia and moved back. Its Warp adjoint differentiates the same function
(written as Newton composes it, so that even the quaternion's component along
itself agrees); :func:`replace_rigid_id_adjoints` puts it in place of Newton's
kernel's adjoint on a recorded ``wp.Tape`` wherever no launch of the tape reads
``body_I_s`` (only the mass matrix does, in the substeps that evaluate it), so
that ``body_I_s``'s adjoint is zero. The forward launch stays Newton's. The two
adjoints agree within float32 rounding, tested in
``tests/envs/newton/test_rigid_id_adjoint.py``.

Joint types covered: revolute, prismatic, fixed, free, ball, and D6 with at most
one angular axis (the planar robots' roots). A model with any other joint type
(D6 with two or three angular axes, distance, rod) keeps Warp's adjoint.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import warp as wp
from newton import JointType

__all__ = [
    "RigidIdAdjoint",
    "covers_joint_types",
    "launch_on_recorded",
    "light_rigid_id",
    "recorded_rigid_id_launches",
    "replace_rigid_id_adjoints",
]

_KERNEL_NAME = "eval_rigid_id"
_PRISMATIC = wp.constant(int(JointType.PRISMATIC))
_REVOLUTE = wp.constant(int(JointType.REVOLUTE))
_BALL = wp.constant(int(JointType.BALL))
_FREE = wp.constant(int(JointType.FREE))
_D6 = wp.constant(int(JointType.D6))
# Joint types computed whatever their axes (D6: with at most one angular axis).
_COVERED = tuple(int(t) for t in (JointType.PRISMATIC, JointType.REVOLUTE, JointType.BALL,
                                  JointType.FIXED, JointType.FREE))  # fmt: skip


@wp.func
def _twist(t: wp.transform, lin: wp.vec3, ang: wp.vec3):
    """A twist ``(lin, ang)`` moved by ``t``: ``w' = R w``, ``v' = R v + p x w'``."""
    q = wp.transform_get_rotation(t)
    w = wp.quat_rotate(q, ang)
    v = wp.quat_rotate(q, lin) + wp.cross(wp.transform_get_translation(t), w)
    return wp.spatial_vector(v, w)


@wp.func
def _apply_inertia(I_m: wp.spatial_matrix, q: wp.quat, c: wp.vec3, x: wp.spatial_vector):
    """``T^T I_m T x``, ``T`` the motion transform into the frame at ``c`` rotated by ``q``:
    the wrench, about the solve origin, of a body of centre-of-mass inertia ``I_m`` moving
    with the twist ``x``. Written as Newton's ``transform_spatial_inertia`` composes it
    (``p = -R^T c``, no orthogonality used), so that the adjoint also agrees for the
    quaternion's component along itself, where ``R(q)`` is not a rotation."""
    p = -wp.quat_rotate_inv(q, c)
    w = wp.quat_rotate_inv(q, wp.spatial_bottom(x))
    y = I_m * wp.spatial_vector(wp.quat_rotate_inv(q, wp.spatial_top(x)) + wp.cross(p, w), w)
    top = wp.spatial_top(y)
    return wp.spatial_vector(
        wp.quat_rotate(q, top), wp.quat_rotate(q, wp.spatial_bottom(y) - wp.cross(p, top))
    )


@wp.func
def _joint_motion(
    type: int,
    joint_axis: wp.array[wp.vec3],
    joint_q: wp.array[float],
    lin_count: int,
    ang_count: int,
    X_sc: wp.transform,
    joint_qd: wp.array[float],
    q_start: int,
    qd_start: int,
    joint_S_s: wp.array[wp.spatial_vector],
):
    """The joint's velocity twist and apparent-derivative bias, its motion subspace stored
    (each joint type returns on its own: Warp merges no twist reassigned in a branch)."""
    zero = wp.vec3()
    if type == _PRISMATIC:
        S = _twist(X_sc, joint_axis[qd_start], zero)
        joint_S_s[qd_start] = S
        return S * joint_qd[qd_start], wp.spatial_vector()
    if type == _REVOLUTE:
        S = _twist(X_sc, zero, joint_axis[qd_start])
        joint_S_s[qd_start] = S
        return S * joint_qd[qd_start], wp.spatial_vector()
    if type == _FREE:
        v_j = wp.spatial_vector()
        for k in range(6):
            unit = wp.spatial_vector()
            unit[k] = 1.0
            S = _twist(X_sc, wp.spatial_top(unit), wp.spatial_bottom(unit))
            joint_S_s[qd_start + k] = S
            v_j += S * joint_qd[qd_start + k]
        return v_j, wp.spatial_vector()
    if type == _BALL:
        v_j = wp.spatial_vector()
        for k in range(3):
            unit_axis = wp.vec3()
            unit_axis[k] = 1.0
            S = _twist(X_sc, zero, unit_axis)
            joint_S_s[qd_start + k] = S
            v_j += S * joint_qd[qd_start + k]
        return v_j, wp.spatial_vector()
    if type == _D6:
        return _d6_motion(
            joint_axis, joint_q, lin_count, ang_count, X_sc, joint_qd, q_start, qd_start, joint_S_s
        )
    return wp.spatial_vector(), wp.spatial_vector()


@wp.func
def _d6_motion(
    joint_axis: wp.array[wp.vec3],
    joint_q: wp.array[float],
    lin_count: int,
    ang_count: int,
    X_sc: wp.transform,
    joint_qd: wp.array[float],
    q_start: int,
    qd_start: int,
    joint_S_s: wp.array[wp.spatial_vector],
):
    """A D6 joint's motion with at most one angular axis, which pivots about the origin
    moved by the linear coordinates (Newton translates before it rotates)."""
    zero = wp.vec3()
    v_j = wp.spatial_vector()
    pos = wp.vec3()
    v_lin = wp.vec3()
    for k in range(3):  # unrolled: Warp differentiates no loop-carried sum of a dynamic loop
        if k < lin_count:
            axis = joint_axis[qd_start + k]
            S = _twist(X_sc, axis, zero)
            joint_S_s[qd_start + k] = S
            v_j += S * joint_qd[qd_start + k]
            pos += axis * joint_q[q_start + k]
            v_lin += axis * joint_qd[qd_start + k]
    if ang_count == 0:
        return v_j, wp.spatial_vector()
    X_sa = X_sc * wp.transform(pos, wp.quat_identity())
    index = qd_start + lin_count
    axis = joint_axis[index]
    S = _twist(X_sa, zero, axis)
    joint_S_s[index] = S
    w_ang = axis * joint_qd[index]
    return v_j + S * joint_qd[index], _twist(X_sa, wp.cross(v_lin, w_ang), zero)


@wp.kernel
def light_rigid_id(
    articulation_mask: wp.array[bool],
    articulation_start: wp.array[int],
    articulation_end: wp.array[int],
    joint_type: wp.array[int],
    joint_parent: wp.array[int],
    joint_child: wp.array[int],
    joint_q_start: wp.array[int],
    joint_qd_start: wp.array[int],
    joint_q: wp.array[float],
    joint_qd: wp.array[float],
    joint_qdd: wp.array[float],
    joint_axis: wp.array[wp.vec3],
    joint_dof_dim: wp.array2d[int],
    body_I_m: wp.array[wp.spatial_matrix],
    body_q: wp.array[wp.transform],
    body_q_com: wp.array[wp.transform],
    joint_X_p: wp.array[wp.transform],
    body_world: wp.array[wp.int32],
    gravity: wp.array[wp.vec3],
    body_qd: wp.array[wp.spatial_vector],
    joint_S_s: wp.array[wp.spatial_vector],
    body_solve_origin: wp.array[wp.vec3],
    body_I_s: wp.array[wp.spatial_matrix],
    body_v_s: wp.array[wp.spatial_vector],
    body_f_s: wp.array[wp.spatial_vector],
    body_a_s: wp.array[wp.spatial_vector],
):
    """Newton's ``eval_rigid_id`` (same arguments, same outputs but ``body_I_s``, which
    it leaves as it is) for the joint types of the module docstring."""
    index = wp.tid()
    if articulation_mask:
        if not articulation_mask[index]:
            return
    start = articulation_start[index]
    end = articulation_end[index]
    origin = wp.vec3()
    if start < end:
        if joint_type[start] == _FREE:
            origin = wp.transform_get_translation(body_q_com[joint_child[start]])
    for i in range(start, end):
        parent = joint_parent[i]
        child = joint_child[i]
        qd_start = joint_qd_start[i]
        X_wpj = joint_X_p[i]
        v_parent = wp.spatial_vector()
        a_parent = wp.spatial_vector()
        if parent >= 0:
            X_wpj = body_q[parent] * X_wpj
            v_parent = body_v_s[parent]
            a_parent = body_a_s[parent]
        X_sc = wp.transform(
            wp.transform_get_translation(X_wpj) - origin, wp.transform_get_rotation(X_wpj)
        )
        v_j, c_app = _joint_motion(
            joint_type[i],
            joint_axis,
            joint_q,
            joint_dof_dim[i, 0],
            joint_dof_dim[i, 1],
            X_sc,
            joint_qd,
            joint_q_start[i],
            qd_start,
            joint_S_s,
        )
        v_s = v_parent + v_j
        w = wp.spatial_bottom(v_s)
        a_s = (
            a_parent
            + wp.spatial_vector(
                wp.cross(w, wp.spatial_top(v_j))
                + wp.cross(wp.spatial_top(v_s), wp.spatial_bottom(v_j)),
                wp.cross(w, wp.spatial_bottom(v_j)),
            )
            + c_app
        )
        if joint_qdd:
            for k in range(6):  # unrolled, as above
                if qd_start + k < joint_qd_start[i + 1]:
                    a_s = a_s + joint_S_s[qd_start + k] * joint_qdd[qd_start + k]
        X_com = body_q_com[child]
        c = wp.transform_get_translation(X_com) - origin
        q = wp.transform_get_rotation(X_com)
        I_m = body_I_m[child]
        h = _apply_inertia(I_m, q, c, v_s)
        bias = wp.spatial_vector(
            wp.cross(w, wp.spatial_top(h)),
            wp.cross(w, wp.spatial_bottom(h)) + wp.cross(wp.spatial_top(v_s), wp.spatial_top(h)),
        )
        f_g = I_m[0, 0] * gravity[body_world[child]]
        body_solve_origin[child] = origin
        body_qd[child] = wp.spatial_vector(wp.spatial_top(v_s) + wp.cross(w, c), w)
        body_v_s[child] = v_s
        body_a_s[child] = a_s
        body_f_s[child] = (
            _apply_inertia(I_m, q, c, a_s) + bias - wp.spatial_vector(f_g, wp.cross(c, f_g))
        )


def covers_joint_types(model: Any) -> bool:
    """Whether :func:`light_rigid_id` computes every joint of ``model``."""
    types = model.joint_type.numpy()
    angular = model.joint_dof_dim.numpy()[:, 1]
    covered = np.isin(types, _COVERED) | ((types == int(JointType.D6)) & (angular <= 1))
    return bool(covered.all())


def recorded_rigid_id_launches(tape: Any) -> list[tuple[int, Any]]:
    """The launches of Featherstone's ``eval_rigid_id`` recorded on ``tape``, with their
    indices (those already replaced are not launches any more)."""
    return [
        (index, entry)
        for index, entry in enumerate(tape.launches)
        if isinstance(entry, list | tuple) and entry[0].key.endswith(_KERNEL_NAME)
    ]


def launch_on_recorded(kernel: Any, tape: Any, launch: Any, adjoint: bool = False) -> None:
    """Launch ``kernel`` (Newton's or :func:`light_rigid_id`) on a recorded launch's arrays,
    forward or, with ``adjoint``, its adjoint on the tape's adjoint arrays."""
    inputs, outputs = launch[3], launch[4]
    extra: dict[str, Any] = {}
    if adjoint:
        extra = {
            "adj_inputs": [tape.get_adjoint(x) for x in inputs],
            "adj_outputs": [tape.get_adjoint(x) for x in outputs],
            "adjoint": True,
        }
    wp.launch(
        kernel, dim=launch[1], inputs=inputs, outputs=outputs, device=launch[5],
        record_tape=False, **extra,
    )  # fmt: skip


class RigidIdAdjoint:
    """The adjoint of one recorded ``eval_rigid_id`` launch, as a tape entry.

    Args:
        tape: The tape the launch was recorded on (its adjoint arrays).
        launch: The recorded launch (kernel, dim, max_blocks, inputs, outputs, device, ...).
    """

    def __init__(self, tape: Any, launch: Any) -> None:
        self.tape, self.launch = tape, launch
        self.inputs = launch[3]

    def __call__(self) -> None:
        """The Warp launch of :func:`light_rigid_id`'s adjoint on the recorded arrays."""
        launch_on_recorded(light_rigid_id, self.tape, self.launch, adjoint=True)


def _arrays_of(entry: Any) -> list | None:
    """The arrays a tape entry may read: a launch's inputs, an entry object's ``inputs``,
    those a recorded function (``wp.copy``'s adjoint) closes over; ``None`` where unknown."""
    if isinstance(entry, list | tuple):
        return list(entry[3])
    inputs = getattr(entry, "inputs", None)
    if inputs is not None:
        return list(inputs)
    cells = getattr(entry, "__closure__", None) or ()
    arrays = [cell.cell_contents for cell in cells if isinstance(cell.cell_contents, wp.array)]
    return arrays or None


def _reads(entry: Any, target: Any) -> bool:
    """Whether a tape entry may touch ``target``'s memory (an entry it cannot inspect may)."""
    if isinstance(entry, RigidIdAdjoint):
        return False
    arrays = _arrays_of(entry)
    if arrays is None:
        return True
    end = target.ptr + target.capacity
    return any(
        isinstance(x, wp.array)
        and x.ptr is not None
        and x.ptr < end
        and target.ptr < x.ptr + x.capacity
        for x in arrays
    )


def replace_rigid_id_adjoints(tape: Any) -> int:
    """Give each recorded launch of Featherstone's ``eval_rigid_id`` on ``tape`` whose
    ``body_I_s`` no other entry reads the adjoint of :func:`light_rigid_id`; returns how
    many were replaced. The caller checks :func:`covers_joint_types` for the model first."""
    replaced = 0
    for index, launch in recorded_rigid_id_launches(tape):
        body_I_s = launch[4][3]
        if not any(_reads(entry, body_I_s) for entry in tape.launches if entry is not launch):
            tape.launches[index] = RigidIdAdjoint(tape, launch)
            replaced += 1
    return replaced
