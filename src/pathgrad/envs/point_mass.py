"""PointMass: a damped 2-D point mass that must reach a random goal."""

from __future__ import annotations

import torch

from pathgrad.env import register_learning_env
from pathgrad.envs.base import BatchedDifferentiableEnv, State

__all__ = ["PointMass"]


class PointMass(BatchedDifferentiableEnv):
    """Damped point mass on a plane, pushed by a 2-D force towards a goal.

    Units are SI. Constants (keyword arguments):

    - ``dt`` = 0.05 s per step, ``mass`` = 1 kg, ``max_force`` = 2 N per unit
      action, ``damping`` = 0.5 1/s (viscous, per unit mass).
    - Start and goal positions are uniform in the square [-1, 1]^2 m; the
      start velocity is zero. Episodes last ``max_episode_steps`` = 100 steps
      (5 s) and never terminate early.
    - ``control_cost`` = 0.01 per squared unit of action.

    Dynamics (semi-implicit Euler), with force ``F = max_force * a`` and no
    clipping of ``a`` (a squashed policy or ``clip_actions_to_space`` bounds it):
    ``v' = v + dt (F / mass - damping v)``, ``p' = p + dt v'``.

    Reward: ``-sqrt(|p' - g|^2 + 0.01^2) - control_cost |a|^2``: the distance,
    smoothed at the goal so that its gradient stays finite.

    Observation (6): position, velocity, goal minus position.
    Metrics: ``final_distance`` (m) and ``success`` (distance below
    ``success_radius`` = 0.1 m), of the state each step ends in.
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
        **kwargs,
    ) -> None:
        for name, value in (("dt", dt), ("mass", mass), ("max_force", max_force)):
            if not value > 0.0:
                raise ValueError(f"{name} must be positive, got {value}.")
        for name, value in (("damping", damping), ("control_cost", control_cost)):
            if not value >= 0.0:
                raise ValueError(f"{name} cannot be negative, got {value}.")
        self.dt = float(dt)
        self.mass = float(mass)
        self.max_force = float(max_force)
        self.damping = float(damping)
        self.control_cost = float(control_cost)
        self.success_radius = float(success_radius)
        super().__init__(num_envs, device, **kwargs)

    def _sample_initial_state(self, num: int) -> State:
        return {
            "position": self._uniform(-1.0, 1.0, num, 2),
            "velocity": torch.zeros(num, 2, device=self.device, dtype=self.dtype),
            "goal": self._uniform(-1.0, 1.0, num, 2),
        }

    def _dynamics(self, state: State, action: torch.Tensor) -> State:
        acceleration = self.max_force * action / self.mass - self.damping * state["velocity"]
        velocity = state["velocity"] + self.dt * acceleration
        return {
            "position": state["position"] + self.dt * velocity,
            "velocity": velocity,
            "goal": state["goal"],
        }

    def _distance(self, state: State) -> torch.Tensor:
        offset = state["goal"] - state["position"]
        return torch.sqrt((offset * offset).sum(-1) + 1e-4)

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        return -self._distance(next_state) - self.control_cost * (action * action).sum(-1)

    def _observe(self, state: State) -> torch.Tensor:
        position = state["position"]
        return torch.cat([position, state["velocity"], state["goal"] - position], dim=-1)

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        offset = state["goal"] - state["position"]
        distance = offset.norm(dim=-1).detach()
        return {
            "final_distance": distance,
            "success": (distance < self.success_radius).to(self.dtype),
        }


register_learning_env("PointMass", PointMass)
