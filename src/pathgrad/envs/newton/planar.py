"""DiffRL's planar runners (Hopper, HalfCheetah) on Newton's Featherstone: what they share.

Facts of DiffRL (imgeorgiev/DiffRL, NVlabs/DiffRL: ``envs/hopper.py``, ``envs/cheetah.py``,
``utils/load_utils.py`` ``parse_mjcf``, dflex ``sim.py`` and ``model.py``), rebuilt here:

- The robot moves in the x-z plane on three root joints (slide x, slide z, hinge y; one
  Newton D6 joint) and hinges; DiffRL's y-up frame is z-up here (the same physics).
  Every capsule at 1000 kg/m^3; gravity 9.81 m/s^2. 16 substeps per env step of 1/60 s,
  the mass matrix evaluated once per step (SHAC's ``MM_caching_frequency`` 16).
- Action: hinge torques of 200 N m per unit, actions clipped to [-1, 1]; reward term
  ``-0.1 |a|^2`` of the clipped action. 1000-step episodes.
- Observation: joint coordinates without the x slide, then every joint velocity
  (``joint_q[1:]``, ``joint_qd``); the forward velocity ``joint_qd[0]`` is the reward's
  progress term.
- dflex's per-DOF constants: the armature of the task on every DOF (root ones too);
  joint limits ``limit_ke`` 1e3 N m/rad; ``limit_kd`` 10 acts on every slide and hinge
  at all times (dflex's ``jcalc_tau`` adds ``-limit_kd qd`` whether or not a limit is
  violated), so it is added here to each DOF's passive damping (the MJCF's, root ones 0)
  and Newton's limit damping, which acts only beyond a limit, is set to 0.

Contact law (dflex ``eval_rigid_contacts_art``, which its articulated integrator runs):
the contact points are the two end spheres of each capsule, as Newton's capsule-plane
contacts; the normal force is ``ke d + kd d v`` (``d`` penetration, ``v`` approach speed)
and the friction ``min(kf |v_t|, mu ke d)`` against the sliding direction (a disc capped
at mu times the elastic part). Newton's normal force is ``ke d + kd v`` (its damping does
not scale with the penetration) and its friction ``kf v_t`` capped in length at
``mu (ke d + kd v)``. With the same constants Newton's contacts would be far more
damped: at the hopper's standing penetration (about 4 mm per foot sphere) dflex's
damping is ``kd d`` = 4 N s/m against Newton's 1e3, and Newton's normal force jumps by
``kd v`` when a sphere touches down (dflex's starts from 0). So ``contact_kd`` is
dflex's damping at that resting penetration, 4 (as DiffRLAnt's is); the other constants
are DiffRL's, and ``contact_model`` can set any of them.

Gradients: Newton 1.8's Featherstone converts the contact wrenches in place
(``eval_rigid_tau``) and its adjoint then reads the converted values; for these robots,
whose root joint does not carry the solve origin along, the gradients with respect to
positions in contact came out wrong (moving the robot along x changed the next state).
The bridge undoes the conversion before each taped substep is backpropagated
(:func:`pathgrad.envs.newton.bridge.restore_external_forces`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from pathgrad.envs.base import State, check_constants
from pathgrad.envs.newton.actuation import check_positive_integers
from pathgrad.envs.newton.base import NewtonEnv
from pathgrad.envs.newton.contact_materials import (
    contact_model_with,
    ground_shape_config,
    set_contact_materials,
)
from pathgrad.envs.newton.diffrl_ant import hold_mass_matrix

__all__ = ["CONTACT_MODEL_KEYS", "DiffRLPlanarEnv"]

CONTACT_MODEL_KEYS = ("armature", "limit_ke", "limit_kd", "contact_ke", "contact_kd",
                      "contact_kf", "mu")  # fmt: skip


class DiffRLPlanarEnv(NewtonEnv):
    """A DiffRL planar runner (see the module docstring); subclasses give the task.

    Subclasses set ``default_model_file``, ``actuated``, ``contact_defaults`` (the
    entries of :data:`CONTACT_MODEL_KEYS`), ``start_z`` (start offset of the z slide,
    m) and the uniform half-widths of the stochastic start (``noise``: root x and z,
    pitch, hinges, velocities), and may add :meth:`_task_reward`.

    Args:
        action_strength: Hinge torque per unit action (N m).
        action_penalty: Weight of ``|a|^2`` subtracted from the reward.
        stochastic_init: Randomize the start (the paper's SHAC setting).
        mass_matrix_interval: Substeps between mass-matrix evaluations within a step
            (16, the paper's: once per step; 1: every substep).
        contact_model: Overrides of ``contact_defaults``.
        contact_signal_frame: Frame of ``info["contact_forces"]`` (AHAC's contact
            signal): ``"world_origin"`` (dflex's) or ``"body"``.
        Others as :class:`~pathgrad.envs.newton.base.NewtonEnv`.
    """

    actuated: tuple[str, ...] = ()
    contact_defaults: Mapping[str, float] = {}
    start_z = 0.0
    noise = (0.0, 0.0, 0.0, 0.0)
    default_max_episode_steps = 1000
    mujoco_meaning = False  # DiffRL's robots keep the import they were tuned on

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        *,
        action_strength: float = 200.0,
        action_penalty: float = 0.1,
        stochastic_init: bool = True,
        dt: float = 1.0 / 60.0,
        substeps: int = 16,
        mass_matrix_interval: int = 16,
        contact_model: Mapping[str, float] | None = None,
        solver_options: dict[str, Any] | None = None,
        capture: bool = True,
        contact_signal_frame: str | None = None,
        dtype: str | torch.dtype = "float32",
        max_episode_steps: int | None = None,
        seed: int | None = None,
    ) -> None:
        check_constants(
            positive={"action_strength": action_strength},
            non_negative={"action_penalty": action_penalty},
        )
        check_positive_integers(substeps=substeps, mass_matrix_interval=mass_matrix_interval)
        self.contact_model = contact_model_with(self.contact_defaults, contact_model)
        self.action_penalty = float(action_penalty)
        self.stochastic_init = bool(stochastic_init)
        self.mass_matrix_interval = int(mass_matrix_interval)
        super().__init__(
            num_envs,
            device,
            dt=dt,
            substeps=substeps,
            actuated_joints=list(self.actuated),
            action_scale=action_strength,
            contacts=True,
            solver="featherstone",
            solver_options=solver_options,
            capture=capture,
            contact_signal_frame=contact_signal_frame,
            dtype=dtype,
            max_episode_steps=max_episode_steps,
            seed=seed,
        )
        hold_mass_matrix(self, self.mass_matrix_interval)

    # Model ---------------------------------------------------------------------------

    def model_file_options(self) -> dict[str, Any]:
        return {"enable_self_collisions": False, "parse_visuals": False}  # dflex: ground only

    def build_world(self, builder: Any) -> None:
        """The asset, then dflex's armature, limits and contact constants on it."""
        super().build_world(builder)
        model = self.contact_model
        for dof in range(builder.joint_dof_count):
            builder.joint_armature[dof] = model["armature"]
            builder.joint_limit_ke[dof] = model["limit_ke"]
            builder.joint_damping[dof] += model["limit_kd"]  # dflex's always-on limit damping
            builder.joint_limit_kd[dof] = 0.0
            builder.joint_target_ke[dof] = 0.0
            builder.joint_target_kd[dof] = 0.0
        set_contact_materials(builder, model)

    def ground_config(self) -> Any:
        return ground_shape_config(self.contact_model)

    # Task ----------------------------------------------------------------------------

    def _sample_initial_state(self, num: int) -> State:
        joint_q = torch.zeros(num, self.coordinates, dtype=self.dtype, device=self.device)
        joint_q[:, 1] = self.start_z
        joint_qd = torch.zeros(num, self.dofs, dtype=self.dtype, device=self.device)
        if self.stochastic_init:
            position, pitch, hinges, velocity = self.noise
            joint_q[:, :2] += self._uniform(-position, position, num, 2)
            joint_q[:, 2] = self._uniform(-pitch, pitch, num)
            joint_q[:, 3:] += self._uniform(-hinges, hinges, num, self.coordinates - 3)
            joint_qd = self._uniform(-velocity, velocity, num, self.dofs)
        return {
            "joint_q": joint_q,
            "joint_qd": joint_qd,
            "time": torch.zeros(num, dtype=self.dtype, device=self.device),
        }

    def _dynamics(self, state: State, action: torch.Tensor) -> State:
        return {**super()._dynamics(state, action), "time": state["time"].detach() + self.dt}

    def _dynamics_and_reward(self, state: State, action: torch.Tensor) -> tuple[State, Any]:
        return super()._dynamics_and_reward(state, action.clamp(-1.0, 1.0))

    def _task_reward(self, joint_q: torch.Tensor) -> torch.Tensor | float:
        """Terms of the reward besides progress and the action penalty."""
        return 0.0

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        progress = next_state["joint_qd"][:, 0]
        penalty = self.action_penalty * action.square().sum(-1)
        return progress + self._task_reward(next_state["joint_q"]) - penalty

    def _observe(self, state: State) -> torch.Tensor:
        return torch.cat([state["joint_q"][:, 1:], state["joint_qd"]], dim=-1)

    def _terminated(self, state: State) -> torch.Tensor:
        """Rows whose state is no longer finite (subclasses add their own ends)."""
        joint_q, joint_qd = state["joint_q"], state["joint_qd"]
        return ~(torch.isfinite(joint_q).all(-1) & torch.isfinite(joint_qd).all(-1))

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        distance = state["joint_q"][:, 0].detach()
        return {
            "forward_velocity": state["joint_qd"][:, 0].detach(),
            "distance": distance,
            "average_forward_velocity": distance / state["time"].clamp_min(self.dt),
        }
