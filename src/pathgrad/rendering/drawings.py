"""How each built-in env looks: one function per env draws one state on matplotlib axes.

A drawing takes the env (for its constants), the state of env row 0 as a
dict of CPU tensors, the states so far (for trails) and the axes, and draws
with plain matplotlib artists. Envs without a drawing of their own are shown
as a bar chart of their observation. Newton envs share the drawing of their
torch twin (cart-pole, reacher) or are projected (the Ant: its torso's path
seen from above and its height).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["DRAWINGS", "drawing_for", "is_3d"]

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


def drawing_for(env: Any) -> Drawing | None:
    """The drawing of ``env``'s class (or of a base class), ``None`` for none."""
    for cls in type(env).__mro__:
        if cls.__name__ in DRAWINGS:
            return DRAWINGS[cls.__name__]
    return None


def is_3d(env: Any) -> bool:
    """Whether the env is drawn on 3-D axes."""
    return any(cls.__name__ in _THREE_D for cls in type(env).__mro__)
