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
- dflex's per-DOF constants (:mod:`~pathgrad.envs.newton.robots.diffrl_base`, with
  its contact law): the armature of the task on every DOF (root ones too); joint limits
  ``limit_ke`` 1e3 N m/rad; ``limit_kd`` 10 on every slide and hinge at all times.

Gradients: Newton 1.8's Featherstone converts the contact wrenches in place
(``eval_rigid_tau``) and its adjoint then reads the converted values; for these robots,
whose root joint does not carry the solve origin along, the gradients with respect to
positions in contact came out wrong (moving the robot along x changed the next state).
The bridge undoes the conversion before each taped substep is backpropagated
(:func:`pathgrad.envs.newton.engine.bridge.restore_external_forces`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from pathgrad.envs.base import State, check_constants
from pathgrad.envs.newton.robots.diffrl_base import DiffRLRobot

__all__ = ["CONTACT_MODEL_KEYS", "DiffRLPlanarEnv"]

CONTACT_MODEL_KEYS = ("armature", "limit_ke", "limit_kd", "contact_ke", "contact_kd",
                      "contact_kf", "mu")  # fmt: skip


class DiffRLPlanarEnv(DiffRLRobot):
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

    start_z = 0.0
    noise = (0.0, 0.0, 0.0, 0.0)

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
        self.action_penalty = float(action_penalty)
        super().__init__(
            num_envs,
            device,
            action_scale=action_strength,
            stochastic_init=stochastic_init,
            dt=dt,
            substeps=substeps,
            mass_matrix_interval=mass_matrix_interval,
            contact_model=contact_model,
            solver_options=solver_options,
            capture=capture,
            contact_signal_frame=contact_signal_frame,
            dtype=dtype,
            max_episode_steps=max_episode_steps,
            seed=seed,
        )

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
        """Rows whose simulation diverged (subclasses add their own ends)."""
        return self._diverged(state)

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        distance = state["joint_q"][:, 0].detach()
        return {
            "forward_velocity": state["joint_qd"][:, 0].detach(),
            "distance": distance,
            "average_forward_velocity": distance / state["time"].clamp_min(self.dt),
        }
