"""The drawing of any Newton robot: its bodies' shapes, posed by forward kinematics.

Every :class:`~pathgrad.envs.newton.NewtonEnv` (a user's MJCF or URDF robot
included) is drawn from its ``newton.Model``: the body poses of each recorded
state come from ``newton.eval_fk`` of its ``joint_q`` (or from the carried
``body_q`` of the ``semi_implicit`` solver), and each shape of world 0 is
drawn as the outline of its orthographic projection (the 2-D convex hull of
points on its surface: exact for boxes, close for spheres, capsules,
cylinders, cones and ellipsoids; a mesh's vertices). Two views share the
figure: from the side (the first horizontal axis against the model's up axis)
and from above. Each body's origin is a dot, joints link parent and child
origins, bodies without a drawable shape show their frame axes, the root body
leaves a trail in the top view, and a ground plane (``contacts=True``, or a
plane in the model) is a line in the side view.

The camera is fitted to the robot over the whole recording: fixed when the
robot stays in place (its static parts, axes and ticks are drawn once and the
moving artists redrawn over them), following the robot's centre when it
travels further than its own size.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

__all__ = ["NewtonBodiesScene", "body_poses", "is_newton_env", "shape_points"]

# newton.GeoType and newton.ShapeFlags values (as in Newton 1.8; a test compares them), kept
# here so that importing this module does not import Newton
PLANE, HFIELD, SPHERE, CAPSULE, ELLIPSOID, CYLINDER, BOX, MESH, CONE, CONVEX_MESH = range(1, 11)
SITE_FLAG, VISIBLE_FLAG = 1 << 3, 1 << 0
MAX_MESH_POINTS = 256
COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
          "tab:pink", "tab:olive", "tab:cyan")  # fmt: skip
AXIS_NAMES = "xyz"


def is_newton_env(env: Any) -> bool:
    """Whether ``env`` is a ``NewtonEnv`` (without importing Newton for other envs)."""
    return any(
        cls.__name__ == "NewtonEnv" and cls.__module__.startswith("pathgrad.envs.newton")
        for cls in type(env).__mro__
    )


# Geometry ------------------------------------------------------------------------------


def _fibonacci_sphere(count: int) -> np.ndarray:
    """``count`` nearly even points on the unit sphere ``[count, 3]``."""
    index = np.arange(count) + 0.5
    polar = np.arccos(1.0 - 2.0 * index / count)
    azimuth = math.pi * (1.0 + math.sqrt(5.0)) * index
    return np.stack(
        [np.cos(azimuth) * np.sin(polar), np.sin(azimuth) * np.sin(polar), np.cos(polar)], -1
    )


def _ring(radius: float, height: float, count: int = 24) -> np.ndarray:
    angle = np.linspace(0.0, 2.0 * math.pi, count, endpoint=False)
    return np.stack([radius * np.cos(angle), radius * np.sin(angle), np.full(count, height)], -1)


def shape_points(shape_type: int, scale: np.ndarray, source: Any = None) -> np.ndarray | None:
    """Points ``[K, 3]`` on a shape's surface in its own frame (``None``: not drawable).

    Newton's conventions: sphere ``(radius,)``, box half extents, capsule and
    cylinder ``(radius, half_height)`` along local z, cone ``(radius,
    half_height)`` with its base at ``-half_height``, ellipsoid semi-axes, a
    mesh's vertices times ``scale``.
    """
    scale = np.asarray(scale, dtype=np.float64)
    if shape_type == SPHERE:
        return _fibonacci_sphere(64) * scale[0]
    if shape_type == ELLIPSOID:
        return _fibonacci_sphere(96) * scale
    if shape_type == BOX:
        corners = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1], indexing="ij"))
        return corners.reshape(3, -1).T * scale
    if shape_type == CAPSULE:
        radius, half = scale[0], scale[1]
        cap = _fibonacci_sphere(48) * radius
        return np.concatenate([cap + [0.0, 0.0, half], cap - [0.0, 0.0, half]])
    if shape_type == CYLINDER:
        return np.concatenate([_ring(scale[0], scale[1]), _ring(scale[0], -scale[1])])
    if shape_type == CONE:
        return np.concatenate([_ring(scale[0], -scale[1]), [[0.0, 0.0, scale[1]]]])
    if shape_type in (MESH, CONVEX_MESH):
        vertices = getattr(source, "vertices", None)
        if vertices is None or len(vertices) == 0:
            return None
        vertices = np.asarray(vertices, dtype=np.float64).reshape(-1, 3)
        step = max(1, len(vertices) // MAX_MESH_POINTS)
        return vertices[::step] * scale
    return None  # planes are drawn as the ground; height fields and others as the body frame


def _rotation(quaternions: np.ndarray) -> np.ndarray:
    """Rotation matrices ``[..., 3, 3]`` of unit quaternions ``[..., 4]`` (x, y, z, w: Warp's)."""
    q = quaternions / np.linalg.norm(quaternions, axis=-1, keepdims=True)
    x, y, z, w = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
            np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
            np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


def _apply(transforms: np.ndarray, points: np.ndarray) -> np.ndarray:
    """``points`` ``[K, 3]`` moved by transforms ``[..., 7]`` (position, quaternion)."""
    rotation = _rotation(transforms[..., 3:])
    return np.einsum("...ij,kj->...ki", rotation, points) + transforms[..., None, :3]


def convex_hull(points: np.ndarray) -> np.ndarray:
    """The 2-D convex hull of ``points`` ``[K, 2]``, counter-clockwise (Andrew's monotone chain)."""
    unique = np.unique(np.round(points, 9), axis=0)  # sorted by x, then y
    if len(unique) <= 2:
        return unique

    def half(sequence: np.ndarray) -> list:
        chain: list = []
        for point in sequence:
            while len(chain) >= 2:
                (ax, ay), (bx, by) = chain[-2], chain[-1]
                if (bx - ax) * (point[1] - ay) - (by - ay) * (point[0] - ax) > 1e-15:
                    break
                chain.pop()
            chain.append(point)
        return chain[:-1]

    listed = unique.tolist()
    return np.array(half(listed) + half(listed[::-1]))


# Poses -----------------------------------------------------------------------------------


def _world_bodies(env: Any, model: Any) -> np.ndarray:
    """Indices of world 0's bodies in the model (replicated worlds come in order)."""
    world = getattr(model, "body_world", None)
    if world is not None:
        bodies = np.flatnonzero(world.numpy() == 0)
        if len(bodies):
            return bodies
    return np.arange(model.body_count // max(1, int(env.num_envs)))


def body_poses(env: Any, states: list[dict[str, Any]]) -> np.ndarray:
    """World poses ``[len(states), bodies, 7]`` (position, quaternion xyzw) of world 0's bodies.

    From each state's ``body_q`` where the solver carries it, otherwise from
    ``newton.eval_fk`` of its ``joint_q`` and ``joint_qd`` on a fresh Warp
    state (no gradients: for drawing only).
    """
    model = env.simulation.model
    bodies = _world_bodies(env, model)
    if states and all("body_q" in state for state in states):
        return np.stack([np.asarray(state["body_q"], dtype=np.float64) for state in states]
                        ).reshape(len(states), -1, 7)[:, : len(bodies)]  # fmt: skip
    import newton
    import warp as wp

    coordinates, dofs = int(env.coordinates), int(env.dofs)
    q_all = model.joint_q.numpy().copy()
    qd_all = model.joint_qd.numpy().copy()
    joint_q = wp.array(q_all, dtype=wp.float32, device=model.device)
    joint_qd = wp.array(qd_all, dtype=wp.float32, device=model.device)
    target = model.state(requires_grad=False)
    poses = np.empty((len(states), len(bodies), 7))
    for index, state in enumerate(states):
        q_all[:coordinates] = np.asarray(state["joint_q"], dtype=np.float32).reshape(-1)
        if "joint_qd" in state:
            qd_all[:dofs] = np.asarray(state["joint_qd"], dtype=np.float32).reshape(-1)
        joint_q.assign(q_all)
        joint_qd.assign(qd_all)
        newton.eval_fk(model, joint_q, joint_qd, target)
        poses[index] = target.body_q.numpy()[bodies]
    return poses


# The scene ---------------------------------------------------------------------------------


@dataclasses.dataclass
class _Shape:
    body: int  # index among world 0's bodies, -1 for a static shape
    points: np.ndarray  # [K, 3], in the body's frame (static: in the world)
    color: str


@dataclasses.dataclass
class View:
    """One orthographic view: world axes ``dims`` (horizontal, vertical) on ``axes``."""

    axes: Any
    dims: tuple[int, int]
    shapes: list  # one Polygon per moving shape
    origins: Any  # Line2D of the body origins
    joints: Any  # LineCollection: parent origin to child origin
    body_axes: Any  # LineCollection: frame axes of bodies without shapes
    trail: Any | None  # Line2D of the root body's path (top view)


class NewtonBodiesScene:
    """The generic drawing of a ``NewtonEnv``: see the module docstring.

    ``update(index, caption)`` poses every artist for ``frames[index]``,
    ``draw(index, caption)`` also draws it into the canvas (the still part once
    with a fixed camera). ``animated`` lists the artists that move, ``views``
    the two views, ``poses`` the body poses of every frame.
    """

    def __init__(self, env: Any, frames: list[Any]) -> None:
        from matplotlib.collections import LineCollection
        from matplotlib.patches import Polygon

        from pathgrad.rendering.canvas import Backdrop, new_figure

        model = env.simulation.model
        self.frames = frames
        self.figure = figure = new_figure((9.0, 5.0))
        figure.subplots_adjust(left=0.08, right=0.98, bottom=0.1, top=0.84, wspace=0.25)
        self.caption = figure.text(0.5, 0.98, "", ha="center", va="top", fontsize=10)
        self.poses = body_poses(env, [frame.state for frame in frames])
        self._bodies = _world_bodies(env, model)
        self._shapes, ground = self._read_shapes(model, self._bodies)
        self._ground = ground
        self._joints = self._joint_pairs(model, self._bodies)
        shaped = {shape.body for shape in self._shapes}
        self._shapeless = [b for b in range(len(self._bodies)) if b not in shaped]
        self._up = up = int(getattr(model, "up_axis", 2))
        across = [axis for axis in range(3) if axis != up]
        layout = [((across[0], up), "side"), ((across[0], across[1]), "top")]
        self._world_points = self._posed_points()  # [F, P, 3] moving points, for the camera
        self._size = self._robot_size()
        self.views: list[View] = []
        self.animated: list[Any] = []
        for column, (dims, name) in enumerate(layout):
            axes = figure.add_subplot(1, 2, column + 1)
            axes.set_title(f"{name} ({AXIS_NAMES[dims[0]]}-{AXIS_NAMES[dims[1]]})", fontsize=9)
            axes.set_xlabel(f"{AXIS_NAMES[dims[0]]} (m)", fontsize=8)
            axes.set_ylabel(f"{AXIS_NAMES[dims[1]]} (m)", fontsize=8)
            axes.tick_params(labelsize=7)
            axes.set_aspect("equal", adjustable="box")
            if name == "side" and ground is not None:
                axes.axhline(ground, color="0.45", linewidth=2, zorder=0)
                axes.axhspan(ground - 1e3, ground, color="0.92", zorder=-1)
            for shape in self._shapes:
                if shape.body < 0:
                    outline = convex_hull(shape.points[:, dims])
                    axes.add_patch(Polygon(outline, closed=True, color="0.7", zorder=0))
            polygons = [
                axes.add_patch(Polygon(np.zeros((3, 2)), closed=True, facecolor=shape.color,
                                       edgecolor="black", linewidth=0.6, alpha=0.85))
                for shape in self._shapes
                if shape.body >= 0
            ]  # fmt: skip
            trail = None
            if name == "top":
                (trail,) = axes.plot([], [], color="tab:blue", alpha=0.4, linewidth=1)
            joints = axes.add_collection(LineCollection([], colors="0.2", linewidths=1.2))
            body_axes = axes.add_collection(
                LineCollection([], colors=["tab:red", "tab:green", "tab:blue"], linewidths=1.5)
            )
            (origins,) = axes.plot([], [], "o", color="black", markersize=3)
            view = View(axes, dims, polygons, origins, joints, body_axes, trail)
            self.views.append(view)
            self.animated += [*([trail] if trail is not None else []), *polygons, joints,
                              body_axes, origins]  # fmt: skip
        self.animated.append(self.caption)
        self._fixed = self._fit_camera()
        self._backdrop = Backdrop(figure)

    # Model reading ---------------------------------------------------------------------

    @staticmethod
    def _read_shapes(model: Any, bodies: np.ndarray) -> tuple[list[_Shape], float | None]:
        """World 0's drawable shapes (and static ones), and the height of a ground plane."""
        count = int(model.shape_count)
        if count == 0:
            return [], None
        shape_body = model.shape_body.numpy()
        shape_type = model.shape_type.numpy()
        shape_scale = model.shape_scale.numpy().astype(np.float64)
        shape_transform = model.shape_transform.numpy().astype(np.float64)
        flags = model.shape_flags.numpy() if model.shape_flags is not None else np.ones(count)
        world = model.shape_world.numpy() if model.shape_world is not None else np.zeros(count)
        sources = list(getattr(model, "shape_source", []) or [])
        local = {int(body): index for index, body in enumerate(bodies)}
        up = int(getattr(model, "up_axis", 2))
        candidates = [s for s in range(count) if not int(flags[s]) & SITE_FLAG]
        # a body's visible shapes, or its collision shapes where it has none visible (an
        # MJCF geom that collides is drawn by MuJoCo, but Newton's import hides it)
        seen = {int(shape_body[s]) for s in candidates if int(flags[s]) & VISIBLE_FLAG}
        shown = [s for s in candidates
                 if int(flags[s]) & VISIBLE_FLAG or int(shape_body[s]) not in seen]  # fmt: skip
        shapes, ground = [], None
        for s in shown:
            body = int(shape_body[s])
            if body >= 0 and body not in local:
                continue  # another world's copy
            if body < 0 and int(world[s]) not in (-1, 0):
                continue
            if int(shape_type[s]) == PLANE:
                height = float(shape_transform[s][up])
                ground = height if ground is None else max(ground, height)
                continue
            source = sources[s] if s < len(sources) else None
            points = shape_points(int(shape_type[s]), shape_scale[s], source)
            if points is None:
                continue
            points = _apply(shape_transform[s], points)
            index = local.get(body, -1)
            shapes.append(_Shape(index, points, COLORS[index % len(COLORS)] if index >= 0 else ""))
        return shapes, ground

    @staticmethod
    def _joint_pairs(model: Any, bodies: np.ndarray) -> list[tuple[int, int]]:
        """(parent, child) among world 0's bodies, for the joints between two of them."""
        local = {int(body): index for index, body in enumerate(bodies)}
        if int(model.joint_count) == 0:
            return []
        parents, children = model.joint_parent.numpy(), model.joint_child.numpy()
        return [
            (local[int(p)], local[int(c)])
            for p, c in zip(parents, children, strict=True)
            if int(p) in local and int(c) in local
        ]

    # Camera ----------------------------------------------------------------------------

    def _posed_points(self) -> np.ndarray:
        """Every moving shape's points and every body origin, in the world: ``[F, P, 3]``."""
        parts = [self.poses[:, :, :3]]
        for shape in self._shapes:
            if shape.body >= 0:
                parts.append(_apply(self.poses[:, shape.body], shape.points))
        return np.concatenate(parts, axis=1)

    def _robot_size(self) -> float:
        points = self._world_points
        extent = (points.max(axis=1) - points.min(axis=1)).max()
        return max(float(extent), 0.1)

    def _fit_camera(self) -> bool:
        """Set the views' limits; ``True`` for a fixed camera, ``False`` to follow the robot."""
        points = self._world_points
        low, high = points.min(axis=1), points.max(axis=1)  # [F, 3] per frame
        travel = float(np.ptp(0.5 * (low + high), axis=0).max()) if len(points) > 1 else 0.0
        self._follow = travel > self._size
        margin = 0.15 * self._size
        if self._follow:
            half = 0.5 * float((high - low).max()) + margin
            self._half = half
            return False
        span_low, span_high = low.min(axis=0), high.max(axis=0)
        if self._ground is not None:  # the ground in sight below the robot
            span_low[self._up] = min(span_low[self._up], self._ground)
        for view in self.views:
            self._set_limits(view, span_low, span_high, margin)
        return True

    def _set_limits(self, view: View, low: np.ndarray, high: np.ndarray, margin: float) -> None:
        a, b = view.dims
        half = 0.5 * max(high[a] - low[a], high[b] - low[b]) + margin
        centre_a, centre_b = 0.5 * (low[a] + high[a]), 0.5 * (low[b] + high[b])
        view.axes.set_xlim(centre_a - half, centre_a + half)
        view.axes.set_ylim(centre_b - half, centre_b + half)

    # Drawing ---------------------------------------------------------------------------

    def draw(self, index: int, caption: str = "") -> None:
        """Draw frame ``index`` with ``caption`` into the figure's canvas."""
        self.update(index, caption)
        key = (
            "fixed"
            if self._fixed
            else tuple((view.axes.get_xlim(), view.axes.get_ylim()) for view in self.views)
        )
        self._backdrop.draw(key, self.animated)

    def update(self, index: int, caption: str = "") -> None:
        """Pose every artist for frame ``index``, with ``caption`` above."""
        self.caption.set_text(caption)
        pose = self.poses[index]
        origins = pose[:, :3]
        moving = [shape for shape in self._shapes if shape.body >= 0]
        placed = [_apply(pose[shape.body], shape.points) for shape in moving]
        length = 0.15 * self._size
        frame_segments = [  # [S, 2, 3]: the x, y and z axes of each shapeless body
            np.stack([origins[body], origins[body] + length * _rotation(pose[body, 3:])[:, axis]])
            for body in self._shapeless
            for axis in range(3)
        ]
        episode = self.frames[index].episode
        first = index
        while first > 0 and self.frames[first - 1].episode == episode:
            first -= 1
        for view in self.views:
            a, b = view.dims
            for polygon, points in zip(view.shapes, placed, strict=True):
                polygon.set_xy(convex_hull(points[:, [a, b]]))
            view.origins.set_data(origins[:, a], origins[:, b])
            view.joints.set_segments([origins[[p, c]][:, [a, b]] for p, c in self._joints])
            view.body_axes.set_segments([segment[:, [a, b]] for segment in frame_segments])
            if view.trail is not None:
                path = self.poses[first : index + 1, 0, :3]
                view.trail.set_data(path[:, a], path[:, b])
            if self._follow:
                self._follow_robot(view, index)

    def _follow_robot(self, view: View, index: int) -> None:
        """Centre ``view`` on the robot of frame ``index`` (the ground kept at the bottom)."""
        a, b = view.dims
        points, half = self._world_points[index], self._half
        centre = 0.5 * (points.min(axis=0) + points.max(axis=0))
        view.axes.set_xlim(centre[a] - half, centre[a] + half)
        bottom = centre[b] - half
        if b == self._up and self._ground is not None:
            on_ground = self._ground - 0.15 * self._size
            if points[:, b].max() < on_ground + 2 * half - 0.1 * self._size:
                bottom = on_ground
        view.axes.set_ylim(bottom, bottom + 2 * half)
