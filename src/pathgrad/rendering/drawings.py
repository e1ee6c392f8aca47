"""How each env looks: a drawing per built-in env, an env's own hook, Newton bodies.

A drawing takes the env (for its constants), the state of env row 0 as a
dict of CPU tensors, the states so far (this episode's, for trails) and the
axes, and draws with plain matplotlib artists on axes cleared before each
frame. What draws an env, first match wins:

1. the env's own ``draw_frame(state, history, axes)`` method (any env: the
   documented hook; a class attribute ``draw_frame_projection = "3d"`` asks for
   3-D axes);
2. the built-in drawing of its class, or of a base class for torch envs; the
   Newton built-ins' drawings (cart-pole and reacher drawn as their torch
   twins, the Ant's torso path from above) only for those exact classes, since
   a subclass may load another model;
3. any other ``NewtonEnv`` (a user's MJCF/URDF robot, a subclass of a built-in):
   its bodies' shapes posed by forward kinematics
   (:class:`~pathgrad.rendering.newton_bodies.NewtonBodiesScene`);
4. otherwise, a bar chart of the observation.

:func:`scene_for` wraps the chosen drawing in a scene: the figure and the
artists that a movie updates frame by frame.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from pathgrad.rendering.canvas import Backdrop, new_figure

__all__ = ["DRAWINGS", "DrawingScene", "drawing_for", "is_3d", "scene_for"]

State = dict[str, torch.Tensor]
Drawing = Callable[[Any, State, list[State], Any], None]


def _point_mass(env: Any, state: State, history: list[State], axes: Any) -> None:
    import matplotlib.patches as patches

    for x, y, radius in env._obstacle_table.tolist():
        axes.add_patch(patches.Circle((x, y), radius, color="0.6"))
    trail = torch.stack([past["position"] for past in history]).numpy()
    axes.plot(trail[:, 0], trail[:, 1], color="tab:blue", alpha=0.4)
    goal, position = state["goal"].tolist(), state["position"].tolist()
    axes.add_patch(patches.Circle(goal, env.success_radius, color="tab:green", alpha=0.3))
    axes.plot(*goal, "*", color="tab:green", markersize=14)
    axes.plot(*position, "o", color="tab:blue", markersize=10)
    _square(axes, 1.2)


def _pendulum(env: Any, state: State, history: list[State], axes: Any) -> None:
    angle = float(state["th"])  # 0: upright
    tip = (math.sin(angle), math.cos(angle))
    axes.plot([0, tip[0]], [0, tip[1]], color="tab:red", linewidth=6, solid_capstyle="round")
    axes.plot(0, 0, "o", color="black")
    _square(axes, 1.3)


def _cart_pole(position: float, angle: float, half_length: float, limit: float, axes: Any) -> None:
    import matplotlib.patches as patches

    axes.plot([-limit, limit], [0, 0], color="0.5")
    for side in (-limit, limit):
        axes.plot([side, side], [-0.3, 0.3], color="0.3", linewidth=3)
    axes.add_patch(patches.Rectangle((position - 0.25, -0.12), 0.5, 0.24, color="tab:blue"))
    tip = (position + 2 * half_length * math.sin(angle), 2 * half_length * math.cos(angle))
    axes.plot([position, tip[0]], [0, tip[1]], color="tab:orange", linewidth=5)
    axes.set_xlim(-limit - 0.3, limit + 0.3)
    axes.set_ylim(-2.4 * half_length, 2.4 * half_length)
    axes.set_aspect("equal")


def _cart_pole_swing_up(env: Any, state: State, history: list[State], axes: Any) -> None:
    _cart_pole(float(state["position"]), float(state["angle"]), env.pole_half_length,
               env.track_limit, axes)  # fmt: skip


def _newton_cart_pole(env: Any, state: State, history: list[State], axes: Any) -> None:
    position, angle = state["joint_q"].tolist()
    _cart_pole(position, angle, env.task.pole_half_length, env.task.track_limit, axes)


def _mountain_car(env: Any, state: State, history: list[State], axes: Any) -> None:
    xs = torch.linspace(-1.2, 0.6, 200)
    axes.plot(xs, torch.sin(3 * xs) * 0.45 + 0.55, color="0.4")
    goal = env.goal_position
    axes.plot([goal, goal], [math.sin(3 * goal) * 0.45 + 0.55, 1.1], color="tab:green")
    x = float(state["position"])
    axes.plot(x, math.sin(3 * x) * 0.45 + 0.55, "o", color="tab:blue", markersize=12)
    axes.set_xlim(-1.25, 0.65)
    axes.set_ylim(-0.05, 1.15)


def _arm(shoulder: float, elbow: float, lengths: tuple, target: list, radius: float, axes: Any):
    import matplotlib.patches as patches

    first = (lengths[0] * math.cos(shoulder), lengths[0] * math.sin(shoulder))
    tip = (first[0] + lengths[1] * math.cos(elbow), first[1] + lengths[1] * math.sin(elbow))
    axes.add_patch(patches.Circle(target, radius, color="tab:green", alpha=0.4))
    axes.plot([0, first[0], tip[0]], [0, first[1], tip[1]], "-o", color="tab:blue", linewidth=5)
    _square(axes, 1.1 * sum(lengths))


def _reacher(env: Any, state: State, history: list[State], axes: Any) -> None:
    q1, q2 = state["q"].tolist()
    _arm(q1, q1 + q2, tuple(env.link_lengths), state["target"].tolist(), env.success_radius,
         axes)  # fmt: skip


def _newton_reacher(env: Any, state: State, history: list[State], axes: Any) -> None:
    q1, q2 = state["joint_q"].tolist()
    length = env.link_length
    _arm(q1, q1 + q2, (length, length), state["target"].tolist(), 0.05, axes)


def _quadrotor(env: Any, state: State, history: list[State], axes: Any) -> None:
    position, rotation = state["position"], state["rotation"]
    trail = torch.stack([past["position"] for past in history]).numpy()
    axes.plot(trail[:, 0], trail[:, 1], trail[:, 2], color="tab:blue", alpha=0.4)
    arm = env.arm_length * 2
    for direction in ((1, 0, 0), (0, 1, 0)):
        offset = rotation @ torch.tensor(direction, dtype=rotation.dtype) * arm
        ends = torch.stack([position - offset, position + offset]).numpy()
        axes.plot(ends[:, 0], ends[:, 1], ends[:, 2], color="black", linewidth=3)
    axes.scatter(*state["target"].tolist(), color="tab:green", marker="*", s=120)
    centre = state["target"].numpy()
    for name, middle in zip("xyz", centre, strict=True):
        getattr(axes, f"set_{name}lim")(middle - 2.0, middle + 2.0)


def _newton_ant(env: Any, state: State, history: list[State], axes: Any) -> None:
    trail = torch.stack([past["joint_q"][:3] for past in history]).numpy()
    axes.plot(trail[:, 0], trail[:, 1], color="tab:blue")
    x, y, z = state["joint_q"][:3].tolist()
    axes.plot(x, y, "o", color="tab:blue", markersize=10)
    axes.text(0.02, 0.02, f"torso height {z:.2f} m", transform=axes.transAxes)
    axes.set_xlim(min(-1.0, trail[:, 0].min() - 0.5), max(1.0, trail[:, 0].max() + 0.5))
    axes.set_ylim(-1.5, 1.5)
    axes.set_xlabel("x (m, forward)")
    axes.set_ylabel("y (m)")


def observation_bars(observation: torch.Tensor, axes: Any) -> None:
    """The fallback drawing: the observation as a bar chart."""
    values = observation.reshape(-1).tolist()
    axes.bar(range(len(values)), values, color="tab:blue")
    axes.set_xlabel("observation entry")


def _square(axes: Any, half: float) -> None:
    axes.set_xlim(-half, half)
    axes.set_ylim(-half, half)
    axes.set_aspect("equal")


DRAWINGS: dict[str, Drawing] = {
    "PointMass": _point_mass,
    "Pendulum": _pendulum,
    "CartPoleSwingUp": _cart_pole_swing_up,
    "MountainCarContinuous": _mountain_car,
    "Reacher": _reacher,
    "Quadrotor": _quadrotor,
    "NewtonCartPoleSwingUp": _newton_cart_pole,
    "NewtonReacher": _newton_reacher,
    "NewtonAnt": _newton_ant,
}
_THREE_D = {"Quadrotor"}
_NEWTON_PACKAGE = "pathgrad.envs.newton"


def unwrapped(env: Any) -> Any:
    """The env inside wrappers that keep it as ``.env`` (the env itself otherwise)."""
    for _ in range(16):
        inner = getattr(env, "env", None)
        if inner is None or inner is env or not hasattr(inner, "step"):
            return env
        env = inner
    return env


def _hook(env: Any) -> Drawing | None:
    method = getattr(type(env), "draw_frame", None)
    if method is None or not callable(method):
        return None
    return lambda env, state, history, axes: env.draw_frame(state, history, axes)


def _builtin(env: Any) -> Drawing | None:
    cls = type(env)
    if cls.__module__.startswith(_NEWTON_PACKAGE):  # a built-in Newton env: its own class only
        return DRAWINGS.get(cls.__name__)
    for base in cls.__mro__:
        if base.__module__.startswith(_NEWTON_PACKAGE):
            return None  # a user's NewtonEnv subclass: the generic drawing
        if base.__name__ in DRAWINGS:
            return DRAWINGS[base.__name__]
    return None


def drawing_for(env: Any) -> Drawing | None:
    """The drawing function of ``env``: its ``draw_frame`` hook or its class's built-in one.

    ``None`` when there is neither: a ``NewtonEnv`` is then drawn from its
    bodies (:func:`scene_for`), any other env as its observation's bars.
    """
    env = unwrapped(env)
    return _hook(env) or _builtin(env)


def is_3d(env: Any) -> bool:
    """Whether the env is drawn on 3-D axes (its drawing function's)."""
    env = unwrapped(env)
    if _hook(env) is not None:
        return getattr(type(env), "draw_frame_projection", None) == "3d"
    return any(cls.__name__ in _THREE_D for cls in type(env).__mro__)


def _drawn(axes: Any) -> list[Any]:
    """The artists a drawing added to ``axes``: lines, patches, collections, texts,
    images, tables, other artists and the legend."""
    groups = (axes.lines, axes.patches, axes.collections, axes.texts, axes.images,
              axes.artists, axes.tables)  # fmt: skip
    legend = [axes.legend_] if axes.legend_ is not None else []
    return [artist for group in groups for artist in group] + legend


def clear_drawn(axes: Any) -> None:
    """Remove what a drawing added to ``axes``, keeping the axes themselves:
    ``axes.clear()`` would rebuild the ticks and spines, which makes the next
    draw of the figure 3x slower."""
    for artist in _drawn(axes):
        artist.remove()


def _still_key(axes: Any) -> tuple:
    """What an axes' frame (panes, ticks, labels, spines) depends on."""
    key = (axes.get_xlim(), axes.get_ylim(), axes.get_xlabel(), axes.get_ylabel(),
           axes.get_aspect(), axes.get_xscale(), axes.get_yscale())  # fmt: skip
    if axes.name == "3d":
        key += (axes.get_zlim(), axes.get_zlabel(), axes.elev, axes.azim, axes.roll)
    return key


class DrawingScene:
    """A drawing function as a scene: each frame removes what the last one drew and
    draws again.

    The caption is the axes' title. Limits the drawing does not set follow its
    artists. What the drawing adds is drawn over a saved image of the rest
    (axes, ticks, labels), drawn again only when the limits or labels change.
    """

    def __init__(self, env: Any, frames: list[Any], drawing: Drawing | None) -> None:
        self.env, self.frames, self.drawing = env, frames, drawing
        self.figure = new_figure((5.0, 5.0))
        projection = None
        if drawing is not None and _hook(env) is not None:
            projection = getattr(type(env), "draw_frame_projection", None)
        elif drawing is not None and is_3d(env):
            projection = "3d"
        if projection == "3d":
            import mpl_toolkits.mplot3d  # noqa: F401  (registers the projection)
        self.axes = self.figure.add_subplot(projection=projection)
        self._backdrop = Backdrop(self.figure)

    def draw(self, index: int, caption: str) -> None:
        """Draw frame ``index`` anew, with ``caption`` above, into the canvas."""
        frame, axes = self.frames[index], self.axes
        clear_drawn(axes)
        history = [f.state for f in self.frames[: index + 1] if f.episode == frame.episode]
        if self.drawing is not None and frame.state:
            self.drawing(self.env, frame.state, history, axes)
        else:
            observation_bars(frame.observation, axes)
        axes.set_title(caption, fontsize=10)
        if axes.name != "3d":
            axes.relim()  # the data limits of this frame's artists only
        self._backdrop.draw(_still_key(axes), [*_drawn(axes), axes.title])


def scene_for(env: Any, frames: list[Any]) -> Any:
    """The scene that draws ``frames`` of ``env`` (see the module docstring).

    A scene has ``figure`` (on an Agg canvas) and ``draw(index, caption)``,
    which leaves frame ``index`` drawn in the figure's canvas.
    """
    from pathgrad.rendering.newton_bodies import is_newton_env

    inner = unwrapped(env)
    drawing = drawing_for(inner)
    if drawing is None and is_newton_env(inner) and frames and frames[0].state:
        from pathgrad.rendering.newton_bodies import NewtonBodiesScene

        return NewtonBodiesScene(inner, frames)
    return DrawingScene(inner, frames, drawing)
