"""NewtonReacher: a torque-controlled two-link arm from an MJCF asset reaches random targets."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from pathgrad.envs.base import State, check_constants
from pathgrad.envs.newton.base import NewtonEnv

__all__ = ["NewtonReacher"]

ASSET = Path(__file__).parent / "assets" / "planar_arm.xml"


class NewtonReacher(NewtonEnv):
    """Reach a random target with the arm of ``assets/planar_arm.xml`` (Newton, Featherstone).

    Two capsule links of ``link_length`` = 0.5 m (1.0 and 0.5 kg) on hinges
    about the vertical axis, so the arm moves in the horizontal plane; the
    action is the two joint torques, ``max_torque`` = 1 N m per unit action.
    Each episode draws joint angles uniform in [-0.1, 0.1] rad at rest and a
    target uniform in the annulus of radii [0.2, 0.9] m around the base.

    Reward: ``-distance(fingertip, target) - control_cost |a|^2`` (``control_cost``
    = 0.01). The fingertip is computed in torch from the joint angles (planar
    forward kinematics), so the reward is differentiable through the bridge.
    Observation (10): cos and sin of both angles, both velocities, the target,
    fingertip minus target. Metrics: ``final_distance`` (m) and ``success``
    (distance below ``success_distance`` = 0.05 m). 100 steps of ``dt`` = 0.05 s
    (2 solver substeps each).
    """

    # Newton's limit constants and explicit damping: what its results were measured with
    joint_limits, implicit_damping, contact_softness = "newton", False, "newton"

    observation_dim = 10
    action_dim = 2
    default_max_episode_steps = 100
    default_model_file = str(ASSET)

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        *,
        max_torque: float = 1.0,
        control_cost: float = 0.01,
        success_distance: float = 0.05,
        dt: float = 0.05,
        substeps: int = 2,
        solver: str = "featherstone",
        solver_options: dict[str, Any] | None = None,
        capture: bool = True,
        dtype: str | torch.dtype = "float32",
        max_episode_steps: int | None = None,
        seed: int | None = None,
        armature: float | Sequence[float] | None = None,
        joint_damping: float | Sequence[float] | None = None,
    ) -> None:
        check_constants(
            positive={"max_torque": max_torque, "success_distance": success_distance},
            non_negative={"control_cost": control_cost},
        )
        self.control_cost = float(control_cost)
        self.success_distance = float(success_distance)
        self.link_length = 0.5
        super().__init__(
            num_envs,
            device,
            dt=dt,
            substeps=substeps,
            actuated_joints=["shoulder", "elbow"],
            action_scale=max_torque,
            solver_options={"angular_damping": 0.0, **(solver_options or {})},
            solver=solver,
            capture=capture,
            dtype=dtype,
            max_episode_steps=max_episode_steps,
            seed=seed,
            armature=armature,
            joint_damping=joint_damping,
        )

    def fingertip(self, joint_q: torch.Tensor) -> torch.Tensor:
        """Fingertip position ``[N, 2]`` (m) in the horizontal plane."""
        shoulder, elbow = joint_q[:, 0], joint_q[:, 0] + joint_q[:, 1]
        length = self.link_length
        x = length * (torch.cos(shoulder) + torch.cos(elbow))
        y = length * (torch.sin(shoulder) + torch.sin(elbow))
        return torch.stack([x, y], dim=-1)

    def _sample_initial_state(self, num: int) -> State:
        radius = self._uniform(0.2, 0.9, num)
        angle = self._uniform(-math.pi, math.pi, num)
        return {
            "joint_q": self._uniform(-0.1, 0.1, num, 2),
            "joint_qd": torch.zeros(num, 2, dtype=self.dtype, device=self.device),
            "target": torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], -1),
        }

    def _distance(self, state: State) -> torch.Tensor:
        return torch.linalg.vector_norm(self.fingertip(state["joint_q"]) - state["target"], dim=-1)

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        return -self._distance(next_state) - self.control_cost * action.square().sum(-1)

    def _observe(self, state: State) -> torch.Tensor:
        q, target = state["joint_q"], state["target"]
        return torch.cat(
            [torch.cos(q), torch.sin(q), state["joint_qd"], target, self.fingertip(q) - target],
            dim=-1,
        )

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        distance = self._distance(state).detach()
        return {
            "final_distance": distance,
            "success": (distance < self.success_distance).to(self.dtype),
        }
