"""CartPoleSwingUp: swing a hanging pole up and balance it over a centred cart."""

from __future__ import annotations

import math

import torch

from pathgrad.core.env_registry import register_learning_env
from pathgrad.envs.base import BatchedDifferentiableEnv, State, check_constants

__all__ = ["CartPoleSwingUp"]


class CartPoleSwingUp(BatchedDifferentiableEnv):
    """Cart on a frictionless track with a free pole, pushed by a 1-D force.

    Units are SI; ``theta`` is the pole angle in rad, 0 upright, positive when
    the pole leans towards +x. Constants (keyword arguments), those of
    Gymnasium's CartPole unless noted:

    - ``gravity`` = 9.8 m/s^2, ``cart_mass`` = 1.0 kg, ``pole_mass`` = 0.1 kg,
      ``pole_half_length`` = 0.5 m (the pole is a uniform rod of length 1 m),
      ``force_mag`` = 10 N per unit action, ``dt`` = 0.02 s per step.
    - Start: the pole hangs down, ``theta`` uniform in pi + [-s, s] rad with
      ``initial_angle_spread`` s = 0.1 (pathgrad's option: up to pi, every angle),
      ``x`` uniform in [-0.1, 0.1] m, both velocities uniform in [-0.05, 0.05].
      Episodes last ``max_episode_steps`` = 500 steps (10 s) and never
      terminate early; ``theta`` is not wrapped.
    - Soft track limit (not in Gymnasium): past ``track_limit`` = 2.4 m a
      spring of ``wall_stiffness`` = 1000 N/m pushes the cart back, through a
      softplus of sharpness ``wall_sharpness`` = 50 1/m, so the dynamics stay
      smooth (C-infinity) and nothing resets mid-episode.
    - ``centre_width`` = 0.5 m, ``control_cost`` = 0.01 per squared unit of action.

    Dynamics (Gymnasium CartPole's equations, semi-implicit Euler: velocities
    first, then positions with the new velocities), with ``M = cart_mass +
    pole_mass``, ``l = pole_half_length``, ``m = pole_mass``, no clipping of
    ``a`` (a squashed policy or ``clip_actions_to_space`` bounds it)::

        sp(u)  = log(1 + exp(wall_sharpness u)) / wall_sharpness
        F      = force_mag a - wall_stiffness (sp(x - track_limit) - sp(-x - track_limit))
        temp   = (F + m l thdot^2 sin th) / M
        thacc  = (g sin th - cos th temp) / (l (4/3 - m cos^2 th / M))
        xacc   = temp - m l thacc cos th / M
        xdot'  = xdot + dt xacc,   thdot' = thdot + dt thacc
        x'     = x + dt xdot',     th'    = th + dt thdot'

    Reward, of the state the step ends in: ``upright * centred - control_cost a^2``
    with ``upright = (1 + cos th') / 2`` and ``centred = (1 + exp(-x'^2 /
    (2 centre_width^2))) / 2``; it lies in [-control_cost, 1] per step.
    pathgrad's training option ``energy_shaping`` w > 0 adds the potential-based
    term ``shaping_discount Phi(s') - Phi(s)`` with ``Phi = -w e^2`` and ``e`` the
    pole's :meth:`energy_gap` (it leaves the optimal policies unchanged for the
    discount ``shaping_discount``; Ng et al., 1999); for ``env.train_cfg``.

    Observation (5): ``x``, ``xdot``, ``cos th``, ``sin th``, ``thdot``.
    Metrics, of the state each step ends in: ``upright`` (``cos th``),
    ``cart_position`` (m) and ``success`` (``cos th > 0.95`` and ``|x| < 0.5`` m).
    """

    observation_dim = 5
    action_dim = 1
    default_max_episode_steps = 500

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        *,
        gravity: float = 9.8,
        cart_mass: float = 1.0,
        pole_mass: float = 0.1,
        pole_half_length: float = 0.5,
        force_mag: float = 10.0,
        dt: float = 0.02,
        track_limit: float = 2.4,
        wall_stiffness: float = 1000.0,
        wall_sharpness: float = 50.0,
        centre_width: float = 0.5,
        control_cost: float = 0.01,
        initial_angle_spread: float = 0.1,
        energy_shaping: float = 0.0,
        shaping_discount: float = 0.99,
        **kwargs,
    ) -> None:
        if not 0.0 <= initial_angle_spread <= math.pi:
            raise ValueError(
                f"initial_angle_spread must be in [0, pi], got {initial_angle_spread}."
            )
        check_constants(
            positive={
                "cart_mass": cart_mass,
                "pole_mass": pole_mass,
                "pole_half_length": pole_half_length,
                "force_mag": force_mag,
                "dt": dt,
                "track_limit": track_limit,
                "wall_sharpness": wall_sharpness,
                "centre_width": centre_width,
            },
            non_negative={
                "gravity": gravity,
                "wall_stiffness": wall_stiffness,
                "control_cost": control_cost,
                "energy_shaping": energy_shaping,
            },
        )
        self.gravity = float(gravity)
        self.cart_mass = float(cart_mass)
        self.pole_mass = float(pole_mass)
        self.pole_half_length = float(pole_half_length)
        self.force_mag = float(force_mag)
        self.dt = float(dt)
        self.track_limit = float(track_limit)
        self.wall_stiffness = float(wall_stiffness)
        self.wall_sharpness = float(wall_sharpness)
        self.centre_width = float(centre_width)
        self.control_cost = float(control_cost)
        self.initial_angle_spread = float(initial_angle_spread)
        if energy_shaping > 0.0 and not gravity > 0.0:
            raise ValueError("energy_shaping needs gravity > 0 (the energy gap is scaled by it).")
        if not 0.0 < shaping_discount <= 1.0:
            raise ValueError(f"shaping_discount must be in (0, 1], got {shaping_discount}.")
        self.energy_shaping = float(energy_shaping)
        self.shaping_discount = float(shaping_discount)
        super().__init__(num_envs, device, **kwargs)

    def _sample_initial_state(self, num: int) -> State:
        return {
            "position": self._uniform(-0.1, 0.1, num),
            "velocity": self._uniform(-0.05, 0.05, num),
            "angle": math.pi
            + self._uniform(-self.initial_angle_spread, self.initial_angle_spread, num),
            "angular_velocity": self._uniform(-0.05, 0.05, num),
        }

    def _softplus(self, u: torch.Tensor) -> torch.Tensor:
        """``log(1 + exp(wall_sharpness u)) / wall_sharpness``, smooth and overflow-free."""
        scaled = self.wall_sharpness * u
        return torch.logaddexp(scaled, torch.zeros_like(scaled)) / self.wall_sharpness

    def wall_force(self, position: torch.Tensor) -> torch.Tensor:
        """Restoring force (N) of the soft track limit at cart ``position`` (m)."""
        outside = self._softplus(position - self.track_limit)
        outside = outside - self._softplus(-position - self.track_limit)
        return -self.wall_stiffness * outside

    def _dynamics(self, state: State, action: torch.Tensor) -> State:
        x, x_dot = state["position"], state["velocity"]
        theta, theta_dot = state["angle"], state["angular_velocity"]
        total_mass = self.cart_mass + self.pole_mass
        pole_moment = self.pole_mass * self.pole_half_length
        cos, sin = torch.cos(theta), torch.sin(theta)
        force = self.force_mag * action[:, 0] + self.wall_force(x)
        temp = (force + pole_moment * theta_dot * theta_dot * sin) / total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.pole_half_length * (4.0 / 3.0 - self.pole_mass * cos * cos / total_mass)
        )
        x_acc = temp - pole_moment * theta_acc * cos / total_mass
        x_dot = x_dot + self.dt * x_acc
        theta_dot = theta_dot + self.dt * theta_acc
        return {
            "position": x + self.dt * x_dot,
            "velocity": x_dot,
            "angle": theta + self.dt * theta_dot,
            "angular_velocity": theta_dot,
        }

    def energy_gap(self, state: State) -> torch.Tensor:
        """``(E - E_top) / (2 m g l)`` of the pole about its pivot: -1 hanging still, 0 upright."""
        mass, half = self.pole_mass, self.pole_half_length
        inertia = 4.0 / 3.0 * mass * half * half  # a uniform rod about its end
        spin = state["angular_velocity"]
        height = mass * self.gravity * half  # potential energy upright, above the pivot
        energy = 0.5 * inertia * spin * spin + height * torch.cos(state["angle"])
        return (energy - height) / (2.0 * height)

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        upright = 0.5 * (1.0 + torch.cos(next_state["angle"]))
        x = next_state["position"]
        centred = 0.5 * (1.0 + torch.exp(-x * x / (2.0 * self.centre_width**2)))
        reward = upright * centred - self.control_cost * (action * action).sum(-1)
        if self.energy_shaping > 0.0:  # potential-based: gamma Phi(s') - Phi(s)
            before = -self.energy_shaping * self.energy_gap(state).square()
            after = -self.energy_shaping * self.energy_gap(next_state).square()
            reward = reward + self.shaping_discount * after - before
        return reward

    def _observe(self, state: State) -> torch.Tensor:
        theta = state["angle"]
        return torch.stack(
            [
                state["position"],
                state["velocity"],
                torch.cos(theta),
                torch.sin(theta),
                state["angular_velocity"],
            ],
            dim=-1,
        )

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        cos = torch.cos(state["angle"]).detach()
        position = state["position"].detach()
        return {
            "upright": cos,
            "cart_position": position,
            "success": ((cos > 0.95) & (position.abs() < 0.5)).to(self.dtype),
        }


register_learning_env("CartPoleSwingUp", CartPoleSwingUp)
