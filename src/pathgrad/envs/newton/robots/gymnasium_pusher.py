"""Gymnasium's Pusher-v5 on Newton, from Gymnasium's own ``pusher_v5.xml``.

The file is the one the installed ``gymnasium`` package ships, loaded at run time
with MuJoCo's meaning (``joint_q`` is MuJoCo's ``qpos``: the 7 arm hinges, then
``obj_slidey``, ``obj_slidex``, ``goal_slidey``, ``goal_slidex``; no gravity; the
motors' ``ctrlrange`` ±2 and gear 1; the ``table`` plane is the ground). On it,
v5's definition: the observation (``qpos[:7]``, ``qvel[:7]``, then the positions
of ``tips_arm``, ``object`` and ``goal``: Gymnasium's ``get_body_com``, which is
the body frame's origin, MuJoCo's ``xpos``, not the centre of mass), the
reward after the step (``-0.5 |object - tips_arm| - |object - goal| - 0.1
|action|^2``), the reset (the arm at ``qpos0`` with velocity noise U(±0.005), the
object at ``qpos[7:9]`` ~ U([-0.3, 0] x [-0.2, 0.2]) drawn again until 0.17 m
from the goal, the goal at the file's position, at rest), frame skip 5 of the
file's 0.01 s, 100 steps, no termination.

Where the dynamics differ from MuJoCo's: contacts are penalty springs (Newton's
import, ke 2500 N/m, kd 100 N s/m, both shapes' margins added), frictionless as
the file's ``condim="1"`` makes MuJoCo's. The object weighs 7.9e-6 kg and moves
through its slides' armature (0.04 kg); MuJoCo scales its contact by the body's
mass without armature (``body_invweight0`` 1.3e5), so there the wrist sinks
centimetres into the object and pushes it with about 0.03 N, where Newton's
spring pushes it ahead of the wrist. The goal never moves, in MuJoCo as here:
nothing acts on it (no gravity, no collision, zero velocity).
"""

from __future__ import annotations

from typing import Any

import torch

from pathgrad.envs.base import State
from pathgrad.envs.newton.base import NewtonEnv
from pathgrad.envs.newton.model_files.mjcf_options import read_mjcf_options
from pathgrad.envs.newton.robots.gymnasium_locomotion import gymnasium_asset

__all__ = ["GymnasiumPusher"]

# Candidate object positions drawn per reset row: the first far enough from the goal is
# taken (v5's rejection sampling). One is rejected with probability 0.378, all 32 with
# probability 3e-14 (the object then starts at FALLBACK_OBJECT). A fixed number of draws
# per row keeps the generator in step, as draw_reset_window needs.
CANDIDATES = 32
FALLBACK_OBJECT = (-0.25, 0.0)

# Substeps per env step of 0.05 s: 130 (0.385 ms) is half the stability bound (0.77 ms) of
# the stiffest explicit term, the wrist-object contact (ke 2500, kd 100 on their reduced
# mass 0.039 kg, the object's slide armature), what substeps="auto" picks too; the elbow and
# wrist-flex limits, which the arm starts on, allow 3.1 ms. Pushing the object with the
# wrist, 20 substeps throw it off at 90 m/s and 64 hold, but 32-step window gradients reach
# 4e4 (under 5 at 128). Fixed here so that the env says nothing at construction.
SUBSTEPS = 130


class GymnasiumPusher(NewtonEnv):
    """Pusher-v5 on Newton: push the object (a cylinder on two slides) to the goal.

    ``info["metrics"]``: ``object_goal_distance`` (between the bodies' frames, v5's reward
    term; at least 0.048 m, the object's centre above the table), ``object_goal_planar_distance``
    (on the table) and ``success`` (the object's centre within 5 cm of the goal's on the table).

    Args:
        num_envs: Number of worlds.
        device: Torch device.
        reward_near_weight, reward_dist_weight, reward_control_weight: v5's
            arguments, v5's defaults (0.5, 1, 0.1).
        **kwargs: NewtonEnv's (``substeps``: default :data:`SUBSTEPS`, ``"auto"`` where
            ``contact_ke`` or ``contact_kd`` is given or ``contact_softness="mujoco"``;
            ``capture``, ``seed``, ...).
    """

    # Newton's limit constants and explicit damping: what its results were measured with
    joint_limits, implicit_damping, contact_softness = "newton", False, "newton"

    asset = "pusher_v5.xml"
    frame_skip = 5
    observation_dim = 23
    default_max_episode_steps = 100
    reward_near_weight = 0.5
    reward_dist_weight = 1.0
    reward_control_weight = 0.1
    success_distance = 0.05  # m between the object's and the goal's centres on the table
    object_region = ((-0.3, 0.0), (-0.2, 0.2))  # qpos[7] (obj_slidey), qpos[8] (obj_slidex)
    min_goal_distance = 0.17  # m: v5 draws the object again until this far from the goal

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", **kwargs: Any) -> None:
        for name in ("reward_near_weight", "reward_dist_weight", "reward_control_weight"):
            if name in kwargs:
                setattr(self, name, float(kwargs.pop(name)))
        path = gymnasium_asset(self.asset)
        softened = kwargs.get("contact_ke") is not None or kwargs.get("contact_kd") is not None
        softened = softened or kwargs.get("contact_softness") == "mujoco"
        kwargs.setdefault("substeps", "auto" if softened else SUBSTEPS)
        dt = self.frame_skip * (read_mjcf_options(path).timestep or 0.002)
        super().__init__(num_envs, device, model_file=path, contacts=True, dt=dt, **kwargs)
        self._tracked = [self.body_index(body) for body in ("tips_arm", "object", "goal")]

    def build_world(self, builder: Any) -> None:
        """The file's bodies, with frictionless contacts (its geoms' ``condim="1"``)."""
        super().build_world(builder)
        for shape in range(builder.shape_count):
            builder.shape_material_mu[shape] = 0.0

    def smooth_start_state(self, state: State, steps: int = 5, margin: float = 0.3,
                           clearance: float = 0.05) -> State:  # fmt: skip
        """NewtonEnv's, with the limited joints 0.3 inside their limits (not 0.1): v5's arm
        starts on its elbow and wrist-flex limits, and its light wrist turns 0.1 rad within
        the first 3 steps of ``pathgrad check-env``'s random actions."""
        return super().smooth_start_state(state, steps, margin, clearance)

    # Kinematics ----------------------------------------------------------------------

    def qpos_qvel(self, state: State) -> tuple[torch.Tensor, torch.Tensor]:
        """MuJoCo's ``qpos`` and ``qvel`` of ``state`` (differentiable)."""
        return self.mujoco_from_joint_state(state["joint_q"], state["joint_qd"])

    def tracked_positions(self, state: State) -> torch.Tensor:
        """World positions ``[n, 3, 3]`` of the frames of ``tips_arm``, ``object`` and
        ``goal`` (Gymnasium's ``get_body_com``: MuJoCo's ``xpos``; differentiable)."""
        return self.body_poses(state)[0][:, self._tracked]

    # Task ----------------------------------------------------------------------------

    def _sample_initial_state(self, num: int) -> State:
        """v5's reset: the arm at ``qpos0`` with velocity noise, the object by rejection."""
        (y_low, y_high), (x_low, x_high) = self.object_region
        candidates = torch.stack([self._uniform(y_low, y_high, num, CANDIDATES),
                                  self._uniform(x_low, x_high, num, CANDIDATES)], -1)  # fmt: skip
        accepted = candidates.norm(dim=-1) > self.min_goal_distance  # the goal's qpos is 0
        first = accepted.to(torch.uint8).argmax(dim=-1)
        chosen = candidates[torch.arange(num, device=self.device), first]
        fallback = chosen.new_tensor(FALLBACK_OBJECT).expand(num, 2)
        qpos = torch.zeros(num, 11, dtype=self.dtype, device=self.device)
        qpos[:, 7:9] = torch.where(accepted.any(-1, keepdim=True), chosen, fallback)
        qvel = torch.zeros_like(qpos)
        qvel[:, :7] = self._uniform(-0.005, 0.005, num, 7)  # v5 draws 11, then zeroes 4
        joint_q, joint_qd = self.joint_state_from_mujoco(qpos, qvel)
        return {"joint_q": joint_q, "joint_qd": joint_qd}

    def _observe(self, state: State) -> torch.Tensor:
        qpos, qvel = self.qpos_qvel(state)
        return torch.cat([qpos[:, :7], qvel[:, :7], self.tracked_positions(state).flatten(1)], -1)

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        tips, target, goal = self.tracked_positions(next_state).unbind(1)
        near = torch.linalg.vector_norm(target - tips, dim=-1)
        dist = torch.linalg.vector_norm(target - goal, dim=-1)
        control = action.square().sum(-1)  # v5's: the action as given, not clamped
        return -(self.reward_near_weight * near + self.reward_dist_weight * dist
                 + self.reward_control_weight * control)  # fmt: skip

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        """The object's distance to the goal in 3-D (v5's reward term) and on the table.

        ``success`` is the table's: the object's centre sits 0.048 m above the goal's (the
        file puts the cylinder's centre at half its height, the goal disc on the table), so
        the 3-D distance never falls below 0.048 m and "within 5 cm" in 3-D would mean
        within 1.4 cm on the table.
        """
        _, target, goal = self.tracked_positions(state).detach().unbind(1)
        offset = target - goal
        on_table = torch.linalg.vector_norm(offset[:, :2], dim=-1)  # the table's plane is z
        return {
            "object_goal_distance": torch.linalg.vector_norm(offset, dim=-1),
            "object_goal_planar_distance": on_table,
            "success": (on_table < self.success_distance).to(self.dtype),
        }
