"""Where a Newton robot's dynamics switch, and a start state away from every switch.

A joint limit's spring starts acting at the limit, and a contact's at touch: at those
points the step is continuous but not differentiable. Central differences whose step
straddles one disagree with the analytic Jacobian, which is right on each side, so a
gradient check started there fails for the wrong reason (Gymnasium's Walker2d starts
with its knees on their limits). :class:`GradientCheckStarts` gives every NewtonEnv

- :meth:`~GradientCheckStarts.switches_near` the limits each coordinate is near and
  the ground clearance, for the message of a failed check, and
- :meth:`~GradientCheckStarts.smooth_start_state`: every limited coordinate moved
  ``margin`` inside its limits and the robot lifted ``clearance`` above the ground
  (along its root's vertical coordinate), for ``pathgrad check-env --start smooth``.
"""

from __future__ import annotations

from typing import Any

import newton
import numpy as np
import torch

from pathgrad.envs.newton.engine.kinematics import rotate

__all__ = ["GradientCheckStarts"]

_SCALAR = (int(newton.JointType.REVOLUTE), int(newton.JointType.PRISMATIC),
           int(newton.JointType.D6))  # fmt: skip


class GradientCheckStarts:
    """A NewtonEnv's switches (limits, ground contact) and a smooth start for gradient checks."""

    simulation: Any
    coordinate_names: list[str]

    def _limited_coordinates(self, coordinates: int) -> list[tuple[int, float, float, str]]:
        """``(coordinate, lower, upper, unit)`` of world 0's limited one-DOF coordinates."""
        model = self.simulation.model
        kinds = model.joint_type.numpy()
        q_start, qd_start = model.joint_q_start.numpy(), model.joint_qd_start.numpy()
        linear = model.joint_dof_dim.numpy()[:, 0]
        lower, upper = model.joint_limit_lower.numpy(), model.joint_limit_upper.numpy()
        found = []
        for joint, kind in enumerate(kinds):
            first, dof = int(q_start[joint]), int(qd_start[joint])
            if first >= coordinates:
                break
            count = int(q_start[joint + 1]) - first
            if int(kind) not in _SCALAR or count != int(qd_start[joint + 1]) - dof:
                continue
            for k in range(count):
                low, high = float(lower[dof + k]), float(upper[dof + k])
                if abs(low) < 1e6 or abs(high) < 1e6:
                    is_linear = int(kind) == int(newton.JointType.PRISMATIC) or (
                        int(kind) == int(newton.JointType.D6) and k < int(linear[joint])
                    )
                    found.append((first + k, low, high, "m" if is_linear else "rad"))
        return found

    def _vertical_coordinate(self) -> int | None:
        """World 0's root coordinate that moves the robot along the up axis, if any."""
        model = self.simulation.model
        up = np.zeros(3)
        up[int(model.up_axis)] = 1.0
        kinds, parents = model.joint_type.numpy(), model.joint_parent.numpy()
        q_start, qd_start = model.joint_q_start.numpy(), model.joint_qd_start.numpy()
        axes, linear = model.joint_axis.numpy(), model.joint_dof_dim.numpy()[:, 0]
        for joint in np.flatnonzero(parents == -1):
            kind, first, dof = int(kinds[joint]), int(q_start[joint]), int(qd_start[joint])
            if kind == int(newton.JointType.FREE):
                return first + int(model.up_axis)
            count = 1 if kind == int(newton.JointType.PRISMATIC) else int(linear[joint])
            if kind not in (int(newton.JointType.PRISMATIC), int(newton.JointType.D6)):
                continue
            for k in range(count):
                if abs(float(np.dot(axes[dof + k], up))) > 0.999:
                    return first + k
            if first > 0:
                break  # world 0's roots only (another world's first joint follows)
        return None

    def _ground_clearance(self, joint_q: torch.Tensor) -> torch.Tensor | None:
        """Per row, the lowest collision sphere's height above the highest ground plane
        (m; Newton's bounding radius of each shape: conservative), or None without contact."""
        if not getattr(self.simulation, "uses_contacts", False):
            return None
        model = self.simulation.model
        world, body = model.shape_world.numpy(), model.shape_body.numpy()
        kinds, frames = model.shape_type.numpy(), model.shape_transform.numpy()
        radius = model.shape_collision_radius.numpy()
        planes = (kinds == int(newton.GeoType.PLANE)) & (body == -1) & (world <= 0)
        ground = float(frames[planes, 2].max()) if planes.any() else 0.0
        mine = np.flatnonzero((world == 0) & (body >= 0))
        if mine.size == 0:
            return None
        positions, quaternions = self.body_poses({"joint_q": joint_q})  # type: ignore[attr-defined]
        local = torch.as_tensor(frames[mine, :3], dtype=positions.dtype)
        index = torch.as_tensor(body[mine], dtype=torch.long)
        centres = positions[:, index] + rotate(quaternions[:, index], local.expand(
            positions.shape[0], -1, -1))  # fmt: skip
        low = centres[..., int(model.up_axis)] - torch.as_tensor(radius[mine], dtype=centres.dtype)
        return low.min(dim=1).values - ground

    def switches_near(self, state: dict[str, torch.Tensor], within: float = 0.02) -> list[str]:
        """The limits some row's coordinate is within ``within`` of (or past), and how close
        the lowest collision shape is to the ground, as phrases for a message."""
        joint_q = state["joint_q"].detach()
        phrases = []
        for coordinate, low, high, unit in self._limited_coordinates(joint_q.shape[1]):
            values = joint_q[:, coordinate]
            for side, limit, gap in (("lower", low, values - low), ("upper", high, high - values)):
                closest = float(gap.min())
                if abs(limit) < 1e6 and closest < within:
                    where = "past" if closest < 0 else "from"
                    phrases.append(f"{self.coordinate_names[coordinate]} {abs(closest):.3g} "
                                   f"{unit} {where} its {side} limit {limit:.3g}")  # fmt: skip
        clearance = self._ground_clearance(joint_q)
        if clearance is not None and float(clearance.min()) < within:
            phrases.append(f"a collision shape within {max(float(clearance.min()), 0.0):.3g} m "
                           "of the ground (touching at 0: contact switches on)")  # fmt: skip
        return phrases

    def smooth_start_state(
        self,
        state: dict[str, torch.Tensor],
        steps: int = 5,
        margin: float = 0.1,
        clearance: float = 0.05,
    ) -> dict[str, torch.Tensor]:
        """``state`` with every limited coordinate at least ``margin`` inside its limits
        (the middle of a narrower range) and the robot lifted until its collision spheres
        are ``clearance`` above the ground after falling freely for ``steps`` env steps,
        where its root moves vertically."""
        joint_q = state["joint_q"].detach().clone()
        for coordinate, low, high, _ in self._limited_coordinates(joint_q.shape[1]):
            low, high = max(low, -1e6), min(high, 1e6)
            if high - low > 2 * margin:
                joint_q[:, coordinate] = joint_q[:, coordinate].clamp(low + margin, high - margin)
            else:
                joint_q[:, coordinate] = 0.5 * (low + high)
        vertical = self._vertical_coordinate()
        gap = self._ground_clearance(joint_q)
        if vertical is not None and gap is not None:
            gravity = float(np.linalg.norm(self.simulation.model.gravity.numpy().reshape(-1, 3)[0]))
            fall = 0.5 * gravity * (steps * float(self.dt)) ** 2  # type: ignore[attr-defined]
            joint_q[:, vertical] += (clearance + fall - gap).clamp_min(0.0)
        smooth = {key: value.detach().clone() for key, value in state.items()}
        smooth["joint_q"] = joint_q
        return smooth
