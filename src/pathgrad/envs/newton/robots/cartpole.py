"""NewtonCartPoleSwingUp: pathgrad's CartPoleSwingUp, simulated by Newton's Featherstone solver."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import warp as wp

from pathgrad.envs.base import State
from pathgrad.envs.cartpole_swingup import CartPoleSwingUp
from pathgrad.envs.newton.base import NewtonEnv

__all__ = ["NewtonCartPoleSwingUp"]


class NewtonCartPoleSwingUp(NewtonEnv):
    """The task of :class:`~pathgrad.envs.CartPoleSwingUp` with Newton's articulated dynamics.

    A cart (``cart_mass``) on a prismatic joint along x and a uniform rod
    (``pole_mass``, length ``2 pole_half_length``) on a revolute joint about y,
    built by hand; the action is the cart force (``force_mag`` N per unit).
    Featherstone's semi-implicit Euler step equals the torch env's equations, so
    with the same seed and actions the two envs follow the same trajectory up to
    float32 rounding. Initial states, reward, observation, metrics and the soft
    track limit (an extra joint force computed in torch) are the torch env's.

    State: ``joint_q`` ``[N, 2]`` (x, theta) and ``joint_qd`` ``[N, 2]``.
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
        substeps: int = 1,
        track_limit: float = 2.4,
        wall_stiffness: float = 1000.0,
        wall_sharpness: float = 50.0,
        centre_width: float = 0.5,
        control_cost: float = 0.01,
        solver: str = "featherstone",
        solver_options: dict[str, Any] | None = None,
        capture: bool = True,
        dtype: str | torch.dtype = "float32",
        max_episode_steps: int | None = None,
        seed: int | None = None,
        armature: float | Sequence[float] | None = None,
        joint_damping: float | Sequence[float] | None = None,
    ) -> None:
        # The torch env holds the task (constants, reward, observation, metrics).
        self.task = CartPoleSwingUp(
            1,
            device,
            gravity=gravity,
            cart_mass=cart_mass,
            pole_mass=pole_mass,
            pole_half_length=pole_half_length,
            force_mag=force_mag,
            dt=dt,
            track_limit=track_limit,
            wall_stiffness=wall_stiffness,
            wall_sharpness=wall_sharpness,
            centre_width=centre_width,
            control_cost=control_cost,
        )
        self.gravity = (0.0, 0.0, -float(gravity))
        super().__init__(
            num_envs,
            device,
            dt=dt,
            substeps=substeps,
            actuated_joints=["slider"],
            action_scale=force_mag,
            solver_options={"angular_damping": 0.0, **(solver_options or {})},
            solver=solver,
            capture=capture,
            dtype=dtype,
            max_episode_steps=max_episode_steps,
            seed=seed,
            armature=armature,
            joint_damping=joint_damping,
        )

    def build_world(self, builder: Any) -> None:
        """Cart on a slider along x, pole on a hinge about y (0 upright, +x positive)."""
        task = self.task
        builder.default_joint_cfg.armature = 0.0
        free = {"limit_lower": -1e9, "limit_upper": 1e9, "armature": 0.0}
        cart = builder.add_link(
            mass=task.cart_mass, inertia=wp.mat33(np.eye(3) * 1e-3), label="cart"
        )
        length = 2.0 * task.pole_half_length
        rod = task.pole_mass * length * length / 12.0  # uniform rod about its centre
        pole = builder.add_link(
            mass=task.pole_mass,
            com=wp.vec3(0.0, 0.0, task.pole_half_length),
            inertia=wp.mat33(np.diag([rod, rod, 1e-6])),
            label="pole",
        )
        slider = builder.add_joint_prismatic(-1, cart, axis=(1.0, 0.0, 0.0), label="slider", **free)
        hinge = builder.add_joint_revolute(cart, pole, axis=(0.0, 1.0, 0.0), label="hinge", **free)
        builder.add_articulation([slider, hinge], label="cartpole")

    def _torch_state(self, state: State) -> State:
        """The torch env's state entries of a Newton state."""
        q, qd = state["joint_q"], state["joint_qd"]
        return {
            "position": q[:, 0],
            "angle": q[:, 1],
            "velocity": qd[:, 0],
            "angular_velocity": qd[:, 1],
        }

    def _sample_initial_state(self, num: int) -> State:
        self.task.generator = self.generator  # draw exactly what the torch env would
        start = self.task._sample_initial_state(num)
        return {
            "joint_q": torch.stack([start["position"], start["angle"]], dim=-1),
            "joint_qd": torch.stack([start["velocity"], start["angular_velocity"]], dim=-1),
        }

    def extra_joint_forces(self, state: State) -> torch.Tensor:
        """The soft track limit on the slider, in torch (differentiable)."""
        wall = self.task.wall_force(state["joint_q"][:, 0])
        return torch.stack([wall, torch.zeros_like(wall)], dim=-1)

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        task = self.task
        return task._reward(self._torch_state(state), action, self._torch_state(next_state))

    def _observe(self, state: State) -> torch.Tensor:
        return self.task._observe(self._torch_state(state))

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        return self.task._metrics(self._torch_state(state))
