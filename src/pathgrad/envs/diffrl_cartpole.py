"""DiffRLCartPoleSwingUp: the cart-pole swing-up task of the SHAC paper (Xu et al., ICLR 2022).

The task definition of the paper's public code (DiffRL's ``CartPoleSwingUpEnv``
on dflex), rebuilt from its published facts as a torch env so SHAC can be
compared with the paper on its own task. Those facts:

- A 1 kg cart on a prismatic joint limited to [-4, 4] m and a 10 kg pole on a
  revolute joint; the pole's centre of mass 0.5 m from the pivot, its inertia
  about the centre of mass 1.0 kg m^2 (the asset's values, not a thin rod's).
- Action clipped to [-1, 1], times ``action_strength`` = 1000 N on the cart.
- ``dt`` = 1/60 s per step, integrated as 4 semi-implicit Euler substeps of
  dt/4 each; the mass matrix is evaluated at the first substep of each step
  and reused for the other three (the paper's ``MM_caching_frequency`` = 4;
  ``mass_matrix_substeps``); episodes of 240 steps (4 s), no early
  termination; gravity 9.81 m/s^2.
- Joint limit: past a limit a spring of 100 N/m (and a 1 N s/m damper against
  the motion past it) pushes the cart back, as the simulator's joint limits do.
- Start: the pole hanging (``theta`` = pi, 0 is upright) and the cart at rest
  at 0; with ``stochastic_init`` (the paper's SHAC setting) ``x`` and
  ``theta`` get pi (U - 0.5) each and both velocities 0.5 (U - 0.5).
- Reward per step: ``-theta^2 - 0.1 thetadot^2 - 0.05 x^2 - 0.1 xdot^2``,
  ``theta`` wrapped to [-pi, pi] (an episode hanging still scores about -2370;
  balanced at the centre, 0).
- Observation (5): ``x, xdot, sin theta, cos theta, thetadot``.

Equations of motion (Lagrange, ``M`` cart mass, ``m`` pole mass, ``l`` pivot
to centre of mass, ``I`` pole inertia about it, ``F`` cart force plus limit)::

    [M + m,        m l cos th] [xacc ]   [F + m l sin th thdot^2]
    [m l cos th,   I + m l^2 ] [thacc] = [m g l sin th          ]

Each substep: velocities from the accelerations, then positions from the new
velocities. Metrics: ``upright`` (cos th) and ``success`` (cos th > 0.95 and
``|x|`` < 0.5 m).
"""

from __future__ import annotations

import math

import torch

from pathgrad.core.env_registry import register_learning_env
from pathgrad.envs.base import BatchedDifferentiableEnv, State, check_constants

__all__ = ["DiffRLCartPoleSwingUp"]


class DiffRLCartPoleSwingUp(BatchedDifferentiableEnv):
    """The SHAC paper's cart-pole swing-up (see the module docstring for its definition)."""

    observation_dim = 5
    action_dim = 1
    default_max_episode_steps = 240

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        *,
        stochastic_init: bool = True,
        gravity: float = 9.81,
        cart_mass: float = 1.0,
        pole_mass: float = 10.0,
        pole_com_distance: float = 0.5,
        pole_inertia: float = 1.0,
        action_strength: float = 1000.0,
        dt: float = 1.0 / 60.0,
        substeps: int = 4,
        mass_matrix_substeps: int = 4,
        track_limit: float = 4.0,
        limit_stiffness: float = 100.0,
        limit_damping: float = 1.0,
        **kwargs,
    ) -> None:
        check_constants(
            positive={
                "cart_mass": cart_mass, "pole_mass": pole_mass,
                "pole_com_distance": pole_com_distance, "pole_inertia": pole_inertia,
                "action_strength": action_strength, "dt": dt, "track_limit": track_limit,
            },
            non_negative={
                "gravity": gravity, "limit_stiffness": limit_stiffness,
                "limit_damping": limit_damping,
            },
        )  # fmt: skip
        for name, value in (("substeps", substeps), ("mass_matrix_substeps", mass_matrix_substeps)):
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        self.mass_matrix_substeps = int(mass_matrix_substeps)
        self.stochastic_init = bool(stochastic_init)
        self.gravity, self.cart_mass, self.pole_mass = float(gravity), cart_mass, pole_mass
        self.pole_com_distance, self.pole_inertia = float(pole_com_distance), pole_inertia
        self.action_strength, self.dt, self.substeps = action_strength, float(dt), int(substeps)
        self.track_limit = float(track_limit)
        self.limit_stiffness, self.limit_damping = float(limit_stiffness), float(limit_damping)
        super().__init__(num_envs, device, **kwargs)

    def _sample_initial_state(self, num: int) -> State:
        zeros = torch.zeros(num, dtype=self.dtype, device=self.device)
        state = {"position": zeros, "velocity": zeros, "angle": zeros + math.pi,
                 "angular_velocity": zeros}  # fmt: skip
        if self.stochastic_init:
            half = math.pi / 2
            state["position"] = state["position"] + self._uniform(-half, half, num)
            state["angle"] = state["angle"] + self._uniform(-half, half, num)
            state["velocity"] = state["velocity"] + self._uniform(-0.25, 0.25, num)
            state["angular_velocity"] = state["angular_velocity"] + self._uniform(-0.25, 0.25, num)
        return state

    def limit_force(self, x: torch.Tensor, x_dot: torch.Tensor) -> torch.Tensor:
        """Force (N) of the track limits at cart position ``x`` and velocity ``x_dot``."""
        below = x < -self.track_limit
        above = x > self.track_limit
        force = torch.where(
            below,
            self.limit_stiffness * (-self.track_limit - x)
            - self.limit_damping * x_dot.clamp(max=0),
            torch.zeros_like(x),
        )
        return torch.where(
            above,
            self.limit_stiffness * (self.track_limit - x) - self.limit_damping * x_dot.clamp(min=0),
            force,
        )

    def _dynamics(self, state: State, action: torch.Tensor) -> State:
        x, x_dot = state["position"], state["velocity"]
        theta, theta_dot = state["angle"], state["angular_velocity"]
        push = self.action_strength * action[:, 0].clamp(-1.0, 1.0)
        total = self.cart_mass + self.pole_mass
        moment = self.pole_mass * self.pole_com_distance
        pole = self.pole_inertia + self.pole_mass * self.pole_com_distance**2
        h = self.dt / self.substeps
        for substep in range(self.substeps):
            cos, sin = torch.cos(theta), torch.sin(theta)
            if substep % self.mass_matrix_substeps == 0:  # the reference caches it
                coupling = moment * cos
                determinant = total * pole - coupling * coupling
            cart_force = push + self.limit_force(x, x_dot) + moment * sin * theta_dot**2
            pole_torque = moment * self.gravity * sin
            x_acc = (pole * cart_force - coupling * pole_torque) / determinant
            theta_acc = (total * pole_torque - coupling * cart_force) / determinant
            x_dot = x_dot + h * x_acc
            theta_dot = theta_dot + h * theta_acc
            x = x + h * x_dot
            theta = theta + h * theta_dot
        return {"position": x, "velocity": x_dot, "angle": theta, "angular_velocity": theta_dot}

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        theta = torch.remainder(next_state["angle"] + math.pi, 2 * math.pi) - math.pi
        return -(
            theta**2
            + 0.1 * next_state["angular_velocity"] ** 2
            + 0.05 * next_state["position"] ** 2
            + 0.1 * next_state["velocity"] ** 2
        )

    def _observe(self, state: State) -> torch.Tensor:
        theta = state["angle"]
        return torch.stack(
            [state["position"], state["velocity"], torch.sin(theta), torch.cos(theta),
             state["angular_velocity"]], dim=-1,
        )  # fmt: skip

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        cos = torch.cos(state["angle"]).detach()
        position = state["position"].detach()
        return {
            "upright": cos,
            "success": ((cos > 0.95) & (position.abs() < 0.5)).to(self.dtype),
        }


register_learning_env("DiffRLCartPoleSwingUp", DiffRLCartPoleSwingUp)
