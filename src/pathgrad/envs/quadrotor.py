"""Quadrotor: a 3-D rigid-body X-quadrotor that must reach and hover at a waypoint."""

from __future__ import annotations

import math

import torch

from pathgrad.core.env_registry import register_learning_env
from pathgrad.envs.base import BatchedDifferentiableEnv, State, check_constants

__all__ = ["Quadrotor"]

# Rotor layout of the X configuration, in units of ``arm_length / sqrt(2)``:
# 0 front-right, 1 back-right, 2 back-left, 3 front-left (body x forward, y left, z up).
_ROTOR_X = (1.0, -1.0, -1.0, 1.0)
_ROTOR_Y = (-1.0, -1.0, 1.0, 1.0)
# Yaw reaction torque sign per rotor: 0 and 2 spin counter-clockwise seen from above
# (reaction torque along -z), 1 and 3 clockwise (+z).
_ROTOR_SPIN = (-1.0, 1.0, -1.0, 1.0)


class Quadrotor(BatchedDifferentiableEnv):
    """Rigid-body quadrotor in 3-D, flown by four rotor thrusts to a random waypoint.

    Units are SI. World frame: z up, gravity ``-gravity`` along z. Body frame:
    x forward, y left, z along the rotor axes. Constants (keyword arguments),
    a generic 1 kg quadrotor by default:

    - ``dt`` = 0.02 s per step, split into ``substeps`` = 1 integration steps.
    - ``mass`` = 1 kg, ``inertia`` = (0.01, 0.01, 0.02) kg m^2 (diagonal, body
      frame), ``arm_length`` = 0.2 m (centre to rotor), ``gravity`` = 9.81 m/s^2.
    - Four rotors in X configuration at body ``(x, y) = arm_length / sqrt(2) *``
      (+1, -1), (-1, -1), (-1, +1), (+1, +1) (front-right, back-right, back-left,
      front-left). Rotor ``i`` pushes ``T_i`` along body z and adds the yaw torque
      ``s_i k_drag T_i`` with ``s = (-1, +1, -1, +1)`` (``k_drag`` = 0.016 m).
    - ``thrust_range`` = 1.0: ``T_i = T_hover (1 + thrust_range a_i)`` with
      ``T_hover = mass gravity / 4``, so ``a = 0`` hovers, ``a_i = -1`` cuts
      rotor ``i`` and ``a_i = +1`` doubles it (thrust-to-weight 2). ``a`` is not
      clipped (a squashed policy or ``clip_actions_to_space`` bounds it).
    - ``linear_drag`` = 0 1/s: optional viscous drag per unit mass.
    - Episodes last ``max_episode_steps`` = 250 steps (5 s) and never terminate
      early (no crash: the dynamics stay smooth everywhere).

    Dynamics (semi-implicit Euler per substep of length ``h``), with total thrust
    ``T = sum_i T_i``, torque ``tau = (sum_i y_i T_i, -sum_i x_i T_i, k_drag
    sum_i s_i T_i)``, body-to-world rotation ``R`` and body angular velocity ``w``:

    - ``v' = v + h (R e_z T / mass - gravity e_z - linear_drag v)``, ``p' = p + h v'``;
    - Euler's equations ``I w_dot = tau - w x (I w)`` as a torque kick followed by
      a rotation: ``u = w + h I^-1 tau``, ``F = exp(h [u]_x)``, ``R' = R F``,
      ``w' = I^-1 F^T I u``. To first order ``w' = w + h I^-1 (tau - w x (I w))``,
      and the world angular momentum ``R I w`` changes by exactly ``h R tau``
      (it is conserved when torque-free).
    - ``exp`` is Rodrigues' formula, with series coefficients near zero rotation
      so it is smooth there; one Bjorck step ``R <- R (3 I - R^T R) / 2`` after
      each substep keeps ``R`` orthonormal to rounding.

    Reset: position uniform in [-0.1, 0.1]^3 m, waypoint uniform in [-1, 1]^3 m,
    attitude ``exp([r]_x)`` with rotation vector ``r`` uniform in [-0.1, 0.1]^3 rad,
    velocity uniform in [-0.1, 0.1]^3 m/s, angular velocity in [-0.1, 0.1]^3 rad/s.

    Reward of the state ``(p', v', R', w')`` a step ends in::

        -sqrt(|p' - target|^2 + 0.01^2) - velocity_cost |v'|^2
        - angular_velocity_cost |w'|^2 - tilt_cost (1 - R'_zz) - control_cost |a|^2

    with defaults 0.01, 0.001, 0.1 and 0.01: the distance, smoothed at the
    waypoint so its gradient stays finite, plus small hover-shaping penalties.

    Observation (18): target minus position (3), velocity (3), ``R`` flattened
    row-major (9, left unnormalised by ``observation_normalize_mask``), body
    angular velocity (3). Metrics: ``final_position_error`` (m) and ``success``
    (error below ``success_radius`` = 0.1 m), of the state each step ends in.
    """

    observation_dim = 18
    action_dim = 4
    default_max_episode_steps = 250
    observation_normalize_mask = [True] * 6 + [False] * 9 + [True] * 3

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        *,
        dt: float = 0.02,
        substeps: int = 1,
        mass: float = 1.0,
        inertia: tuple[float, float, float] = (0.01, 0.01, 0.02),
        arm_length: float = 0.2,
        k_drag: float = 0.016,
        thrust_range: float = 1.0,
        gravity: float = 9.81,
        linear_drag: float = 0.0,
        velocity_cost: float = 0.01,
        angular_velocity_cost: float = 0.001,
        tilt_cost: float = 0.1,
        control_cost: float = 0.01,
        success_radius: float = 0.1,
        **kwargs,
    ) -> None:
        check_constants(
            positive={
                "dt": dt,
                "mass": mass,
                "arm_length": arm_length,
                "thrust_range": thrust_range,
                "success_radius": success_radius,
            },
            non_negative={
                "k_drag": k_drag,
                "gravity": gravity,
                "linear_drag": linear_drag,
                "velocity_cost": velocity_cost,
                "angular_velocity_cost": angular_velocity_cost,
                "tilt_cost": tilt_cost,
                "control_cost": control_cost,
            },
        )
        if int(substeps) != substeps or int(substeps) <= 0:
            raise ValueError(f"substeps must be a positive integer, got {substeps}.")
        inertia = tuple(float(value) for value in inertia)
        if len(inertia) != 3 or not all(value > 0.0 for value in inertia):
            raise ValueError(f"inertia must be three positive moments, got {inertia}.")
        self.dt = float(dt)
        self.substeps = int(substeps)
        self.mass = float(mass)
        self.inertia = inertia
        self.arm_length = float(arm_length)
        self.k_drag = float(k_drag)
        self.thrust_range = float(thrust_range)
        self.gravity = float(gravity)
        self.linear_drag = float(linear_drag)
        self.velocity_cost = float(velocity_cost)
        self.angular_velocity_cost = float(angular_velocity_cost)
        self.tilt_cost = float(tilt_cost)
        self.control_cost = float(control_cost)
        self.success_radius = float(success_radius)
        self.hover_thrust = self.mass * self.gravity / 4.0
        super().__init__(num_envs, device, **kwargs)
        # Constant tensors: per-rotor mixer rows and the inertia diagonal.
        arm = self.arm_length / math.sqrt(2.0)
        mixer = [
            [1.0] * 4,
            [arm * y for y in _ROTOR_Y],
            [-arm * x for x in _ROTOR_X],
            [self.k_drag * s for s in _ROTOR_SPIN],
        ]
        self._mixer = torch.tensor(mixer, device=self.device, dtype=self.dtype)
        self._inertia = torch.tensor(inertia, device=self.device, dtype=self.dtype)

    # Helpers.
    def rotor_thrusts(self, action: torch.Tensor) -> torch.Tensor:
        """Rotor thrusts ``[N, 4]`` (N) of ``action``: ``T_hover (1 + thrust_range a)``."""
        return self.hover_thrust * (1.0 + self.thrust_range * action)

    def _sample_initial_state(self, num: int) -> State:
        return {
            "position": self._uniform(-0.1, 0.1, num, 3),
            "velocity": self._uniform(-0.1, 0.1, num, 3),
            "rotation": _exp_so3(self._uniform(-0.1, 0.1, num, 3)),
            "angular_velocity": self._uniform(-0.1, 0.1, num, 3),
            "target": self._uniform(-1.0, 1.0, num, 3),
        }

    def _dynamics(self, state: State, action: torch.Tensor) -> State:
        # Total thrust and body torques: [N, 4] = thrusts @ mixer^T.
        wrench = self.rotor_thrusts(action) @ self._mixer.T
        thrust, torque = wrench[:, :1], wrench[:, 1:]
        gravity = torch.zeros(3, device=self.device, dtype=self.dtype)
        gravity[2] = -self.gravity
        inertia = self._inertia
        h = self.dt / self.substeps
        position, velocity = state["position"], state["velocity"]
        rotation, omega = state["rotation"], state["angular_velocity"]
        for _ in range(self.substeps):
            acceleration = rotation[:, :, 2] * (thrust / self.mass) + gravity
            acceleration = acceleration - self.linear_drag * velocity
            velocity = velocity + h * acceleration
            position = position + h * velocity
            # Torque kick, then rotation by the kicked rate; the body momentum is
            # counter-rotated by the same increment (Euler's gyroscopic term).
            omega = omega + h * torque / inertia
            increment = _exp_so3(h * omega)
            momentum = (increment.transpose(-1, -2) @ (inertia * omega)[:, :, None])[:, :, 0]
            omega = momentum / inertia
            rotation = _orthonormalize(rotation @ increment)
        return {
            "position": position,
            "velocity": velocity,
            "rotation": rotation,
            "angular_velocity": omega,
            "target": state["target"],
        }

    def _position_error(self, state: State) -> torch.Tensor:
        offset = state["target"] - state["position"]
        return torch.sqrt((offset * offset).sum(-1) + 1e-4)

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        velocity, omega = next_state["velocity"], next_state["angular_velocity"]
        tilt = 1.0 - next_state["rotation"][:, 2, 2]
        return (
            -self._position_error(next_state)
            - self.velocity_cost * (velocity * velocity).sum(-1)
            - self.angular_velocity_cost * (omega * omega).sum(-1)
            - self.tilt_cost * tilt
            - self.control_cost * (action * action).sum(-1)
        )

    def _observe(self, state: State) -> torch.Tensor:
        return torch.cat(
            [
                state["target"] - state["position"],
                state["velocity"],
                state["rotation"].flatten(start_dim=1),
                state["angular_velocity"],
            ],
            dim=-1,
        )

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        error = (state["target"] - state["position"]).norm(dim=-1).detach()
        return {
            "final_position_error": error,
            "success": (error < self.success_radius).to(self.dtype),
        }


def _hat(vector: torch.Tensor) -> torch.Tensor:
    """Skew-symmetric matrices ``[N, 3, 3]`` with ``hat(u) v = u x v``."""
    x, y, z = vector.unbind(-1)
    zero = torch.zeros_like(x)
    rows = [
        torch.stack([zero, -z, y], dim=-1),
        torch.stack([z, zero, -x], dim=-1),
        torch.stack([-y, x, zero], dim=-1),
    ]
    return torch.stack(rows, dim=-2)


def _exp_so3(rotation_vector: torch.Tensor) -> torch.Tensor:
    """Rodrigues' formula ``I + A K + B K^2`` with ``K = hat(r)``, smooth at ``r = 0``.

    ``A = sin(t) / t`` and ``B = (1 - cos(t)) / t^2 = sin^2(t/2) / (2 (t/2)^2)``
    with ``t = |r|``; below ``t^2 = 1e-3`` their Taylor series replace them, and
    the exact branch sees a safe ``t`` so neither branch makes NaN gradients.
    """
    theta_sq = (rotation_vector * rotation_vector).sum(-1)
    small = theta_sq < 1e-3
    theta = torch.sqrt(torch.where(small, torch.ones_like(theta_sq), theta_sq))
    half = 0.5 * theta
    exact_a = torch.sin(theta) / theta
    exact_b = 0.5 * (torch.sin(half) / half) ** 2
    series_a = 1.0 - theta_sq / 6.0 * (1.0 - theta_sq / 20.0 * (1.0 - theta_sq / 42.0))
    series_b = 0.5 - theta_sq / 24.0 * (1.0 - theta_sq / 30.0 * (1.0 - theta_sq / 56.0))
    a = torch.where(small, series_a, exact_a)[:, None, None]
    b = torch.where(small, series_b, exact_b)[:, None, None]
    k = _hat(rotation_vector)
    eye = torch.eye(3, device=rotation_vector.device, dtype=rotation_vector.dtype)
    return eye + a * k + b * (k @ k)


def _orthonormalize(rotation: torch.Tensor) -> torch.Tensor:
    """One Bjorck step ``R (3 I - R^T R) / 2``: identity on rotations, smooth."""
    eye = torch.eye(3, device=rotation.device, dtype=rotation.dtype)
    return rotation @ (1.5 * eye - 0.5 * rotation.transpose(-1, -2) @ rotation)


register_learning_env("Quadrotor", Quadrotor)
