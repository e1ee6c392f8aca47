"""Gymnasium's v5 Ant, Humanoid and HumanoidStandup on Newton, from Gymnasium's own files.

As :mod:`pathgrad.envs.newton.robots.gymnasium_locomotion`: the installed ``gymnasium``
package's ``ant.xml``, ``humanoid.xml``, ``humanoidstandup.xml`` with MuJoCo's
meaning (``qpos``/``qvel``, masses, motors' gear and ``ctrlrange``, floor), v5's
observation, reward, termination, reset noise and frame skip, the env step split
into ``substeps="auto"`` Featherstone steps.

v5's contact forces ``cfrc_ext`` are left out (v5's own option
``include_cfrc_ext_in_observation=False``, the only one offered) and so is the
contact cost of the reward: Newton's Featherstone reports no contact forces
(``update_contacts`` is not implemented for it), and the per-body contact
wrenches pathgrad reads from the step's buffers (``info["contact_forces"]``,
:mod:`.contact_signal`) are detached (no gradient path) and are a step's, not
a state's. Unlike v5, the contact cost is then 0 (v5 charges it whatever the
option). Humanoid's ``cinert``, ``cvel`` and ``qfrc_actuator`` are computed
(:mod:`.com_quantities`; equal to MuJoCo's of the same ``qpos``/``qvel``/``ctrl``).

Where the dynamics differ from MuJoCo's: contacts are penalty springs (the file
floor's ke 2500 N/m, kd 100 N s/m, with friction), not a soft constraint, so
bodies sink a little and slide differently; joint limits are penalty springs
(Newton's ke 1e4 N m/rad; kd 10, the Ant's raised to critical damping); the
integrator is semi-implicit Euler, not the files' RK4; the humanoid's PGS solver
settings do not apply; its two fixed tendons have no spring, damper, limit or
actuator, so they exert no force (as in MuJoCo).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from pathgrad.envs.base import State
from pathgrad.envs.newton.engine.com_quantities import BodyMotion, cinert, cvel, mass_centre
from pathgrad.envs.newton.engine.kinematics import rotate
from pathgrad.envs.newton.robots.gymnasium_locomotion import GymnasiumLocomotion

__all__ = ["GymnasiumAnt", "GymnasiumHumanoid", "GymnasiumHumanoidStandup"]


def _unit_root(qpos: torch.Tensor) -> torch.Tensor:
    """``qpos`` with its free joint's quaternion (``qpos[3:7]``) normalised."""
    quaternion = qpos[:, 3:7]
    return torch.cat([qpos[:, :3], quaternion / quaternion.norm(dim=-1, keepdim=True),
                      qpos[:, 7:]], -1)  # fmt: skip


class _FloatingBase(GymnasiumLocomotion):
    """A v5 task of a free-floating robot: ``qpos[2:]`` observed, optional contact forces
    refused, ``healthy_z_range`` on the root's height, a unit root quaternion at reset.

    Args:
        healthy_z_range: v5's range of the root's height (``qpos[2]``).
        include_cfrc_ext_in_observation: Must be ``False`` (see the module docstring).
        **kwargs: :class:`GymnasiumLocomotion`'s.
    """

    frame_skip = 5
    clip_velocity = None  # v5 clips no observation of these tasks
    healthy_z_range = (0.2, 1.0)
    observation_dim = 0  # each task's default; options may change it per instance

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", **kwargs: Any) -> None:
        if kwargs.pop("include_cfrc_ext_in_observation", False):
            raise ValueError(
                f"{type(self).__name__}: include_cfrc_ext_in_observation=True is not available: "
                "Newton's Featherstone gives no differentiable per-body contact force of a state "
                "(pathgrad's info['contact_forces'] is a step's, detached); cfrc_ext and the "
                "contact cost are left out."
            )
        if "healthy_z_range" in kwargs and self._has_health:
            low, high = (float(bound) for bound in kwargs.pop("healthy_z_range"))
            self.healthy_z_range = (low, high)
        self._observation_options(kwargs)
        super().__init__(num_envs, device, **kwargs)

    def _observation_options(self, kwargs: dict[str, Any]) -> None:
        """Pop the observation's options from ``kwargs``; set ``observation_dim``."""

    def _sample_initial_state(self, num: int) -> State:
        """v5's reset noise; the root quaternion normalised (v5 keeps its norm until the first
        step, MuJoCo's kinematics use it normalised)."""
        scale = self.reset_noise_scale
        qpos = self.initial_qpos + self._uniform(-scale, scale, num, self.initial_qpos.numel())
        qvel = self.initial_qvel + self._velocity_noise(num)
        joint_q, joint_qd = self.joint_state_from_mujoco(_unit_root(qpos), qvel)
        return {"joint_q": joint_q, "joint_qd": joint_qd}

    def _observe(self, state: State) -> torch.Tensor:
        qpos, qvel = self.qpos_qvel(state)
        return torch.cat([qpos[:, 2:], qvel], dim=-1)

    def _root_height_healthy(self, state: State) -> torch.Tensor:
        z = self.qpos_qvel(state)[0][:, 2]
        low, high = self.healthy_z_range
        return (z > low) & (z < high)

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        qpos, _ = self.qpos_qvel(state)
        return {"x_position": qpos[:, 0].detach(), "y_position": qpos[:, 1].detach()}


class GymnasiumAnt(_FloatingBase):
    """Ant-v5 on Newton: ant.xml (8 motors, gear 150, ctrlrange ±1), frame skip 5 (dt 0.05 s).

    Observation (27): ``qpos[2:]``, ``qvel``, not clipped (v5's 105 less ``cfrc_ext``).
    Reward: the torso's x velocity over the step (its free joint's ``qpos[0]``, which
    is the torso's ``xpos``) + 1 while healthy - 0.5 |action|^2 (no contact cost).
    Healthy while every ``qpos``/``qvel`` is finite and the torso's height is in
    [0.2, 1.0]; terminates otherwise. Reset: ``qpos0`` + U(±0.1), ``qvel`` + 0.1 N(0, 1).

    Dynamics: penalty ground contact and critically damped limit springs (see
    :meth:`build_world`); over 200 steps of random actions the torso's mean height is
    MuJoCo's (0.63 m), and episodes end less often (3 against 17 in 8 x 200 steps).
    """

    asset = "ant.xml"
    observation_dim = 27
    ctrl_cost_weight = 0.5
    reset_noise_scale = 0.1

    def build_world(self, builder: Any) -> None:
        """The file's world, each limited hinge's limit damped critically on its armature.

        ant.xml's ``qpos0`` has the ankles 30 degrees outside their range. Newton's limit
        spring (ke 1e4 N m/rad, kd 10: damping ratio 0.05 on the armature 1, over 99% of
        the DOF's inertia) then flings the ant above v5's healthy 1 m within 10 steps of
        most resets; MuJoCo's limit is a critically damped soft constraint (default
        ``solref`` 0.02 s, ratio 1). So ``kd = 2 sqrt(ke armature)`` (200).
        """
        super().build_world(builder)
        for dof, (ke, armature) in enumerate(
            zip(builder.joint_limit_ke, builder.joint_armature, strict=True)
        ):
            if ke > 0.0 and armature > 0.0:
                builder.joint_limit_kd[dof] = 2.0 * math.sqrt(ke * armature)

    def _velocity_noise(self, num: int) -> torch.Tensor:
        normal = torch.randn(num, self.initial_qvel.numel(), generator=self.generator,
                             device=self.device, dtype=self.dtype)  # fmt: skip
        return self.reset_noise_scale * normal

    def _healthy(self, state: State) -> torch.Tensor:
        qpos, qvel = self.qpos_qvel(state)
        finite = torch.isfinite(torch.cat([qpos, qvel], -1)).all(-1)
        z = qpos[:, 2]
        low, high = self.healthy_z_range
        return finite & (z >= low) & (z <= high)


class _Humanoid(_FloatingBase):
    """The humanoids' observation: ``qpos[2:]``, ``qvel``, then (each optional, v5's
    ``include_*_in_observation``) ``cinert[1:]``, ``cvel[1:]``, ``qfrc_actuator[6:]``.

    ``qfrc_actuator`` is the motors' gear x the last action clamped to ``ctrlrange``, in
    ``qvel`` order (0 after a reset, as MuJoCo's ``ctrl``); the state keeps the last
    action as ``ctrl`` for it.
    """

    reset_noise_scale = 1e-2
    ctrl_cost_weight = 0.1
    observation_dim = 270
    include = {"cinert": True, "cvel": True, "qfrc_actuator": True}

    def _observation_options(self, kwargs: dict[str, Any]) -> None:
        self.include = {
            part: bool(kwargs.pop(f"include_{part}_in_observation", on))
            for part, on in type(self).include.items()
        }
        bodies, nv = 13, 23  # the humanoid files' (checked after loading)
        widths = {"cinert": 10 * bodies, "cvel": 6 * bodies, "qfrc_actuator": nv - 6}
        self.observation_dim = 45 + sum(widths[part] for part, on in self.include.items() if on)

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", **kwargs: Any) -> None:
        self._motion: BodyMotion | None = None
        super().__init__(num_envs, device, **kwargs)
        if len(self.body_labels) != 13 or self.mujoco_coordinates.nv != 23:
            raise ValueError(
                f"{self.asset}: expected v5's 13 bodies and 23 DOFs, got "
                f"{len(self.body_labels)} and {self.mujoco_coordinates.nv}."
            )
        qvel_of_dof = {j.qd: j.qvel for j in self.mujoco_coordinates.joints}
        self._actuator_qvel = torch.tensor(
            [qvel_of_dof[dof] for dof in self.actuated_dofs], device=self.device
        )

    @property
    def motion(self) -> BodyMotion:
        """Body poses and twists of states (built on first use)."""
        if self._motion is None:
            self._motion = BodyMotion(self)
        return self._motion

    def _mass_centre(self, state: State) -> torch.Tensor:
        positions, quaternions = self.body_poses(state)
        com = positions + rotate(quaternions, self.motion.com)
        return mass_centre(com, self.motion.mass)

    def _sample_initial_state(self, num: int) -> State:
        state = super()._sample_initial_state(num)
        if self.include["qfrc_actuator"]:
            state["ctrl"] = torch.zeros(num, self.action_dim, device=self.device, dtype=self.dtype)
        return state

    def _dynamics(self, state: State, action: torch.Tensor) -> State:
        next_state = super()._dynamics(state, action)
        return {**next_state, "ctrl": action} if self.include["qfrc_actuator"] else next_state

    def qfrc_actuator(self, ctrl: torch.Tensor) -> torch.Tensor:
        """MuJoCo's ``qfrc_actuator`` ``[n, nv]`` of the motors' ``ctrl`` ``[n, actions]``."""
        if self.control_range is not None:
            ctrl = torch.clamp(ctrl, *self.control_range)
        forces = ctrl.new_zeros(ctrl.shape[0], self.mujoco_coordinates.nv)
        return forces.index_add(1, self._actuator_qvel, ctrl * self.action_scale)

    def _observe(self, state: State) -> torch.Tensor:
        parts = [super()._observe(state)]
        if self.include["cinert"] or self.include["cvel"]:
            motion = self.motion(state)
            centre = mass_centre(motion["com"], self.motion.mass)
            num = centre.shape[0]
            if self.include["cinert"]:
                parts.append(cinert(motion, self.motion.inertia, self.motion.mass, centre)
                             .reshape(num, -1))  # fmt: skip
            if self.include["cvel"]:
                parts.append(cvel(motion, centre).reshape(num, -1))
        if self.include["qfrc_actuator"]:
            parts.append(self.qfrc_actuator(state["ctrl"])[:, 6:])
        return torch.cat(parts, -1)


class GymnasiumHumanoid(_Humanoid):
    """Humanoid-v5 on Newton: humanoid.xml (17 motors, gear 25-300, ctrlrange ±0.4),
    frame skip 5 (dt 0.015 s).

    Observation (270): ``qpos[2:]``, ``qvel``, ``cinert[1:]``, ``cvel[1:]``,
    ``qfrc_actuator[6:]`` (v5's 348 less ``cfrc_ext``). Reward: 1.25 x the x velocity
    of the mass centre (mass-weighted body COMs) over the step + 5 while healthy
    - 0.1 |action|^2 (no contact cost). Healthy while the torso's height is in
    (1, 2); terminates otherwise. Reset: ``qpos0`` + U(±0.01), ``qvel`` + U(±0.01).

    Dynamics: penalty ground contact; the knees start 2 degrees past their range
    (as in MuJoCo), where Newton's limit spring kicks them harder than MuJoCo's soft
    limit. Under random actions it falls as MuJoCo's does (torso below 1 m by step ~20).
    """

    asset = "humanoid.xml"
    forward_reward_weight = 1.25
    healthy_reward = 5.0
    healthy_z_range = (1.0, 2.0)

    def _healthy(self, state: State) -> torch.Tensor:
        return self._root_height_healthy(state)

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        before, after = self._mass_centre(state), self._mass_centre(next_state)
        x_velocity = (after[:, 0] - before[:, 0]) / self.dt
        healthy = self._healthy(next_state).to(x_velocity.dtype) * self.healthy_reward
        control = self.ctrl_cost_weight * action.square().sum(-1)
        return self.forward_reward_weight * x_velocity + healthy - control


class GymnasiumHumanoidStandup(_Humanoid):
    """HumanoidStandup-v5 on Newton: humanoidstandup.xml (the humanoid lying on the floor),
    frame skip 5 (dt 0.015 s).

    Observation (270): as :class:`GymnasiumHumanoid`'s. Reward: the torso's height after
    the step / the file's timestep 0.003 s (v5 divides by ``model.opt.timestep``, not
    dt; its ``uph_cost_weight`` is unused, so not offered) - 0.1 |action|^2 + 1 (no
    impact cost). Never terminates. Reset: ``qpos0`` + U(±0.01), ``qvel`` + U(±0.01).

    Dynamics: the humanoid lies on Newton's penalty ground contact, its limbs colliding
    with each other as the file asks; after 100 steps of zero action its torso rests at
    0.066 m against MuJoCo's 0.087 m, so the resting reward is 23 against 30.
    """

    asset = "humanoidstandup.xml"
    healthy_reward = 0.0
    terminate_when_unhealthy = False

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", **kwargs: Any) -> None:
        super().__init__(num_envs, device, **kwargs)
        self.file_timestep = self._file_timestep(self.model_file)

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        height = self.qpos_qvel(next_state)[0][:, 2]
        return height / self.file_timestep - self.ctrl_cost_weight * action.square().sum(-1) + 1.0
