"""Mistakes in where a user's robot starts and what it stands on, found in the built model.

A robot whose collision shapes start inside the ground is thrown out of it
(or steps to NaN) by the contact springs; a model file's own floor does
nothing while the env's contacts are off, so the robot falls through it; a
free joint's quaternion that is not of unit length is turned, unnoticed, into
some other orientation. These name the body, the shape or the joint.
"""

from __future__ import annotations

import warnings
from typing import Any

import newton
import numpy as np
import torch

from pathgrad.core.env_contract import EnvContractError

__all__ = [
    "check_free_joint_quaternions",
    "floor_without_contacts",
    "ground_penetration",
    "has_floor",
]

PENETRATION_TOLERANCE = 0.005  # m: resting contact sits within this of the ground


def ground_penetration(model: Any) -> str | None:
    """A warning when a collision shape starts below the ground (its highest static plane:
    pathgrad's at z = 0 or a file's floor), at the model's pose: the deepest one, with its
    body and how deep."""
    state = model.state()
    newton.eval_fk(model, model.joint_q, model.joint_qd, state)
    body_q = state.body_q.numpy().astype(np.float64)
    types, scales = model.shape_type.numpy(), model.shape_scale.numpy().astype(np.float64)
    transforms = model.shape_transform.numpy().astype(np.float64)
    bodies, flags = model.shape_body.numpy(), model.shape_flags.numpy()
    collides = int(newton.ShapeFlags.COLLIDE_SHAPES)
    planes = [transforms[k][2] for k, (kind, body) in enumerate(zip(types, bodies, strict=True))
              if body < 0 and int(kind) == int(newton.GeoType.PLANE)]  # fmt: skip
    ground = max(planes, default=0.0)
    deepest, where = ground - PENETRATION_TOLERANCE, None
    for shape, (kind, body) in enumerate(zip(types, bodies, strict=True)):
        if body < 0 or not flags[shape] & collides:
            continue
        position, rotation = _compose(body_q[body], transforms[shape])
        low = _lowest_z(int(kind), scales[shape], position, rotation)
        if low is not None and low < deepest:
            deepest, where = low, (body, int(kind))
    if where is None:
        return None
    body, kind = where
    name = str(model.body_label[body]).rsplit("/", 1)[-1]
    return (
        f"body '{name}' starts {ground - deepest:.3g} m inside the ground (its "
        f"{newton.GeoType(kind).name.lower()}'s lowest point at z = {deepest:.3g} m, at the "
        "model's pose): the contacts throw it out, or the first steps turn NaN. Start it "
        "higher: the root body's pos in an MJCF file, model_file_options()'s xform for a URDF, "
        "or the heights _sample_initial_state draws."
    )


def has_floor(builder: Any) -> bool:
    """Whether a world holds a plane of its own (an MJCF file's floor or table)."""
    plane = int(newton.GeoType.PLANE)
    return any(int(kind) == plane for kind in builder.shape_type)


def floor_without_contacts(model: Any, *, contacts: bool) -> str | None:
    """A warning when the model has its own floor (a plane) but the env's contacts are off."""
    if contacts or not np.any(model.shape_type.numpy() == int(newton.GeoType.PLANE)):
        return None
    return (
        "the model has a plane (a floor) but contacts=False, so nothing collides with it and "
        "the robot falls through. Pass contacts=True (an MJCF file's floor is then the ground) "
        "or remove the plane."
    )


def check_free_joint_quaternions(
    env_name: str, joint_q: torch.Tensor, free_joints: list[tuple[int, str]]
) -> None:
    """Each free joint's rotation (``joint_q[start + 3 : start + 7]``, x y z w) must be a unit
    quaternion in every row (``free_joints``: first coordinate and label of each).

    Warns where every row is a half turn about x (1, 0, 0, 0): MuJoCo's identity
    in its w x y z order.

    Raises:
        EnvContractError: Naming the joint, the row and the norm found.
    """
    for start, label in free_joints:
        norms = joint_q[:, start + 3 : start + 7].detach().norm(dim=-1)
        bad = ~(torch.isfinite(norms) & ((norms - 1.0).abs() < 1e-3))
        if bool(bad.any()):
            row = int(bad.nonzero()[0, 0])
            raise EnvContractError(
                f"{env_name}._sample_initial_state: free joint '{label}' has a rotation "
                f"(joint_q[{start + 3}:{start + 7}], x y z w) of norm {float(norms[row]):.3g} in "
                f"row {row}; it must be a unit quaternion (identity: 0, 0, 0, 1; note Newton's "
                "order x y z w, not MuJoCo's w x y z)."
            )
        rotation = joint_q[:, start + 3 : start + 7].detach()
        flipped = torch.zeros_like(rotation)
        flipped[:, 0] = rotation[:, 0].sign()
        if bool(rotation.abs()[:, 0].eq(1).all()) and bool(rotation.eq(flipped).all()):
            warnings.warn(
                f"{env_name}._sample_initial_state: free joint '{label}' starts turned half a "
                f"turn about x in every row (joint_q[{start + 3}:{start + 7}] = 1, 0, 0, 0, x y z "
                "w): upside down. If that is MuJoCo's identity (w x y z), Newton's is 0, 0, 0, 1.",
                stacklevel=3,
            )


def _compose(body: np.ndarray, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """World position and rotation (x y z w) of a shape: its body's pose times its own."""
    return body[:3] + _rotate(body[3:], local[:3]), _multiply(body[3:], local[3:])


def _lowest_z(kind: int, scale: np.ndarray, position: np.ndarray, rotation: np.ndarray):
    """The lowest z of a primitive shape (None for a mesh or another kind)."""
    axis = _rotate(rotation, np.array([0.0, 0.0, 1.0]))
    if kind == newton.GeoType.SPHERE:
        return position[2] - scale[0]
    if kind == newton.GeoType.CAPSULE:
        return position[2] - abs(axis[2]) * scale[1] - scale[0]
    if kind == newton.GeoType.CYLINDER:
        rim = scale[0] * np.sqrt(max(0.0, 1.0 - axis[2] ** 2))
        return position[2] - abs(axis[2]) * scale[1] - rim
    if kind == newton.GeoType.BOX:
        corners = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)])
        return position[2] + min(_rotate(rotation, c * scale[:3])[2] for c in corners)
    return None


def _rotate(quaternion: np.ndarray, vector: np.ndarray) -> np.ndarray:
    axis, w = quaternion[:3], quaternion[3]
    twice = 2.0 * np.cross(axis, vector)
    return vector + w * twice + np.cross(axis, twice)


def _multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    (ax, ay, az, aw), (bx, by, bz, bw) = a, b
    return np.array([
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    ])  # fmt: skip
