"""What DiffRL's dflex robots share on Newton's Featherstone, set up once.

The SHAC benchmark's robots (DiffRL: ``envs/*.py``, ``utils/load_utils.py``; dflex
``sim.py`` and ``model.py``) share how dflex builds and steps them, rebuilt here:

- Each shape collides with the ground only (dflex's articulated integrator); every
  capsule at 1000 kg/m^3 (the assets say so). Actions clipped to [-1, 1].
- The mass matrix is evaluated every ``mass_matrix_interval`` substeps of a step and
  held in between (SHAC's ``MM_caching_frequency``;
  :class:`~pathgrad.envs.newton.engine.mass_matrix.MassMatrixCachingSimulation`).
- dflex's per-DOF constants: joint limits ``limit_ke``; ``limit_kd`` acts at all times
  (dflex's ``jcalc_tau`` adds ``-limit_kd qd`` whether or not a limit is violated), so it
  is added to each hinge's passive damping and Newton's limit damping, which acts only
  beyond a limit, is 0; an ``armature`` entry of the contact model goes on every DOF.

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

"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from pathgrad.envs.base import State
from pathgrad.envs.newton.base import NewtonEnv
from pathgrad.envs.newton.engine.actuation import check_positive_integers
from pathgrad.envs.newton.engine.contact_materials import (
    contact_model_with,
    ground_shape_config,
    set_contact_materials,
)
from pathgrad.envs.newton.engine.mass_matrix import hold_mass_matrix

__all__ = ["DiffRLRobot", "stochastic_free_root_start"]

DIVERGED = 1e6  # |joint_q| or |joint_qd| beyond it: DiffRL's invalid row (NaN fails it too)


def stochastic_free_root_start(env: Any, joint_q: torch.Tensor) -> torch.Tensor:
    """DiffRL's random start of a free-root robot (Ant, Humanoid), in place on ``joint_q``.

    +-0.1 m on the root position, the root turned by up to pi/24 about a random axis
    (from upright), +-0.2 rad on every hinge; returns joint velocities uniform in
    +-0.25. ``env._uniform`` draws from the env's own generator.
    """
    num = joint_q.shape[0]
    joint_q[:, :3] += env._uniform(-0.1, 0.1, num, 3)
    angle = env._uniform(-math.pi / 24, math.pi / 24, num, 1)
    axis = torch.nn.functional.normalize(env._uniform(-0.5, 0.5, num, 3), dim=-1)
    half = 0.5 * angle
    joint_q[:, 3:7] = torch.cat([axis * torch.sin(half), torch.cos(half)], dim=-1)
    joint_q[:, 7:] += env._uniform(-0.2, 0.2, num, joint_q.shape[1] - 7)
    return env._uniform(-0.25, 0.25, num, env.dofs)


class DiffRLRobot(NewtonEnv):
    """A DiffRL robot: dflex's constants, ground-only contact, the held mass matrix.

    Subclasses set ``default_model_file``, ``actuated`` (the hinges the action drives, in
    its order) and ``contact_defaults`` (DiffRL's constants of the task), and give the task.

    Args:
        action_scale: N m per unit action (one value, or one per actuated hinge).
        stochastic_init: Randomize the start (the paper's SHAC setting).
        mass_matrix_interval: Substeps between mass-matrix evaluations within a step.
        contact_model: Overrides of ``contact_defaults``.
        Others as :class:`~pathgrad.envs.newton.base.NewtonEnv`.
    """

    actuated: tuple[str, ...] = ()
    contact_defaults: Mapping[str, float] = {}
    default_max_episode_steps = 1000
    mujoco_meaning = False  # DiffRL's robots keep the import they were tuned on
    first_hinge_dof = 0  # DOFs before it (a free root) keep the file's constants

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        *,
        action_scale: float | Sequence[float],
        stochastic_init: bool,
        dt: float,
        substeps: int,
        mass_matrix_interval: int,
        contact_model: Mapping[str, float] | None,
        solver_options: dict[str, Any] | None,
        capture: bool,
        dtype: str | torch.dtype,
        max_episode_steps: int | None,
        seed: int | None,
        contact_signal_frame: str | None = None,
    ) -> None:
        check_positive_integers(substeps=substeps, mass_matrix_interval=mass_matrix_interval)
        self.contact_model = contact_model_with(self.contact_defaults, contact_model)
        self.stochastic_init = bool(stochastic_init)
        self.mass_matrix_interval = int(mass_matrix_interval)
        super().__init__(
            num_envs,
            device,
            dt=dt,
            substeps=substeps,
            actuated_joints=list(self.actuated),
            action_scale=action_scale,
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

    def model_file_options(self) -> dict[str, Any]:
        return {"enable_self_collisions": False, "parse_visuals": False}  # dflex: ground only

    def build_world(self, builder: Any) -> None:
        """The asset, then dflex's armature, limit and contact constants on it."""
        super().build_world(builder)
        model = self.contact_model
        for dof in range(self.first_hinge_dof, builder.joint_dof_count):
            if "armature" in model:
                builder.joint_armature[dof] = model["armature"]
            builder.joint_limit_ke[dof] = model["limit_ke"]
            builder.joint_damping[dof] += model["limit_kd"]  # dflex's always-on limit damping
            builder.joint_limit_kd[dof] = 0.0
            builder.joint_target_ke[dof] = 0.0
            builder.joint_target_kd[dof] = 0.0
        set_contact_materials(builder, model)

    def ground_config(self) -> Any:
        return ground_shape_config(self.contact_model)

    def _dynamics_and_reward(self, state: State, action: torch.Tensor) -> tuple[State, Any]:
        """The step; a row whose simulation diverged is paid 0, as DiffRL pays it (its
        reward would be NaN: a NaN return, a NaN objective and a skipped update)."""
        next_state, reward = super()._dynamics_and_reward(state, action.clamp(-1.0, 1.0))
        diverged = self._diverged(next_state)
        return next_state, torch.where(diverged, torch.zeros_like(reward), reward)

    @staticmethod
    def _diverged(state: State) -> torch.Tensor:
        """Rows whose simulation diverged: a joint coordinate or velocity not finite or beyond
        1e6 (DiffRL's invalid rows; their episode ends, with reward 0)."""
        joint_q, joint_qd = state["joint_q"], state["joint_qd"]
        return ~((joint_q.abs() <= DIVERGED).all(-1) & (joint_qd.abs() <= DIVERGED).all(-1))
