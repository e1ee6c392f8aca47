"""PointMass: a damped 2-D point mass that must reach a random goal around obstacles."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from pathgrad.core.env_registry import register_learning_env
from pathgrad.envs.base import BatchedDifferentiableEnv, State, check_constants

__all__ = ["PointMass"]


DEFAULT_OBSTACLES = ((0.0, 0.0, 0.25),)


class PointMass(BatchedDifferentiableEnv):
    """Damped point mass on a plane, pushed by a 2-D force towards a goal, around obstacles.

    Units are SI. Constants (keyword arguments):

    - ``dt`` = 0.05 s per step, ``mass`` = 1 kg, ``max_force`` = 2 N per unit
      action, ``damping`` = 0.5 1/s (viscous, per unit mass).
    - Start and goal positions are uniform in the square [-1, 1]^2 m; the
      start velocity is zero. Episodes last ``max_episode_steps`` = 100 steps
      (5 s) and never terminate early.
    - ``control_cost`` = 0.01 per squared unit of action.
    - ``obstacles``: discs ``(x, y, radius)`` in m, by default one of radius
      0.25 m at the origin. The mass passes through them but pays
      ``obstacle_cost`` = 20 per m^2 of squared penetration depth per step.
      Starts and goals drawn inside an obstacle (plus a 0.05 m margin) are
      pushed radially out to its margin.

    Dynamics (semi-implicit Euler), with force ``F = max_force * a`` and no
    clipping of ``a`` (a squashed policy or ``clip_actions_to_space`` bounds it):
    ``v' = v + dt (F / mass - damping v)``, ``p' = p + dt v'``.

    Reward: ``-sqrt(|p' - g|^2 + 0.01^2) - control_cost |a|^2
    - obstacle_cost sum_k max(0, r_k - |p' - c_k|)^2``: the distance, smoothed
    at the goal so that its gradient stays finite, and a penetration penalty
    whose gradient is continuous at the obstacle boundary.

    Observation (6): position, velocity, goal minus position (the obstacles
    are fixed, so the position locates them).
    Metrics: ``final_distance`` (m) and ``success`` (distance below
    ``success_radius`` = 0.1 m) of the state each step ends in;
    ``penetration`` (m), the deepest the mass has been inside an obstacle in
    the episode so far, and ``collision_steps``, the steps it ended inside one
    (both kept in the state, unobserved and without gradient).
    """

    observation_dim = 6
    action_dim = 2
    default_max_episode_steps = 100

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        *,
        dt: float = 0.05,
        mass: float = 1.0,
        max_force: float = 2.0,
        damping: float = 0.5,
        control_cost: float = 0.01,
        success_radius: float = 0.1,
        obstacles: Sequence[Sequence[float]] = DEFAULT_OBSTACLES,
        obstacle_cost: float = 20.0,
        **kwargs,
    ) -> None:
        check_constants(positive={"dt": dt, "mass": mass, "max_force": max_force})
        obstacle_table = torch.tensor([list(map(float, o)) for o in obstacles], dtype=torch.float64)
        if obstacle_table.numel() and (
            obstacle_table.ndim != 2
            or obstacle_table.shape[1] != 3
            or (obstacle_table[:, 2] <= 0).any()
        ):
            raise ValueError("obstacles must be a list of (x, y, radius) with positive radii.")
        check_constants(
            non_negative={
                "damping": damping,
                "control_cost": control_cost,
                "obstacle_cost": obstacle_cost,
            }
        )
        self.dt = float(dt)
        self.mass = float(mass)
        self.max_force = float(max_force)
        self.damping = float(damping)
        self.control_cost = float(control_cost)
        self.success_radius = float(success_radius)
        self.obstacle_cost = float(obstacle_cost)
        self._obstacle_table = obstacle_table.reshape(-1, 3)
        super().__init__(num_envs, device, **kwargs)

    @property
    def obstacles(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Obstacle centres ``[K, 2]`` and radii ``[K]`` in the env's dtype and device."""
        table = self._obstacle_table.to(device=self.device, dtype=self.dtype)
        return table[:, :2], table[:, 2]

    def _outside_obstacles(self, points: torch.Tensor, margin: float = 0.05) -> torch.Tensor:
        """Push points that lie within an obstacle (plus margin) radially out of it."""
        centres, radii = self.obstacles
        for centre, radius in zip(centres, radii, strict=True):
            offset = points - centre
            distance = offset.norm(dim=-1, keepdim=True).clamp_min(1e-9)
            boundary = centre + offset / distance * (radius + margin)
            points = torch.where(distance < radius + margin, boundary, points)
        return points

    def _sample_initial_state(self, num: int) -> State:
        return {
            "position": self._outside_obstacles(self._uniform(-1.0, 1.0, num, 2)),
            "velocity": torch.zeros(num, 2, device=self.device, dtype=self.dtype),
            "goal": self._outside_obstacles(self._uniform(-1.0, 1.0, num, 2)),
            # episode records for the metrics (not observed, no gradient)
            "max_penetration": torch.zeros(num, device=self.device, dtype=self.dtype),
            "collision_steps": torch.zeros(num, device=self.device, dtype=self.dtype),
        }

    def _penetration(self, position: torch.Tensor) -> torch.Tensor:
        """Penetration depth into each obstacle ``[N, K]`` (zero outside)."""
        centres, radii = self.obstacles
        offsets = position.unsqueeze(1) - centres
        distances = torch.sqrt((offsets * offsets).sum(-1) + 1e-12)
        return torch.relu(radii - distances)

    def _dynamics(self, state: State, action: torch.Tensor) -> State:
        acceleration = self.max_force * action / self.mass - self.damping * state["velocity"]
        velocity = state["velocity"] + self.dt * acceleration
        position = state["position"] + self.dt * velocity
        depth = self._deepest(position.detach())
        return {
            "position": position,
            "velocity": velocity,
            "goal": state["goal"],
            "max_penetration": torch.maximum(_record(state, "max_penetration", depth), depth),
            "collision_steps": _record(state, "collision_steps", depth)
            + (depth > 0).to(depth.dtype),
        }

    def _deepest(self, position: torch.Tensor) -> torch.Tensor:
        """Depth ``[N]`` of the deepest obstacle ``position`` is in (zero outside all)."""
        penetration = self._penetration(position)
        if not penetration.shape[-1]:
            return position[..., 0] * 0
        return penetration.amax(-1)

    def _distance(self, state: State) -> torch.Tensor:
        offset = state["goal"] - state["position"]
        return torch.sqrt((offset * offset).sum(-1) + 1e-4)

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        penalty = self.obstacle_cost * self._penetration(next_state["position"]).square().sum(-1)
        return -self._distance(next_state) - self.control_cost * (action * action).sum(-1) - penalty

    def _observe(self, state: State) -> torch.Tensor:
        position = state["position"]
        return torch.cat([position, state["velocity"], state["goal"] - position], dim=-1)

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        offset = state["goal"] - state["position"]
        distance = offset.norm(dim=-1).detach()
        return {
            "final_distance": distance,
            "success": (distance < self.success_radius).to(self.dtype),
            "penetration": state["max_penetration"].detach(),  # deepest of the episode
            "collision_steps": state["collision_steps"].detach(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state; one saved before the episode records existed starts them at 0."""
        saved = dict(state["state"])
        rows = saved["position"].shape[0] if "position" in saved else self.num_envs
        for key in ("max_penetration", "collision_steps"):
            saved.setdefault(key, torch.zeros(rows, dtype=self.dtype))
        super().load_state_dict({**state, "state": saved})


def _record(state: State, key: str, like: torch.Tensor) -> torch.Tensor:
    """An episode record of ``state``, zeros where a hand-made state lacks it."""
    value = state.get(key)
    return torch.zeros_like(like) if value is None else value.detach()


register_learning_env("PointMass", PointMass)
