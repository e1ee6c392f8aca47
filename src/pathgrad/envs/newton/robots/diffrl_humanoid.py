"""DiffRLHumanoid: the Humanoid task of the SHAC paper (Xu et al., ICLR 2022) in Newton.

DiffRL's ``HumanoidEnv`` (dflex), rebuilt from its published facts (NVlabs/DiffRL:
``envs/humanoid.py``, ``envs/assets/humanoid.xml``, ``utils/load_utils.py`` ``parse_mjcf``,
``examples/cfg/shac/humanoid.yaml``; dflex ``sim.py`` and ``model.py``):

- ``assets/diffrl_humanoid.xml``: the capsules and spheres of DiffRL's file at 1000 kg/m^3
  (``parse_mjcf``'s default density; DiffRL passes none): 40.8 kg. One body per hinge,
  as dflex's one link per joint (the first hinges of a source body are massless links);
  21 hinges after the free root, in the source's order. Per hinge, the file's stiffness
  (a spring to 0), damping and armature, else DiffRL's ``parse_mjcf`` arguments (5, 0.1,
  0.007); the root has no armature. Joint limits ke 1e3, kd 10 (see below); ranges as
  the file's (degrees).
- Action (21), clipped to [-1, 1]: hinge torque ``0.35 x`` DiffRL's motor strengths (200
  on the abdomen, hips x and z; 600 hip y, 400 knees, 100 ankles and shoulders, 200
  elbows): 70, 210, 140 or 35 N m per unit.
- Ground contact ke 2e4 N/m, kd 5e3 N s/m (applied as 12.5 here, see ``diffrl_base``: dflex's
  ``kd d`` at the standing penetration, 2.5 mm with 40.8 kg on the eight end spheres of the
  foot capsules), kf 1e3, mu 0.75. Each shape collides with the ground only.
- 48 substeps per env step of 1/60 s, the mass matrix evaluated once per step (SHAC's
  ``MM_caching_frequency`` 48; ``mass_matrix_interval``). Episodes of 1000 steps, ended
  when the torso's origin falls below 0.74 m or the state is no longer finite.
- Start: torso origin at 1.35 m, upright, hinges at 0, at rest. ``stochastic_init``:
  +-0.1 m on the position, a rotation by up to pi/24 about a random axis, +-0.2 rad on
  the hinges, +-0.25 on every velocity (uniform).
- Observation (76): torso height, quaternion (xyzw, identity upright; DiffRL's is in its
  y-up frame), velocity of the torso's origin, angular velocity, hinge angles, 0.1 x hinge
  velocities, up alignment (z of the torso's z axis), heading alignment (the torso's x
  axis against the horizontal direction to a target 200 m down +x of the start), the
  previous (clipped) action.
- Reward: x velocity of the torso's origin + 0.1 up + heading + height term - 0.002
  |a|^2, where with ``h`` the torso height less 0.84 m (termination height + 0.1),
  clipped to [-1, 0.1], the height term is ``-200 h^2`` where ``h < 0`` and ``10 h`` else.

dflex's joint damping: its ``jcalc_tau`` applies the joint-limit damping (10) at all times,
so each hinge's damping here is the file's + 10, and Newton's limit damping (which acts
only beyond a limit) is 0. The root joint (free) is not damped, as in dflex.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from pathgrad.envs.base import State, check_constants
from pathgrad.envs.newton.engine.kinematics import rotate
from pathgrad.envs.newton.robots.diffrl_base import DiffRLRobot, stochastic_free_root_start

__all__ = ["DIFFRL_HUMANOID_CONTACT_MODEL", "DiffRLHumanoid", "MOTOR_STRENGTHS"]

DIFFRL_HUMANOID_CONTACT_MODEL = {
    "limit_ke": 1.0e3,
    "limit_kd": 10.0,  # dflex's acts at all times: added to each hinge's damping
    "contact_ke": 2.0e4,
    "contact_kd": 12.5,  # dflex's kd d = 5e3 x 0.0025 m standing (its damping scales with d)
    "contact_kf": 1.0e3,
    "mu": 0.75,
}
# DiffRL's motor strengths per hinge (scaled by 0.35), in the order of the action.
MOTOR_STRENGTHS = {
    "abdomen_z": 200.0, "abdomen_y": 200.0, "abdomen_x": 200.0,
    "right_hip_x": 200.0, "right_hip_z": 200.0, "right_hip_y": 600.0, "right_knee": 400.0,
    "right_ankle_y": 100.0, "right_ankle_x": 100.0,
    "left_hip_x": 200.0, "left_hip_z": 200.0, "left_hip_y": 600.0, "left_knee": 400.0,
    "left_ankle_y": 100.0, "left_ankle_x": 100.0,
    "right_shoulder1": 100.0, "right_shoulder2": 100.0, "right_elbow": 200.0,
    "left_shoulder1": 100.0, "left_shoulder2": 100.0, "left_elbow": 200.0,
}  # fmt: skip
TARGET = (200.0, 0.0)  # heading target (x, y), m: DiffRL's, 200 m ahead of the start


class DiffRLHumanoid(DiffRLRobot):
    """The SHAC paper's Humanoid (see the module docstring for its definition).

    Args:
        motor_scale: Factor on DiffRL's motor strengths (N m per unit action).
        action_penalty: Weight of ``|a|^2`` subtracted from the reward.
        termination_height: Torso height below which the episode ends (m).
        stochastic_init: Randomize the start (the paper's SHAC setting).
        mass_matrix_interval: Substeps between mass-matrix evaluations within a step
            (48, the paper's: once per step; 1: every substep).
        contact_model: Overrides of :data:`DIFFRL_HUMANOID_CONTACT_MODEL`.
        Others as :class:`~pathgrad.envs.newton.base.NewtonEnv`.
    """

    observation_dim = 76
    action_dim = 21
    default_model_file = str(Path(__file__).parent / "assets" / "diffrl_humanoid.xml")
    actuated = tuple(MOTOR_STRENGTHS)
    contact_defaults = DIFFRL_HUMANOID_CONTACT_MODEL
    first_hinge_dof = 6  # the free root keeps the file's constants (dflex: not damped)
    contacts_per_shape_pair = 2  # a capsule or sphere on the ground: at most 2 points
    start_height = 1.35
    height_tolerance = 0.1  # the height term's top, above the termination height (m)

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        *,
        motor_scale: float = 0.35,
        action_penalty: float = 0.002,
        termination_height: float = 0.74,
        stochastic_init: bool = True,
        dt: float = 1.0 / 60.0,
        substeps: int = 48,
        mass_matrix_interval: int = 48,
        contact_model: Mapping[str, float] | None = None,
        solver_options: dict[str, Any] | None = None,
        capture: bool = True,
        dtype: str | torch.dtype = "float32",
        max_episode_steps: int | None = None,
        seed: int | None = None,
    ) -> None:
        check_constants(
            positive={"motor_scale": motor_scale},
            non_negative={"action_penalty": action_penalty},
        )
        self.action_penalty = float(action_penalty)
        self.termination_height = float(termination_height)
        super().__init__(
            num_envs,
            device,
            action_scale=[motor_scale * strength for strength in MOTOR_STRENGTHS.values()],
            stochastic_init=stochastic_init,
            dt=dt,
            substeps=substeps,
            mass_matrix_interval=mass_matrix_interval,
            contact_model=contact_model,
            solver_options=solver_options,
            capture=capture,
            dtype=dtype,
            max_episode_steps=max_episode_steps,
            seed=seed,
        )
        # The torso's centre of mass in its frame: the observed velocity is its origin's.
        com = self.simulation.model.body_com.numpy()[0]
        self.torso_com = torch.tensor(com, dtype=self.dtype, device=self.device)
        self.target = torch.tensor(TARGET, dtype=self.dtype, device=self.device)

    # Task ----------------------------------------------------------------------------

    def _sample_initial_state(self, num: int) -> State:
        joint_q = torch.zeros(num, self.coordinates, dtype=self.dtype, device=self.device)
        joint_q[:, 2] = self.start_height
        joint_q[:, 6] = 1.0
        joint_qd = torch.zeros(num, self.dofs, dtype=self.dtype, device=self.device)
        if self.stochastic_init:
            joint_qd = stochastic_free_root_start(self, joint_q)
        return {
            "joint_q": joint_q,
            "joint_qd": joint_qd,
            "action": torch.zeros(num, self.action_dim, dtype=self.dtype, device=self.device),
            "time": torch.zeros(num, dtype=self.dtype, device=self.device),
        }

    def _dynamics(self, state: State, action: torch.Tensor) -> State:
        return {
            **super()._dynamics(state, action),
            "action": action,
            "time": state["time"].detach() + self.dt,
        }

    def origin_velocity(self, state: State) -> torch.Tensor:
        """World velocity ``[N, 3]`` of the torso's origin (Newton's root velocity is its COM's)."""
        joint_q, joint_qd = state["joint_q"], state["joint_qd"]
        offset = rotate(joint_q[:, 3:7], self.torso_com.to(joint_q.dtype))
        return joint_qd[:, :3] - torch.linalg.cross(joint_qd[:, 3:6], offset, dim=-1)

    def _alignment(self, joint_q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Up (z of the torso's z axis) and heading (its x axis toward the target) alignment."""
        x, y, z, w = joint_q[:, 3:7].unbind(-1)
        up = 1.0 - 2.0 * (x * x + y * y)
        forward = torch.stack([1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y + w * z)], dim=-1)
        direction = torch.nn.functional.normalize(self.target - joint_q[:, :2], dim=-1)
        return up, (forward * direction).sum(-1)

    def _observe(self, state: State) -> torch.Tensor:
        joint_q, joint_qd = state["joint_q"], state["joint_qd"]
        up, heading = self._alignment(joint_q)
        return torch.cat(
            [
                joint_q[:, 2:7],
                self.origin_velocity(state),
                joint_qd[:, 3:6],
                joint_q[:, 7:],
                0.1 * joint_qd[:, 6:],
                up.unsqueeze(-1),
                heading.unsqueeze(-1),
                state["action"],
            ],
            dim=-1,
        )

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        joint_q = next_state["joint_q"]
        up, heading = self._alignment(joint_q)
        height = joint_q[:, 2] - (self.termination_height + self.height_tolerance)
        height = height.clamp(-1.0, self.height_tolerance)
        height = torch.where(height < 0.0, -200.0 * height.square(), 10.0 * height)
        progress = self.origin_velocity(next_state)[:, 0]
        penalty = self.action_penalty * action.square().sum(-1)
        return progress + 0.1 * up + heading + height - penalty

    def _terminated(self, state: State) -> torch.Tensor:
        return self._diverged(state) | (state["joint_q"][:, 2] < self.termination_height)

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        distance = state["joint_q"][:, 0].detach()
        return {
            "forward_velocity": self.origin_velocity(state)[:, 0].detach(),
            "distance": distance,
            "average_forward_velocity": distance / state["time"].clamp_min(self.dt),
        }
