"""HandReorient on Newton: an Allegro-like hand, palm up, turns a cube to a goal orientation.

The task is Rewarped's HandReorient (Xing et al., ICLR 2025, the SAPO paper; its
``AllegroHand`` env), as facts from its source; the scene is pathgrad's own model file
``assets/allegro_like_hand.xml`` (the hand's published link lengths, masses, joint axes and
limits; see the file's comment). Per step (1/120 s, 64 Featherstone substeps):

- **Action**: 16 joint torques, ``2 N m x clip(action, -1, 1)`` (torque control, no joint
  damping; armature 0.001; joint-limit springs ke 100, kd 10).
- **Observation** (72): the joints' angles mapped to [-1, 1] over their limits, their
  velocities x 0.2, the cube's position, quaternion (x y z w), linear velocity and angular
  velocity x 0.2 (world frame), the goal's position and quaternion, the cube's rotation
  relative to the goal (``cube * conj(goal)``) and the action (clipped).
- **Reward**: ``-10 |cube - goal position| + 1 / (rotation distance + 0.1)
  - 0.0002 |action|^2``, plus Rewarped's smoothed success bonus: 250 times
  ``sigmoid(-|s - 1| / 1e-3)`` with ``s = 1 - sigmoid((rotation distance - 0.1) / 1e-3)``,
  which is 0.5 (a bonus of about 125) within 0.1 rad of the goal and 0 away from it. The
  rotation distance is ``2 asin(min(|vector part of cube * conj(goal)|, 1 - 1e-3))``.
- **Goal**: the cube's start position lowered 0.04 m, turned by ``U(-1, 1) pi`` about x,
  then ``U(-1, 1) pi`` about y. Within 0.1 rad of it, a new goal orientation is drawn for
  the next step and the episode goes on.
- **Reset**: every joint at 0.2 x U(lower, upper) at rest; the cube at (0, -0.1, 0.6) +
  U(+-0.01) per axis, turned as a goal is, at rest. **Termination**: the cube 0.24 m or more
  from the goal position (dropped); **truncation** after 600 steps.

Where it differs from Rewarped: Newton's Featherstone and its penalty contact with
Rewarped's constants (ke 500, kd 100, kf 100, mu 0.5, angular damping 0.01; Rewarped's
friction smoothing is Newton's friction slope kf); the hand's shapes touch the cube but
not each other (Rewarped's fingers also collide with one another; that is many more shape
pairs per substep); the goals after
the first are drawn by a fixed low-discrepancy sequence from the episode's first draw
(each uniform over the same ranges), so that steps use no random numbers and runs resume
exactly.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from pathgrad.envs.base import State
from pathgrad.envs.newton.base import NewtonEnv
from pathgrad.envs.newton.engine.contact_materials import set_contact_materials
from pathgrad.envs.newton.engine.kinematics import quat_conjugate, quat_multiply, rotate

__all__ = ["HandReorient"]

CONTACT = {"contact_ke": 500.0, "contact_kd": 100.0, "contact_kf": 100.0, "mu": 0.5}
LIMIT_KE, LIMIT_KD = 100.0, 10.0  # joint-limit springs (warp.sim's URDF import, Rewarped's)
HAND_DOFS = 16
STEP, SUBSTEPS = 1.0 / 120.0, 64  # s per env step (Rewarped's 1/240 x 2), Featherstone substeps
CUBE_START = (0.0, -0.1, 0.6)
GOAL_DROP = 0.04  # m below the cube's start
# The additive recurrence of the goals after the first: fractional parts of the golden
# ratio and of sqrt(2), per axis (each goal's two draws stay uniform, successive goals differ)
GOAL_STEP = ((math.sqrt(5.0) - 1.0) / 2.0, math.sqrt(2.0) - 1.0)


def turned(draws: torch.Tensor) -> torch.Tensor:
    """Rewarped's random orientation of draws ``[n, 2]`` in [-1, 1]: a turn of ``draws[:, 0]
    pi`` about x, then of ``draws[:, 1] pi`` about y (``q_x * q_y``), x y z w."""
    half = 0.5 * math.pi * draws
    zero = torch.zeros_like(half[:, 0])
    about_x = torch.stack([half[:, 0].sin(), zero, zero, half[:, 0].cos()], -1)
    about_y = torch.stack([zero, half[:, 1].sin(), zero, half[:, 1].cos()], -1)
    return quat_multiply(about_x, about_y)


def rotation_distance(cube: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
    """Rewarped's angle (rad) between two orientations."""
    difference = quat_multiply(cube, quat_conjugate(goal))
    return 2.0 * torch.asin(difference[:, :3].norm(dim=-1).clamp(max=1.0 - 1e-3))


class HandReorient(NewtonEnv):
    """Rewarped's HandReorient on Newton (see the module docstring for the definition).

    Args:
        num_envs: Number of worlds.
        device: Torch device.
        **kwargs: NewtonEnv's (``substeps``, default 64; ``capture``, ``seed``, ...).
    """

    # Newton's limit constants and explicit damping: what its results were measured with
    joint_limits, implicit_damping, contact_softness = "newton", False, "newton"

    default_model_file = "assets/allegro_like_hand.xml"
    observation_dim = 72
    default_max_episode_steps = 600
    ground_plane = False  # the hand holds the cube in the air; a dropped cube ends the episode
    success_tolerance = 0.1  # rad
    fall_distance = 0.24  # m
    reach_goal_bonus = 250.0

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", **kwargs: Any) -> None:
        kwargs.setdefault("substeps", SUBSTEPS)
        options = {"angular_damping": 0.01}
        kwargs["solver_options"] = {**options, **(kwargs.get("solver_options") or {})}
        super().__init__(num_envs, device, contacts=True, dt=STEP, **kwargs)

    def build_world(self, builder: Any) -> None:
        """The file's hand and cube, with Rewarped's contact and joint-limit constants."""
        super().build_world(builder)
        set_contact_materials(builder, CONTACT)
        for dof in range(HAND_DOFS):
            builder.joint_limit_ke[dof] = LIMIT_KE
            builder.joint_limit_kd[dof] = LIMIT_KD
        self._limits = (builder.joint_limit_lower[:HAND_DOFS],
                        builder.joint_limit_upper[:HAND_DOFS])  # fmt: skip

    def _constant(self, values: Any) -> torch.Tensor:
        return torch.as_tensor(values, dtype=torch.float32, device=self.device)

    @functools.cached_property
    def lower(self) -> torch.Tensor:
        """The hand's joint limits (rad), lower and upper."""
        return self._constant(self._limits[0])

    @functools.cached_property
    def upper(self) -> torch.Tensor:
        return self._constant(self._limits[1])

    @functools.cached_property
    def goal_position(self) -> torch.Tensor:
        return self._constant(CUBE_START) - self._constant((0.0, 0.0, GOAL_DROP))

    # State ----------------------------------------------------------------------------

    def _sample_initial_state(self, num: int) -> State:
        lower, upper = self.lower, self.upper
        hand = 0.2 * (lower + (upper - lower) * self._uniform(0.0, 1.0, num, HAND_DOFS))
        position = self._constant(CUBE_START) + self._uniform(-0.01, 0.01, num, 3)
        cube_draws, goal_draws = self._uniform(-1.0, 1.0, num, 2), self._uniform(-1.0, 1.0, num, 2)
        cube = turned(cube_draws)
        qpos = torch.cat([hand, position, cube[:, 3:], cube[:, :3]], -1)  # MuJoCo's w x y z
        qvel = torch.zeros(num, 22, device=self.device)
        joint_q, joint_qd = self.joint_state_from_mujoco(qpos, qvel)
        return {
            "joint_q": joint_q,
            "joint_qd": joint_qd,
            "goal_draws": goal_draws,  # the goal orientation: turned(goal_draws)
            "action": torch.zeros(num, HAND_DOFS, device=self.device),
            "goals_reached": torch.zeros(num, device=self.device),
        }

    def _dynamics(self, state: State, action: torch.Tensor) -> State:
        """A new goal where the cube reached its goal in ``state``, then the physics."""
        cube = self._cube_pose(state)[1]
        goal = turned(state["goal_draws"])
        reached = rotation_distance(cube.detach(), goal) <= self.success_tolerance
        draws = state["goal_draws"] + 1.0 + self._constant(GOAL_STEP)  # the next of the sequence
        draws = torch.where(reached[:, None], torch.remainder(draws, 2.0) - 1.0,
                            state["goal_draws"])  # fmt: skip
        clipped = action.clamp(-1.0, 1.0)
        next_state = super()._dynamics(state, clipped)
        return {**next_state, "goal_draws": draws, "action": clipped,
                "goals_reached": state["goals_reached"] + reached.to(action.dtype)}  # fmt: skip

    def _cube_pose(self, state: State) -> tuple[torch.Tensor, torch.Tensor]:
        """The cube's position and x y z w quaternion (its free joint's coordinates)."""
        joint_q = state["joint_q"]
        return joint_q[:, HAND_DOFS : HAND_DOFS + 3], joint_q[:, HAND_DOFS + 3 : HAND_DOFS + 7]

    def _cube(self, state: State) -> tuple[torch.Tensor, ...]:
        """The cube's position, x y z w quaternion, linear and angular velocity (world)."""
        position, quat = self._cube_pose(state)
        _, qvel = self.mujoco_from_joint_state(state["joint_q"], state["joint_qd"])
        angular = rotate(quat, qvel[:, HAND_DOFS + 3 :])  # MuJoCo's is in the cube's frame
        return position, quat, qvel[:, HAND_DOFS : HAND_DOFS + 3], angular

    # Task -----------------------------------------------------------------------------

    def _observe(self, state: State) -> torch.Tensor:
        joints = state["joint_q"][:, :HAND_DOFS]
        unit = (2.0 * joints - (self.upper + self.lower)) / (self.upper - self.lower)
        position, quat, linear, angular = self._cube(state)
        goal = turned(state["goal_draws"])
        relative = quat_multiply(quat, quat_conjugate(goal))
        return torch.cat([unit, 0.2 * state["joint_qd"][:, :HAND_DOFS], position, quat, linear,
                          0.2 * angular, self.goal_position.expand_as(position), goal, relative,
                          state["action"]], -1)  # fmt: skip

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        position, quat = self._cube_pose(next_state)
        distance = (position - self.goal_position).norm(dim=-1)
        angle = rotation_distance(quat, turned(next_state["goal_draws"]))
        clipped = action.clamp(-1.0, 1.0)
        reward = -10.0 * distance + 1.0 / (angle.abs() + 0.1) - 0.0002 * clipped.square().sum(-1)
        near = 1.0 - torch.sigmoid((angle.abs() - self.success_tolerance) / 1e-3)
        return reward + self.reach_goal_bonus * torch.sigmoid(-(near - 1.0).abs() / 1e-3)

    def _terminated(self, state: State) -> torch.Tensor:
        distance = (self._cube_pose(state)[0].detach() - self.goal_position).norm(dim=-1)
        return distance >= self.fall_distance

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        position, quat = (x.detach() for x in self._cube_pose(state))
        return {
            "rotation_distance": rotation_distance(quat, turned(state["goal_draws"])),
            "goals_reached": state["goals_reached"],
            "cube_height": position[:, 2],
        }
