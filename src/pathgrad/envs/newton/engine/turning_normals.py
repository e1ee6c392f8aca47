"""Contact normals between curved surfaces that turn with the bodies in the backward pass.

Newton detects contacts outside the tape and its contact force holds each contact's world
normal fixed, so the gradient misses how the normal turns as two curved surfaces move
against each other (8-20% of a one-step Jacobian between spheres, capsules and cylinder
sides, tests/envs/newton/test_body_contact_jacobians.py). Here each contact's normal is
computed again, on the tape, from the bodies' poses and the shapes' cores: a sphere's
centre, a capsule's axis (its end where the contact is on a cap), a cylinder's axis where
the contact is on its side. The normal is the direction of the shortest segment between
the two cores, which is what Newton detected (float rounding apart), now a differentiable
function of the poses. Where either side is flat (a box, a mesh, a plane, a cylinder's cap),
the detected normal is kept, as Newton keeps it.
"""

from __future__ import annotations

from typing import Any

import newton
import numpy as np
import warp as wp

__all__ = ["TurningNormals", "curved_pairs", "turn_contact_normals"]

SPHERE = wp.constant(3)  # newton.GeoType.SPHERE, CAPSULE, CYLINDER
CAPSULE = wp.constant(4)
CYLINDER = wp.constant(6)
FLAT = wp.constant(0)
POINT = wp.constant(1)
LINE = wp.constant(2)


@wp.func
def _core_kind(shape_type: int, half_height: float, local_point: wp.vec3, local_normal: wp.vec3):
    """FLAT, POINT or LINE: what the shape's surface curves around at the contact."""
    if shape_type == SPHERE:
        return POINT
    if shape_type == CAPSULE:
        if wp.abs(local_point[2]) >= half_height * 0.999:
            return POINT  # on a cap: its end is the core
        return LINE
    if shape_type == CYLINDER:
        if wp.abs(local_normal[2]) < 0.5:
            return LINE  # on the side (its rims included: the normal leaves the axis)
    return FLAT


@wp.func
def _world_frame(body_q: wp.array(dtype=wp.transform), body: int, frame: wp.transform):
    """A shape's frame in the world (a static shape's is its own transform)."""
    if body >= 0:
        return wp.transform_multiply(body_q[body], frame)
    return frame


@wp.func
def _core_point(world: wp.transform, shape_type: int, local_point: wp.vec3):
    """A point of the shape's core: a sphere's centre, else the point of the axis level with
    the contact (a capsule's end where the contact is on its cap)."""
    if shape_type == SPHERE:
        return wp.transform_get_translation(world)
    return wp.transform_point(world, wp.vec3(0.0, 0.0, local_point[2]))


@wp.kernel
def turn_contact_normals(
    body_q: wp.array(dtype=wp.transform),
    shape_body: wp.array(dtype=int),
    shape_transform: wp.array(dtype=wp.transform),
    shape_type: wp.array(dtype=int),
    shape_scale: wp.array(dtype=wp.vec3),
    contact_count: wp.array(dtype=int),
    contact_shape0: wp.array(dtype=int),
    contact_shape1: wp.array(dtype=int),
    contact_point0: wp.array(dtype=wp.vec3),
    contact_point1: wp.array(dtype=wp.vec3),
    contact_normal: wp.array(dtype=wp.vec3),
):
    tid = wp.tid()
    if tid >= contact_count[0]:
        return
    shape_a = contact_shape0[tid]
    shape_b = contact_shape1[tid]
    if shape_a < 0 or shape_b < 0:
        return
    detected = contact_normal[tid]  # read for its side and kind only: no adjoint flows back
    world_a = _world_frame(body_q, shape_body[shape_a], shape_transform[shape_a])
    world_b = _world_frame(body_q, shape_body[shape_b], shape_transform[shape_b])
    # The contact points (body frames) and the detected normal in each shape's frame.
    in_shape_a = wp.transform_inverse(shape_transform[shape_a])
    in_shape_b = wp.transform_inverse(shape_transform[shape_b])
    local_a = wp.transform_point(in_shape_a, contact_point0[tid])
    local_b = wp.transform_point(in_shape_b, contact_point1[tid])
    rotation_a = wp.transform_get_rotation(world_a)
    rotation_b = wp.transform_get_rotation(world_b)
    kind_a = _core_kind(shape_type[shape_a], shape_scale[shape_a][1], local_a,
                        wp.quat_rotate_inv(rotation_a, detected))  # fmt: skip
    kind_b = _core_kind(shape_type[shape_b], shape_scale[shape_b][1], local_b,
                        wp.quat_rotate_inv(rotation_b, detected))  # fmt: skip
    if kind_a == FLAT or kind_b == FLAT:
        return
    axis_a = wp.quat_rotate(rotation_a, wp.vec3(0.0, 0.0, 1.0))
    axis_b = wp.quat_rotate(rotation_b, wp.vec3(0.0, 0.0, 1.0))
    between = _core_point(world_b, shape_type[shape_b], local_b) - _core_point(
        world_a, shape_type[shape_a], local_a
    )
    direction = between  # point to point
    if kind_a == POINT and kind_b == LINE:
        direction = between - axis_b * wp.dot(between, axis_b)
    elif kind_a == LINE and kind_b == POINT:
        direction = between - axis_a * wp.dot(between, axis_a)
    elif kind_a == LINE and kind_b == LINE:
        across = wp.cross(axis_a, axis_b)
        if wp.length(across) > 1.0e-3:
            direction = across * wp.dot(across, between)
        else:  # parallel axes
            direction = between - axis_a * wp.dot(between, axis_a)
    length = wp.length(direction)
    if length < 1.0e-9:
        return
    normal = direction / length
    if wp.dot(normal, detected) < 0.0:
        normal = -normal
    contact_normal[tid] = normal


CURVED = (SPHERE, CAPSULE, CYLINDER)  # newton.GeoType


def curved_pairs(model: Any) -> int:
    """How many of the model's collidable shape pairs are two curved shapes."""
    pairs = getattr(model, "shape_contact_pairs", None)
    if pairs is None:
        pairs = getattr(model, "_shape_contact_pairs", None)
    if pairs is None or len(pairs) == 0:
        return 0
    kinds = model.shape_type.numpy()
    pairs = pairs.numpy() if hasattr(pairs, "numpy") else np.asarray(pairs)
    return int(np.isin(kinds[pairs], CURVED).all(axis=1).sum())


class TurningNormals:
    """The Warp operations that turn ``contacts``' normals with the bodies (one substep).

    Featherstone carries joint coordinates and overwrites the input state's body poses
    inside its step, so on the tape the normals are computed from poses of their own
    (forward kinematics of the input joint coordinates); ``semi_implicit`` carries the
    body poses and reads them directly.
    """

    def __init__(self, model: Any, contacts: Any, maximal: bool) -> None:
        self.model = model
        self.contacts = contacts
        self.maximal = maximal
        contacts.rigid_contact_normal.requires_grad = True  # the contact force's adjoint
        self.poses = None if maximal else model.state(requires_grad=True)

    @classmethod
    def for_model(cls, model: Any, contacts: Any, maximal: bool) -> TurningNormals | None:
        """The operations where two curved shapes can touch, else ``None`` (nothing to do)."""
        return cls(model, contacts, maximal) if curved_pairs(model) else None

    def apply(self, state_in: Any, differentiated: bool = True) -> None:
        """Turn the held contacts' normals to ``state_in``'s poses.

        ``differentiated=False`` (an untaped forward substep) reads ``state_in``'s body
        poses, current for collision detection, instead of evaluating the normals' own.
        """
        body_q = state_in.body_q
        if self.poses is not None and differentiated:
            newton.eval_fk(self.model, state_in.joint_q, state_in.joint_qd, self.poses)
            body_q = self.poses.body_q
        model, contacts = self.model, self.contacts
        wp.launch(
            turn_contact_normals,
            dim=contacts.rigid_contact_max,
            inputs=[
                body_q, model.shape_body, model.shape_transform, model.shape_type,
                model.shape_scale, contacts.rigid_contact_count, contacts.rigid_contact_shape0,
                contacts.rigid_contact_shape1, contacts.rigid_contact_point0,
                contacts.rigid_contact_point1, contacts.rigid_contact_normal,
            ],
            device=model.device,
        )  # fmt: skip

    def own_arrays(self) -> tuple[Any, ...]:
        """Arrays evaluated again before each substep's adjoint (not kept per substep)."""
        return () if self.poses is None else (self.poses.body_q, self.poses.body_qd)

    def zero_adjoints(self) -> None:
        self.contacts.rigid_contact_normal.grad.zero_()
        for array in self.own_arrays():
            array.grad.zero_()
