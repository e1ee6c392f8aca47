"""An MJCF file as MuJoCo means it: its joints' pivots, ``ref`` and coordinates.

Newton's importer merges a body's joints into one D6 joint that pivots at the
first joint's ``pos`` and ignores ``ref``; so, for hopper.xml, the torso
turned about a point 1.25 m below it and ``joint_q[1]`` was its height minus
1.25. :func:`apply_mujoco_meaning` corrects the imported joints in place
(before the world is replicated): the D6 pivots at the body's hinge anchor,
and each coordinate's zero is MuJoCo's, so that ``joint_q`` holds MuJoCo's
``qpos`` coordinate by coordinate (Newton's quaternions are x y z w, MuJoCo's
w x y z). :class:`MujocoCoordinates` converts whole states both ways,
differentiably, velocities included (MuJoCo's free-joint velocity is that of
the body origin with a local angular part; Newton's, the centre of mass's
with a world one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import warp as wp

from pathgrad.envs.newton.engine.kinematics import newton_label
from pathgrad.envs.newton.model_files.mjcf_joints import MjcfBody, MjcfJoint

__all__ = ["MujocoCoordinates", "apply_mujoco_meaning"]

_D6 = 6  # newton.JointType.D6 (an int here: checked in the tests)


@dataclass(frozen=True)
class _Joint:
    """One MuJoCo joint and where its coordinates are in Newton's state."""

    name: str
    type: str
    qpos: int  # MuJoCo's qpos address
    qvel: int  # MuJoCo's qvel address
    q: int  # Newton's joint_q index of its first coordinate
    qd: int  # Newton's joint_qd index of its first DOF
    com: tuple[float, float, float]  # the child body's centre of mass (free joints)
    source: MjcfJoint  # the file's joint as read (its solreflimit, friction loss, damping)


class MujocoCoordinates:
    """MuJoCo's ``qpos``/``qvel`` and Newton's ``joint_q``/``joint_qd`` of one world.

    Attributes:
        names: The file's joint name of each ``joint_q`` coordinate (a free or
            ball joint's with ``:x`` ... ``:qw``).
        dof_names: The same for each ``joint_qd`` entry.
        nq, nv: MuJoCo's sizes of ``qpos`` and ``qvel``.
    """

    def __init__(self, joints: Sequence[_Joint], coordinates: int, dofs: int) -> None:
        self.joints = list(joints)
        self.nq = sum({"free": 7, "ball": 4}.get(j.type, 1) for j in self.joints)
        self.nv = sum({"free": 6, "ball": 3}.get(j.type, 1) for j in self.joints)
        self.coordinates, self.dofs = int(coordinates), int(dofs)
        self.names = [""] * self.coordinates
        self.dof_names = [""] * self.dofs
        for j in self.joints:
            if j.type == "free":
                parts, rates = (
                    ("x", "y", "z", "qx", "qy", "qz", "qw"),
                    ("vx", "vy", "vz", "wx", "wy", "wz"),
                )
            elif j.type == "ball":
                parts, rates = ("qx", "qy", "qz", "qw"), ("wx", "wy", "wz")
            else:
                parts, rates = ("",), ("",)
            for k, part in enumerate(parts):
                self.names[j.q + k] = f"{j.name}:{part}" if part else j.name
            for k, rate in enumerate(rates):
                self.dof_names[j.qd + k] = f"{j.name}:{rate}" if rate else j.name
        # Hinges and slides map one entry to one: a single gather per direction (the step's
        # hot path converts every state); free and ball joints are converted one by one.
        scalar = [j for j in self.joints if j.type not in ("free", "ball")]
        self._qpos_index = torch.tensor([j.qpos for j in scalar], dtype=torch.long)
        self._q_index = torch.tensor([j.q for j in scalar], dtype=torch.long)
        self._qvel_index = torch.tensor([j.qvel for j in scalar], dtype=torch.long)
        self._qd_index = torch.tensor([j.qd for j in scalar], dtype=torch.long)
        self._compound = [j for j in self.joints if j.type in ("free", "ball")]

    def joint_state_from_mujoco(
        self, qpos: torch.Tensor, qvel: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(joint_q [N, coordinates], joint_qd [N, dofs])`` of MuJoCo's ``qpos [N, nq]`` and
        ``qvel [N, nv]``."""
        qpos, qvel = _rows(qpos, self.nq, "qpos"), _rows(qvel, self.nv, "qvel")
        q = qpos.new_zeros(qpos.shape[0], self.coordinates)
        qd = qvel.new_zeros(qvel.shape[0], self.dofs)
        device = qpos.device
        q[:, self._q_index.to(device)] = qpos[:, self._qpos_index.to(device)]
        qd[:, self._qd_index.to(device)] = qvel[:, self._qvel_index.to(device)]
        for j in self._compound:
            a, v = j.qpos, j.qvel
            if j.type == "free":
                wxyz = qpos[:, a + 3 : a + 7]
                q[:, j.q : j.q + 7] = torch.cat([qpos[:, a : a + 3], wxyz[:, 1:], wxyz[:, :1]], -1)
                omega = _rotate(wxyz, qvel[:, v + 3 : v + 6])  # local -> world
                lever = _rotate(wxyz, qvel.new_tensor(j.com).expand(len(qvel), 3))
                qd[:, j.qd : j.qd + 3] = qvel[:, v : v + 3] + torch.cross(omega, lever, dim=-1)
                qd[:, j.qd + 3 : j.qd + 6] = omega
            elif j.type == "ball":
                wxyz = qpos[:, a : a + 4]
                q[:, j.q : j.q + 4] = torch.cat([wxyz[:, 1:], wxyz[:, :1]], -1)
                qd[:, j.qd : j.qd + 3] = _rotate(wxyz, qvel[:, v : v + 3])  # child -> parent
        return q, qd

    def mujoco_from_joint_state(
        self, joint_q: torch.Tensor, joint_qd: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """MuJoCo's ``(qpos [N, nq], qvel [N, nv])`` of Newton's ``joint_q``, ``joint_qd``."""
        joint_q = _rows(joint_q, self.coordinates, "joint_q")
        joint_qd = _rows(joint_qd, self.dofs, "joint_qd")
        qpos = joint_q.new_zeros(joint_q.shape[0], self.nq)
        qvel = joint_qd.new_zeros(joint_qd.shape[0], self.nv)
        device = joint_q.device
        qpos[:, self._qpos_index.to(device)] = joint_q[:, self._q_index.to(device)]
        qvel[:, self._qvel_index.to(device)] = joint_qd[:, self._qd_index.to(device)]
        for j in self._compound:
            a, v = j.qpos, j.qvel
            if j.type == "free":
                xyzw = joint_q[:, j.q + 3 : j.q + 7]
                wxyz = torch.cat([xyzw[:, 3:], xyzw[:, :3]], -1)
                qpos[:, a : a + 7] = torch.cat([joint_q[:, j.q : j.q + 3], wxyz], -1)
                omega = joint_qd[:, j.qd + 3 : j.qd + 6]
                lever = _rotate(wxyz, joint_qd.new_tensor(j.com).expand(len(joint_qd), 3))
                qvel[:, v : v + 3] = joint_qd[:, j.qd : j.qd + 3] - torch.cross(
                    omega, lever, dim=-1
                )
                qvel[:, v + 3 : v + 6] = _rotate(wxyz, omega, inverse=True)  # world -> local
            elif j.type == "ball":
                xyzw = joint_q[:, j.q : j.q + 4]
                wxyz = torch.cat([xyzw[:, 3:], xyzw[:, :3]], -1)
                qpos[:, a : a + 4] = wxyz
                qvel[:, v : v + 3] = _rotate(wxyz, joint_qd[:, j.qd : j.qd + 3], inverse=True)
        return qpos, qvel


def _rows(value: torch.Tensor, width: int, name: str) -> torch.Tensor:
    value = torch.as_tensor(value)
    value = value.unsqueeze(0) if value.ndim == 1 else value
    if value.ndim != 2 or value.shape[1] != width:
        raise ValueError(f"{name} must have shape [N, {width}], got {tuple(value.shape)}.")
    return value


def _rotate(wxyz: torch.Tensor, vector: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """``vector`` rotated by the unit quaternion ``wxyz`` (or by its inverse)."""
    w, xyz = wxyz[:, :1], wxyz[:, 1:]
    xyz = -xyz if inverse else xyz
    t = 2.0 * torch.cross(xyz, vector, dim=-1)
    return vector + w * t + torch.cross(xyz, t, dim=-1)


def _quat_axis_angle(axis: Sequence[float], angle: float) -> Any:
    return wp.quat_from_axis_angle(wp.vec3(*map(float, axis)), float(angle))


def apply_mujoco_meaning(
    builder: Any, bodies: Sequence[MjcfBody], first_body: int, first_joint: int
) -> tuple[MujocoCoordinates, list[str]]:
    """Give the joints Newton imported from an MJCF file MuJoCo's pivots and zeros.

    ``bodies``: the file's bodies
    (:func:`~pathgrad.envs.newton.model_files.mjcf_joints.read_mjcf_joints`);
    ``first_body``/``first_joint``: the builder's counts before the import. Returns the
    coordinate map and what could not be given MuJoCo's meaning (one line each).
    """
    newton_body = _match_bodies(builder, bodies, first_body)
    notes: list[str] = []
    matched = {id(body) for body in newton_body.values()}
    lost = [body.name or "(unnamed)" for body in bodies if body.joints and id(body) not in matched]
    if lost:
        notes.append(f"bodies {', '.join(lost)} are not in Newton's import: their joints are "
                     "left out of the MuJoCo coordinates (qpos, qvel)")  # fmt: skip
    rank = {id(body): k for k, body in enumerate(bodies)}  # MuJoCo numbers them so
    placed: list[tuple[int, MjcfJoint, int, int, tuple]] = []
    for j in range(first_joint, builder.joint_count):
        body = newton_body.get(int(builder.joint_child[j]))
        if body is None or not body.joints:
            continue
        indices = _newton_indices(builder, j, body)
        zeroed = _place_pivot_and_zeros(builder, j, body, notes)
        for mj_joint, (q, qd) in zip(body.joints, indices, strict=True):
            if mj_joint.name in zeroed:  # the file's pose: MuJoCo's qpos0 is the ref
                builder.joint_q[q] = mj_joint.ref
                _limits_and_rest_in_qpos(builder, q, qd, mj_joint)
            com = tuple(float(c) for c in builder.body_com[int(builder.joint_child[j])])
            placed.append((rank[id(body)], mj_joint, q, qd, com))
    joints: list[_Joint] = []
    qpos = qvel = 0  # bodies in MuJoCo's order where Newton's differs (sibling <frame>s
    for _, mj_joint, q, qd, com in sorted(placed, key=lambda entry: entry[0]):  # reversed)
        joints.append(_Joint(mj_joint.name, mj_joint.type, qpos, qvel, q, qd, com, mj_joint))
        qpos += {"free": 7, "ball": 4}.get(mj_joint.type, 1)
        qvel += {"free": 6, "ball": 3}.get(mj_joint.type, 1)
    return MujocoCoordinates(joints, builder.joint_coord_count, builder.joint_dof_count), notes


def _limits_and_rest_in_qpos(builder: Any, q: int, dof: int, joint: MjcfJoint) -> None:
    """Undo the ref Newton's importer took off the DOF's limits and the coordinate's spring
    rest: with MuJoCo's zeros, they are in ``qpos`` units, as the file writes them."""
    for limits in (builder.joint_limit_lower, builder.joint_limit_upper):
        if abs(float(limits[dof])) < 1e9:  # not Newton's "unlimited"
            limits[dof] = float(limits[dof]) + joint.limit_shift
    builder.joint_rest_q[q] = float(builder.joint_rest_q[q]) + joint.rest_shift  # per coordinate


def _match_bodies(builder: Any, bodies: Sequence[MjcfBody], first_body: int) -> dict:
    """Newton body index -> the file's body: in order (Newton imports depth-first, as
    MuJoCo numbers them) where the counts agree, else by name."""
    labels = [str(label).rsplit("/", 1)[-1] for label in builder.body_label[first_body:]]
    names = [None if body.name is None else newton_label(body.name) for body in bodies]
    in_order = len(labels) == len(bodies) and all(
        name is None or name == label for name, label in zip(names, labels, strict=True)
    )
    if in_order:
        return {first_body + k: body for k, body in enumerate(bodies)}
    by_name = {label: first_body + k for k, label in enumerate(labels)}
    return {by_name[n]: b for n, b in zip(names, bodies, strict=True) if n in by_name}


def _newton_indices(builder: Any, j: int, body: MjcfBody) -> list[tuple[int, int]]:
    """Newton's (joint_q, joint_qd) index of each of the body's MuJoCo joints."""
    q0, qd0 = int(builder.joint_q_start[j]), int(builder.joint_qd_start[j])
    if len(body.joints) == 1:
        return [(q0, qd0)]
    if int(builder.joint_type[j]) != _D6:
        raise ValueError(f"body '{body.name}': Newton merged its {len(body.joints)} joints into "
                         "one that is not a D6; pathgrad cannot map its coordinates.")  # fmt: skip
    linear, angular = (int(n) for n in builder.joint_dof_dim[j])
    axes = [
        np.asarray(builder.joint_axis[qd0 + k], dtype=np.float64) for k in range(linear + angular)
    ]
    free = {"slide": list(range(linear)), "hinge": list(range(linear, linear + angular))}
    found = []
    for mj_joint in body.joints:
        group = free.get(mj_joint.type, [])
        match = next((k for k in group if np.allclose(axes[k], mj_joint.axis, atol=1e-6)), None)
        if match is None:
            raise ValueError(
                f"body '{body.name}': joint '{mj_joint.name}' ({mj_joint.type}) has no DOF of "
                "its axis in Newton's merged joint; pathgrad cannot map its coordinates."
            )
        group.remove(match)
        found.append((q0 + match, qd0 + match))
    return found


def _place_pivot_and_zeros(builder: Any, j: int, body: MjcfBody, notes: list[str]) -> set[str]:
    """Pivot joint ``j`` at the body's hinge anchor and put its coordinates' zeros where
    MuJoCo's are (the file's pose at ``ref``); the names of the joints whose ref it applied."""
    mj_joints = body.joints
    if any(m.type in ("free", "ball") for m in mj_joints):
        return set()
    rotational = [m for m in mj_joints if m.rotational]
    anchor = np.asarray(rotational[0].pos if rotational else mj_joints[0].pos, dtype=np.float64)
    name = body.name or "(unnamed)"
    if any(not np.allclose(m.pos, anchor) for m in rotational):
        notes.append(f"body '{name}': its hinges turn about different points; Newton turns them "
                     f"all about the first one's ({tuple(anchor)})")  # fmt: skip
    seen_rotation = False
    for m in mj_joints:
        seen_rotation = seen_rotation or m.rotational
        if seen_rotation and not m.rotational:
            notes.append(f"body '{name}': slide '{m.name}' follows a hinge; Newton slides a "
                         "body before turning it, MuJoCo in the file's order")  # fmt: skip
            break
    parent, child = builder.joint_X_p[j], builder.joint_X_c[j]
    rotation = wp.transform_get_rotation(parent)
    delta = anchor - np.asarray(mj_joints[0].pos, dtype=np.float64)
    shift = np.asarray(wp.quat_rotate(rotation, wp.vec3(*delta)), dtype=np.float64)
    applied = set()
    for m in mj_joints:  # a slide's zero at its ref: the body moved back along its axis
        if m.type == "slide" and m.ref != 0.0:
            shift -= m.ref * np.asarray(wp.quat_rotate(rotation, wp.vec3(*m.axis)))
            applied.add(m.name)
    turned = [m for m in mj_joints if m.type == "hinge" and m.ref != 0.0]
    slides = any(m.type == "slide" for m in mj_joints)
    if turned and (turned[0] is not rotational[0] or len(turned) > 1 or slides):
        notes.append(f"body '{name}': the ref of hinge '{turned[0].name}' is not applied (only "
                     "that of a body's first hinge, without slides, is)")  # fmt: skip
    elif turned:
        rotation = rotation * _quat_axis_angle(turned[0].axis, -turned[0].ref)
        applied.add(turned[0].name)
    position = wp.transform_get_translation(parent) + wp.vec3(*shift)
    builder.joint_X_p[j] = wp.transform(position, rotation)
    builder.joint_X_c[j] = wp.transform(
        wp.transform_get_translation(child) + wp.vec3(*delta), wp.transform_get_rotation(child)
    )
    return applied
