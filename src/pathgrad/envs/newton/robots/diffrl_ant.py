"""DiffRLAnt: the Ant task of the SHAC paper (Xu et al., ICLR 2022) in Newton's Featherstone.

The task of DiffRL's ``AntEnv`` (dflex), rebuilt from its published facts on
:class:`~pathgrad.envs.newton.robots.ant.NewtonAnt` (the same task logic with other
physical constants). Those facts:

- Newton's ``nv_ant.xml`` with every geom at 1000 kg/m^3 (DiffRL's MJCF loader
  ignores the file's densities): 182 kg. Hinge torque 200 N m per unit
  action, actions clipped to [-1, 1]; no action penalty.
- Ground contact ke 4e4 N/m, kd 1e4 N s/m (applied as 80 here, see Contact law),
  friction slope kf 3e3, mu 0.75;
  joint limits ke 1e3, kd 10 (see Joint damping); armature 0.05 on every DOF;
  joint damping 1.
- 16 substeps per env step of 1/60 s; the mass matrix evaluated at every
  ``mass_matrix_interval``-th substep of a step (16: once per step, dflex's
  ``MM_caching_frequency``; 1: every substep). Episodes of 1000 steps, ended
  when the torso falls below 0.27 m.
- Start: torso at 0.75 m, hinges at the MJCF's ``init_qpos`` (hips 0, ankles
  +-1 rad); ``stochastic_init`` adds +-0.1 m to the position, a rotation by up
  to pi/24 about a random axis, +-0.2 rad to the hinges and +-0.25 to every
  velocity (uniform).
- Observation (37) and reward as NewtonAnt's (DiffRL's layout): torso height,
  quaternion (xyzw, identity upright; DiffRL's is in its y-up frame), COM
  velocity, angular velocity, hinge angles, 0.1 x hinge velocities, up and
  heading alignment, previous action; reward x velocity + 0.1 up + heading +
  (height - 0.27). DiffRL aims the heading at a target 10 km down +x, which
  differs from +x by under 1e-4 rad here.

Contact law. dflex's articulated integrator (``eval_rigid_contacts_art``)
collides each shape with the ground only, so self-collisions are off here too
(and the contact buffers hold two points per shape: 1.7x faster forward and
backward than with self-collisions and Newton's capacity estimate, at 64 envs;
``benchmarks/newton_step_profile.py`` shows where the time goes). dflex and
Newton both put the contacts at the end spheres of each capsule, but dflex's
normal force is ke d + kd d v (``d`` penetration, ``v`` approach speed: its
damping scales with the penetration) and its friction min(kf |v_t|, mu ke d)
against the sliding direction, where Newton's normal force is ke d + kd v and
its friction kf v_t capped in length at mu (ke d + kd v). With DiffRL's
constants Newton's contacts would be far more damped (at the resting
penetration, about 8 mm here, dflex's damping is kd d = 1e4 x 0.008 = 80 N s/m
against 1e4) and its normal force would jump by kd v = 1e4 v at touchdown. So
``contact_kd`` is dflex's damping at the resting penetration, 80 (the other
constants are DiffRL's; ``contact_model`` overrides any of them).
``benchmarks/diffrl_ant_probe.py --contact`` measures rollouts under other
friction caps and contact damping.

Joint damping. dflex's ``jcalc_tau`` applies its joint-limit damping (10) at all
times, not only beyond a limit, on top of the joint's own (1): the hinges are
damped 11 here, and Newton's limit damping, which acts only beyond a limit, is 0.

Gradients with cached mass matrices
(:class:`~pathgrad.envs.newton.engine.mass_matrix.MassMatrixCachingSimulation`), as
dflex's: the adjoints that the substeps reusing a mass matrix (and its
Cholesky factor) give it are summed into the adjoint of the substep that
evaluated it, and from there reach that substep's joint coordinates.
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from pathgrad.envs.base import State, check_constants
from pathgrad.envs.newton.engine.actuation import check_positive_integers
from pathgrad.envs.newton.engine.mass_matrix import hold_mass_matrix
from pathgrad.envs.newton.robots.ant import ANT_CONTACT_MODEL, NewtonAnt
from pathgrad.envs.newton.robots.diffrl_base import stochastic_free_root_start

__all__ = ["DIFFRL_ANT_CONTACT_MODEL", "DiffRLAnt"]

DIFFRL_ANT_CONTACT_MODEL = {
    **ANT_CONTACT_MODEL,
    "contact_ke": 4.0e4,
    "contact_kd": 80.0,  # dflex's kd d = 1e4 x 0.008 m at rest (its damping scales with d)
    "contact_kf": 3.0e3,
    "mu": 0.75,
    "limit_kd": 0.0,  # dflex's 10 acts at all times: in the hinges' damping (11)
}


class DiffRLAnt(NewtonAnt):
    """The SHAC paper's Ant (see the module docstring for its definition).

    Args:
        mass_matrix_interval: Substeps between mass-matrix evaluations within a
            step (16, the paper's, evaluates it once per step).
        density: Of every geom (kg/m^3).
        stochastic_init: Randomize the start (the paper's SHAC setting).
        contact_model: Overrides of :data:`DIFFRL_ANT_CONTACT_MODEL`.
        Others as :class:`~pathgrad.envs.newton.robots.ant.NewtonAnt`.
    """

    start_height = 0.75
    self_collisions = False  # dflex collides each shape with the ground only
    contacts_per_shape_pair = 2  # a capsule or sphere on the ground: at most 2 points

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        *,
        gear: float = 200.0,
        termination_height: float = 0.27,
        density: float = 1000.0,
        stochastic_init: bool = True,
        dt: float = 1.0 / 60.0,
        substeps: int = 16,
        mass_matrix_interval: int = 16,
        contact_model: Mapping[str, float] | None = None,
        solver_options: dict[str, Any] | None = None,
        capture: bool = True,
        dtype: str | torch.dtype = "float32",
        max_episode_steps: int | None = None,
        seed: int | None = None,
        armature: float | Sequence[float] | None = None,
        joint_damping: float | Sequence[float] | None = 11.0,
        contact_signal_frame: str | None = None,
    ) -> None:
        check_constants(positive={"density": density})
        check_positive_integers(substeps=substeps, mass_matrix_interval=mass_matrix_interval)
        self.density = float(density)
        self.stochastic_init = bool(stochastic_init)
        self.mass_matrix_interval = int(mass_matrix_interval)
        super().__init__(
            num_envs,
            device,
            gear=gear,
            control_cost=0.0,
            termination_height=termination_height,
            dt=dt,
            substeps=substeps,
            contact_model={**DIFFRL_ANT_CONTACT_MODEL, **(contact_model or {})},
            solver="featherstone",
            solver_options=solver_options,
            capture=capture,
            dtype=dtype,
            max_episode_steps=max_episode_steps,
            seed=seed,
            armature=armature,
            joint_damping=joint_damping,
            contact_signal_frame=contact_signal_frame,
        )
        hold_mass_matrix(self, self.mass_matrix_interval)
        self.state = self._initial_state(self.num_envs)  # the start pose is set only now

    def model_xml(self) -> ElementTree.Element:
        """``nv_ant.xml`` without its floor, every geom at :attr:`density`."""
        root = super().model_xml()
        for element in root.iter("geom"):
            element.set("density", repr(self.density))
        return root

    def _sample_initial_state(self, num: int) -> State:
        joint_q = self.default_joint_q.expand(num, -1).clone()
        joint_q[:, 2] = self.start_height
        joint_qd = torch.zeros(num, self.dofs, dtype=self.dtype, device=self.device)
        if self.stochastic_init:
            joint_qd = stochastic_free_root_start(self, joint_q)
        return {
            "joint_q": joint_q,
            "joint_qd": joint_qd,
            "action": torch.zeros(num, self.action_dim, dtype=self.dtype, device=self.device),
            "time": torch.zeros(num, dtype=self.dtype, device=self.device),
        }

    def _dynamics_and_reward(self, state: State, action: torch.Tensor) -> tuple[State, Any]:
        return super()._dynamics_and_reward(state, action.clamp(-1.0, 1.0))
