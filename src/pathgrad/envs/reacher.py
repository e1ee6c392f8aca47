"""Reacher: a torque-driven planar two-link arm whose fingertip must reach a target."""

from __future__ import annotations

import math

import torch

from pathgrad.core.env_registry import register_learning_env
from pathgrad.envs.base import BatchedDifferentiableEnv, State, check_constants

__all__ = ["Reacher"]


class Reacher(BatchedDifferentiableEnv):
    """Planar two-link arm (no gravity) with joint torques, reaching a random target.

    Units are SI. Constants (keyword arguments):

    - Links are uniform rods: ``link_length_1`` = 0.1 m, ``link_length_2`` = 0.11 m
      (as in MuJoCo's Reacher), ``link_mass_1`` = ``link_mass_2`` = 0.05 kg, centre
      of mass at mid-length, inertia about it ``m l^2 / 12``.
    - ``max_torque`` = 0.01 N m per unit action at each joint; ``damping`` =
      0.002 N m s/rad (viscous, each joint). At full torque the shoulder
      accelerates at about 15-35 rad/s^2 and the elbow at 50-240 rad/s^2; the
      steady speed under full torque is ``max_torque / damping`` = 5 rad/s.
    - ``dt`` = 0.01 s per integration substep, ``frame_skip`` = 2 substeps per
      env step (0.02 s). Episodes last ``max_episode_steps`` = 100 steps (2 s)
      and never terminate early.
    - Start: ``q1, q2 ~ U(-pi, pi)`` rad, ``qd1, qd2 ~ U(-initial_velocity,
      initial_velocity)`` with ``initial_velocity`` = 0.1 rad/s. The target is
      uniform by area in the annulus of radii ``target_min_radius`` = 0.05 m and
      ``target_max_radius`` = 0.2 m around the shoulder (the arm reaches 0.01 to
      0.21 m).
    - ``control_cost`` = 0.01 per squared unit of action (Gym's ``reward_ctrl``
      term, scaled to this env's distances of about 0.1 m).

    Dynamics: ``q2`` is the elbow angle relative to link 1. With ``lc = l / 2`` and
    ``I = m l^2 / 12``, ``a = m1 lc1^2 + I1 + m2 (l1^2 + lc2^2) + I2``,
    ``b = m2 l1 lc2``, ``c = m2 lc2^2 + I2`` and ``h = b sin q2``::

        M(q) = [[a + 2 b cos q2, c + b cos q2],
                [c + b cos q2,   c           ]]
        C(q, qd) qd = [-h (2 qd1 qd2 + qd2^2), h qd1^2]
        M(q) qdd + C(q, qd) qd + damping qd = tau,   tau = max_torque * a

    with no clipping of the action (a squashed policy or ``clip_actions_to_space``
    bounds it). ``qdd`` comes from the closed-form 2x2 inverse, and each substep is
    semi-implicit Euler: ``qd' = qd + dt qdd``, ``q' = q + dt qd'``. Explicit
    damping is stable while ``dt * damping / lambda_min(M) < 2``; the defaults
    give about 0.54. Angles are not wrapped.

    Fingertip: ``p = l1 (cos q1, sin q1) + l2 (cos(q1 + q2), sin(q1 + q2))``.
    Reward: ``-sqrt(|p' - target|^2 + 0.001^2) - control_cost |a|^2``: the
    distance, smoothed at the target so that its gradient stays finite.

    Observation (10): ``cos q1, cos q2, sin q1, sin q2``, target (x, y),
    ``qd1, qd2``, fingertip minus target (x, y).
    Metrics: ``final_distance`` (m) and ``success`` (distance below
    ``success_radius`` = 0.02 m), of the state each step ends in.
    """

    observation_dim = 10
    action_dim = 2
    default_max_episode_steps = 100

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        *,
        dt: float = 0.01,
        frame_skip: int = 2,
        link_length_1: float = 0.1,
        link_length_2: float = 0.11,
        link_mass_1: float = 0.05,
        link_mass_2: float = 0.05,
        max_torque: float = 0.01,
        damping: float = 0.002,
        control_cost: float = 0.01,
        success_radius: float = 0.02,
        target_min_radius: float = 0.05,
        target_max_radius: float = 0.2,
        initial_velocity: float = 0.1,
        **kwargs,
    ) -> None:
        check_constants(
            positive={
                "dt": dt,
                "link_length_1": link_length_1,
                "link_length_2": link_length_2,
                "link_mass_1": link_mass_1,
                "link_mass_2": link_mass_2,
                "max_torque": max_torque,
                "success_radius": success_radius,
            },
            non_negative={
                "damping": damping,
                "control_cost": control_cost,
                "initial_velocity": initial_velocity,
            },
        )
        if isinstance(frame_skip, bool) or int(frame_skip) != frame_skip or frame_skip < 1:
            raise ValueError(f"frame_skip must be a positive integer, got {frame_skip}.")
        if not 0.0 <= target_min_radius <= target_max_radius:
            raise ValueError(
                f"target_min_radius must be in [0, target_max_radius], got {target_min_radius}."
            )
        if not target_max_radius <= link_length_1 + link_length_2:
            raise ValueError(
                "target_max_radius cannot exceed the arm's reach "
                f"{link_length_1 + link_length_2}, got {target_max_radius}."
            )
        self.dt = float(dt)
        self.frame_skip = int(frame_skip)
        self.link_lengths = (float(link_length_1), float(link_length_2))
        self.link_masses = (float(link_mass_1), float(link_mass_2))
        self.max_torque = float(max_torque)
        self.damping = float(damping)
        self.control_cost = float(control_cost)
        self.success_radius = float(success_radius)
        self.target_radii = (float(target_min_radius), float(target_max_radius))
        self.initial_velocity = float(initial_velocity)
        l1, l2 = self.link_lengths
        m1, m2 = self.link_masses
        lc1, lc2 = l1 / 2.0, l2 / 2.0
        inertia_1, inertia_2 = m1 * l1**2 / 12.0, m2 * l2**2 / 12.0
        self._a = m1 * lc1**2 + inertia_1 + m2 * (l1**2 + lc2**2) + inertia_2
        self._b = m2 * l1 * lc2
        self._c = m2 * lc2**2 + inertia_2
        super().__init__(num_envs, device, **kwargs)

    # Model.
    def fingertip(self, q: torch.Tensor) -> torch.Tensor:
        """Fingertip position ``[..., 2]`` (m) of joint angles ``q`` ``[..., 2]``."""
        l1, l2 = self.link_lengths
        q1, q12 = q[..., 0], q[..., 0] + q[..., 1]
        x = l1 * torch.cos(q1) + l2 * torch.cos(q12)
        y = l1 * torch.sin(q1) + l2 * torch.sin(q12)
        return torch.stack([x, y], dim=-1)

    def _mass_entries(self, q2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        cos_q2 = torch.cos(q2)
        m11 = self._a + 2.0 * self._b * cos_q2
        m12 = self._c + self._b * cos_q2
        return m11, m12, torch.full_like(q2, self._c)

    def mass_matrix(self, q: torch.Tensor) -> torch.Tensor:
        """Joint-space mass matrix ``M(q)`` ``[..., 2, 2]`` (kg m^2)."""
        m11, m12, m22 = self._mass_entries(q[..., 1])
        return torch.stack(
            [torch.stack([m11, m12], dim=-1), torch.stack([m12, m22], dim=-1)], dim=-2
        )

    def joint_acceleration(
        self, q: torch.Tensor, qd: torch.Tensor, torque: torch.Tensor
    ) -> torch.Tensor:
        """``qdd = M(q)^-1 (tau - C(q, qd) qd - damping qd)``, batched, in closed form."""
        m11, m12, m22 = self._mass_entries(q[..., 1])
        h = self._b * torch.sin(q[..., 1])
        qd1, qd2 = qd[..., 0], qd[..., 1]
        rhs1 = torque[..., 0] + h * (2.0 * qd1 * qd2 + qd2 * qd2) - self.damping * qd1
        rhs2 = torque[..., 1] - h * qd1 * qd1 - self.damping * qd2
        det = m11 * m22 - m12 * m12
        qdd1 = (m22 * rhs1 - m12 * rhs2) / det
        qdd2 = (m11 * rhs2 - m12 * rhs1) / det
        return torch.stack([qdd1, qdd2], dim=-1)

    # Env hooks.
    def _sample_initial_state(self, num: int) -> State:
        low, high = self.target_radii
        radius = torch.sqrt(self._uniform(low * low, high * high, num))
        angle = self._uniform(-math.pi, math.pi, num)
        target = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=-1)
        return {
            "q": self._uniform(-math.pi, math.pi, num, 2),
            "qd": self._uniform(-self.initial_velocity, self.initial_velocity, num, 2),
            "target": target,
        }

    def _dynamics(self, state: State, action: torch.Tensor) -> State:
        torque = self.max_torque * action
        q, qd = state["q"], state["qd"]
        for _ in range(self.frame_skip):
            qd = qd + self.dt * self.joint_acceleration(q, qd, torque)
            q = q + self.dt * qd
        return {"q": q, "qd": qd, "target": state["target"]}

    def _distance(self, state: State) -> torch.Tensor:
        offset = self.fingertip(state["q"]) - state["target"]
        return torch.sqrt((offset * offset).sum(-1) + 1e-6)

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        return -self._distance(next_state) - self.control_cost * (action * action).sum(-1)

    def _observe(self, state: State) -> torch.Tensor:
        q, target = state["q"], state["target"]
        return torch.cat(
            [torch.cos(q), torch.sin(q), target, state["qd"], self.fingertip(q) - target], dim=-1
        )

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        distance = (self.fingertip(state["q"]) - state["target"]).norm(dim=-1).detach()
        return {
            "final_distance": distance,
            "success": (distance < self.success_radius).to(self.dtype),
        }


register_learning_env("Reacher", Reacher)
