"""Gymnasium's MuJoCo control tasks (v5) on Newton, from Gymnasium's own files.

InvertedPendulum, InvertedDoublePendulum, Reacher and Swimmer load the file the
installed ``gymnasium`` package ships, with MuJoCo's meaning (``joint_q`` is
MuJoCo's ``qpos``; the file's gravity, masses, armature, damping, motors and
``ctrlrange``), and keep v5's observation, reward, termination, reset noise,
frame skip and episode length (``max_episode_steps`` of v5's registration).

Where the dynamics differ from MuJoCo's, in every task: Newton's Featherstone
steps semi-implicit Euler (first order; ``substeps="auto"`` makes no substep
longer than the file's timestep) where the files ask for RK4, so courses part
from MuJoCo's by about 1e-2 (rad, m) in 10 steps of random actions, half that
at half the substep; and joint limits are penalty springs (Newton's ``limit_ke``
1e4, ``limit_kd`` 10: they rebound) where MuJoCo solves a soft, critically
damped constraint with a ``margin``, so courses part further once a limit acts.
None of the files' geoms collide (``contype="0"``): contacts are off and their
planes (floor, ground) are left out of the import.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Any

import numpy as np
import torch

from pathgrad.envs.base import State
from pathgrad.envs.newton.base import NewtonEnv
from pathgrad.envs.newton.engine.bridge import NewtonSimulation
from pathgrad.envs.newton.engine.stability import stable_substeps
from pathgrad.envs.newton.model_files.mjcf_file import parse_mjcf
from pathgrad.envs.newton.model_files.mjcf_joints import read_mjcf_joints
from pathgrad.envs.newton.model_files.model_file import load_model_file
from pathgrad.envs.newton.robots.gymnasium_locomotion import GymnasiumLocomotion, gymnasium_asset

__all__ = ["GymnasiumControl", "GymnasiumInvertedDoublePendulum", "GymnasiumInvertedPendulum",
           "GymnasiumReacher", "GymnasiumSwimmer", "InertiaBoxFluid"]  # fmt: skip


class GymnasiumControl(NewtonEnv):
    """A v5 control task on Newton: the file, its frame skip, MuJoCo's coordinates.

    Args:
        num_envs: Number of worlds.
        device: Torch device.
        **kwargs: the task's v5 arguments (``options``), then NewtonEnv's
            (``substeps``, ``capture``, ``seed``, ``max_episode_steps``, ...).
    """

    # Newton's limit constants and explicit damping: what its results were measured with
    joint_limits, implicit_damping, contact_softness = "newton", False, "newton"

    asset = ""
    frame_skip: int
    observation_dim: int
    planes: tuple[str, ...] = ()  # the file's (non-colliding) planes, left out of the import
    options: tuple[str, ...] = ()  # v5's constructor arguments this task takes
    reset_noise_scale = 0.0

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", **kwargs: Any) -> None:
        for name in self.options:
            if name in kwargs:
                setattr(self, name, type(getattr(type(self), name))(kwargs.pop(name)))
        path = gymnasium_asset(self.asset)
        self.file_timestep = GymnasiumLocomotion._file_timestep(path)
        kwargs.setdefault("substeps", "auto")
        kwargs.setdefault("dt", self.frame_skip * self.file_timestep)
        super().__init__(num_envs, device, model_file=path, contacts=False, **kwargs)

    def _choose_substeps(self, solver: str) -> None:
        """``substeps="auto"``: half the stiffest term's stability bound, and no substep
        longer than the file's timestep (MuJoCo's step)."""
        step = float(self.simulation_options["dt"])  # a file timestep's, or the env step's
        count, why = stable_substeps(self, step)
        frames = max(1, round(step / self.file_timestep))
        if count < frames:
            count, why = frames, f"the file's timestep; its stiffest term allows more: {why}"
        self.simulation_options["substeps"] = count
        self.simulation = NewtonSimulation(
            self.simulation.model, solver=solver, **self.simulation_options
        )
        warnings.warn(
            f"{type(self).__name__}: substeps auto: {count} of {step / count:.3g} s per "
            f"simulation step of {step:.3g} s ({why}).",
            UserWarning,
            stacklevel=3,
        )

    def model_file_options(self) -> dict[str, Any]:
        return {"ignore_names": [f"^{name}$" for name in self.planes]}

    initial_qpos = GymnasiumLocomotion.initial_qpos
    qpos_qvel = GymnasiumLocomotion.qpos_qvel

    def _noise(self, num: int, width: int, scale: float, normal: bool = False) -> torch.Tensor:
        if normal:
            return scale * torch.randn(num, width, generator=self.generator,
                                       device=self.device, dtype=self.dtype)  # fmt: skip
        return self._uniform(-scale, scale, num, width)

    def _from_mujoco(self, qpos: torch.Tensor, qvel: torch.Tensor) -> State:
        joint_q, joint_qd = self.joint_state_from_mujoco(qpos, qvel)
        return {"joint_q": joint_q, "joint_qd": joint_qd}

    def _sample_initial_state(self, num: int) -> State:
        """v5's reset: the file's pose at rest plus uniform noise of ``reset_noise_scale``."""
        scale = self.reset_noise_scale
        qpos = self.initial_qpos + self._noise(num, self.initial_qpos.numel(), scale)
        return self._from_mujoco(qpos, self._noise(num, self.dofs, scale))


class GymnasiumInvertedPendulum(GymnasiumControl):
    """InvertedPendulum-v5 on Newton: inverted_pendulum.xml, frame skip 2 (dt 0.04 s),
    observation ``qpos, qvel`` (4), reward 1 while healthy, terminated once an observation
    entry is not finite or ``|qpos[1]| > 0.2``; reset noise uniform 0.01 on qpos and qvel;
    1000 steps. The reward is piecewise constant: its pathwise derivative is zero, so an
    analytic-gradient learner (SHAC, SAPO) learns only through its critic's value."""

    asset = "inverted_pendulum.xml"
    frame_skip = 2
    observation_dim = 4
    options = ("reset_noise_scale",)
    reset_noise_scale = 0.01

    def _observe(self, state: State) -> torch.Tensor:
        return torch.cat(self.qpos_qvel(state), dim=-1)

    def _terminated(self, state: State) -> torch.Tensor:
        qpos, qvel = self.qpos_qvel(state)
        finite = torch.isfinite(torch.cat([qpos, qvel], dim=-1)).all(-1)
        return ~finite | (qpos[:, 1].abs() > 0.2)

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        """1 while healthy, else 0: a function of the state with its derivative, zero."""
        angle = self.qpos_qvel(next_state)[0][:, 1]
        alive = ~self._terminated(next_state)
        return torch.where(alive, 1.0 + 0.0 * angle, torch.zeros_like(angle))


class GymnasiumInvertedDoublePendulum(GymnasiumControl):
    """InvertedDoublePendulum-v5 on Newton: inverted_double_pendulum.xml, frame skip 5
    (dt 0.05 s); observation ``qpos[0]``, ``sin`` and ``cos`` of the hinges, ``qvel`` and
    the slider's constraint force, both clipped to ±10 (9); reward ``healthy_reward``
    while the tip site is above ``y > 1`` minus ``0.01 x^2 + (y - 2)^2`` and ``0.001 v1^2
    + 0.005 v2^2`` (hinge velocities), terminated at ``y <= 1``; reset noise uniform 0.1
    on qpos, normal 0.1 on qvel; 1000 steps.

    The constraint force (MuJoCo's ``qfrc_constraint[0]``, of the slider's limit) is
    Newton's limit penalty force on the slider, ``ke (bound - x) - kd v`` past a bound,
    else 0: both are 0 while ``|x| < 0.99`` (MuJoCo's limit acts from its margin 0.01
    before the bound and depends on the applied forces; Newton's only past the bound).
    """

    asset = "inverted_double_pendulum.xml"
    frame_skip = 5
    observation_dim = 9
    planes = ("floor",)
    options = ("healthy_reward", "reset_noise_scale")
    healthy_reward = 10.0
    reset_noise_scale = 0.1
    tip = ("pole2", (0.0, 0.0, 0.6))  # the site "tip"

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", **kwargs: Any) -> None:
        super().__init__(num_envs, device, **kwargs)
        dof = self.mujoco_coordinates.dof_names.index("slider")
        model = self.simulation.model
        self._slider = dof
        self._slider_limit = tuple(
            float(getattr(model, name).numpy()[dof])
            for name in ("joint_limit_lower", "joint_limit_upper", "joint_limit_ke",
                         "joint_limit_kd")
        )  # fmt: skip

    def _sample_initial_state(self, num: int) -> State:
        scale = self.reset_noise_scale
        qpos = self.initial_qpos + self._noise(num, self.initial_qpos.numel(), scale)
        return self._from_mujoco(qpos, self._noise(num, self.dofs, scale, normal=True))

    def constraint_force(self, state: State) -> torch.Tensor:
        """Newton's limit force on the slider ``[N]`` (N), unclipped."""
        lower, upper, ke, kd = self._slider_limit
        x, v = state["joint_q"][:, self._slider], state["joint_qd"][:, self._slider]
        bound = torch.where(x < lower, lower, upper)
        force = ke * (bound - x) - kd * v
        return torch.where((x < lower) | (x > upper), force, torch.zeros_like(force))

    def tip_position(self, state: State) -> torch.Tensor:
        return self.body_point(state, *self.tip)

    def _observe(self, state: State) -> torch.Tensor:
        qpos, qvel = self.qpos_qvel(state)
        hinges = qpos[:, 1:]
        force = self.constraint_force(state).clamp(-10.0, 10.0)[:, None]
        return torch.cat([qpos[:, :1], hinges.sin(), hinges.cos(), qvel.clamp(-10.0, 10.0),
                          force], dim=-1)  # fmt: skip

    def _terminated(self, state: State) -> torch.Tensor:
        return self.tip_position(state)[:, 2] <= 1.0

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        tip = self.tip_position(next_state)
        x, y = tip[:, 0], tip[:, 2]
        _, qvel = self.qpos_qvel(next_state)
        alive = (y > 1.0).to(x.dtype) * self.healthy_reward
        distance = 0.01 * x.square() + (y - 2.0).square()
        velocity = 0.001 * qvel[:, 1].square() + 0.005 * qvel[:, 2].square()
        return alive - distance - velocity

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        return {"tip_height": self.tip_position(state)[:, 2].detach()}


class GymnasiumReacher(GymnasiumControl):
    """Reacher-v5 on Newton: reacher.xml, frame skip 2 (dt 0.02 s); observation ``cos`` and
    ``sin`` of the arm's hinges, the target's ``qpos``, the hinges' ``qvel`` and the
    fingertip's position minus the target's (x, y) (10); reward ``-reward_dist_weight
    |fingertip - target| - reward_control_weight |a|^2`` after the step, no termination;
    reset: uniform 0.1 on the arm's qpos, uniform 0.005 on its qvel, the target uniform
    in the disk of radius 0.2 at rest; 50 steps (v5's registration)."""

    asset = "reacher.xml"
    frame_skip = 2
    observation_dim = 10
    default_max_episode_steps = 50
    planes = ("ground",)
    options = ("reward_dist_weight", "reward_control_weight")
    reward_dist_weight = 1.0
    reward_control_weight = 1.0

    def _sample_initial_state(self, num: int) -> State:
        qpos = self.initial_qpos + self._uniform(-0.1, 0.1, num, self.initial_qpos.numel())
        qvel = self._uniform(-0.005, 0.005, num, self.dofs)
        qpos = torch.cat([qpos[:, :-2], self._goal(num)], dim=-1)
        qvel = torch.cat([qvel[:, :-2], torch.zeros_like(qvel[:, -2:])], dim=-1)
        return self._from_mujoco(qpos, qvel)

    def _goal(self, num: int) -> torch.Tensor:
        """Goals ``[num, 2]`` uniform in the disk of radius 0.2: v5's distribution (v5 draws
        by rejection from the square), drawn in polar form, two uniforms a row."""
        draw = self._uniform(0.0, 1.0, num, 2)
        radius, angle = 0.2 * draw[:, 0].sqrt(), 2.0 * math.pi * draw[:, 1]
        return torch.stack([radius * angle.cos(), radius * angle.sin()], dim=-1)

    def fingertip_to_target(self, state: State) -> torch.Tensor:
        """The fingertip's body position minus the target's ``[N, 3]``."""
        positions, _ = self.body_poses(state)
        fingertip, target = self.body_index("fingertip"), self.body_index("target")
        return positions[:, fingertip] - positions[:, target]

    def _observe(self, state: State) -> torch.Tensor:
        qpos, qvel = self.qpos_qvel(state)
        theta = qpos[:, :2]
        difference = self.fingertip_to_target(state)[:, :2]
        return torch.cat([theta.cos(), theta.sin(), qpos[:, 2:], qvel[:, :2], difference], -1)

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        distance = self.fingertip_to_target(next_state).norm(dim=-1)
        control = action.square().sum(-1)
        return -self.reward_dist_weight * distance - self.reward_control_weight * control

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        return {"distance": self.fingertip_to_target(state).norm(dim=-1).detach()}


class InertiaBoxFluid:
    """MuJoCo's inertia-box fluid model (``<option density viscosity>``, no wind) as
    generalized forces, differentiable in torch, for a tree of hinges and slides.

    Each body is the box of its inertia (sides ``r_i = sqrt(6 (I_j + I_k - I_i) / m)`` from
    its principal moments) moving through a still medium; at its centre of mass, in its
    principal axes, it feels the viscous force ``-3 pi d beta v`` and torque ``-pi d^3 beta
    w`` (``d`` the mean side) and the quadratic drag ``-rho r_j r_k |v_i| v_i / 2`` and
    ``-rho r_i (r_j^4 + r_k^4) |w_i| w_i / 64``; ``J^T`` of the wrenches is the force on
    the joints.
    """

    def __init__(self, env: NewtonEnv, density: float, viscosity: float) -> None:
        self.density, self.viscosity = float(density), float(viscosity)
        model, mapping, bodies = env.simulation.model, env.mujoco_coordinates, len(env.body_labels)
        files = read_mjcf_joints(env.model_file)
        names = [label.rsplit("/", 1)[-1] for label in env.body_labels]
        if [body.name for body in files] != names:
            raise ValueError(f"InertiaBoxFluid: the file's bodies are not Newton's {names}")
        placed = {joint.name: joint for joint in mapping.joints}
        self.joints = []  # (body, MjcfJoint, q index, qd index), in each body's order
        for b, body in enumerate(files):
            for joint in body.joints:
                if joint.type not in ("hinge", "slide") or joint.name not in placed:
                    raise ValueError(f"InertiaBoxFluid: joint '{joint.name}' is not a named "
                                     "hinge or slide")  # fmt: skip
                self.joints.append((b, joint, placed[joint.name].q, placed[joint.name].qd))
        count = len(env.joint_labels)
        children, parents = model.joint_child.numpy()[:count], model.joint_parent.numpy()[:count]
        parent = {int(c): int(p) for c, p in zip(children, parents, strict=True)}
        moves = np.zeros((bodies, len(self.joints)), dtype=np.float32)  # joint k moves body b
        for k, (owner, *_) in enumerate(self.joints):
            for b in range(bodies):
                ancestor = b
                while ancestor >= 0 and ancestor != owner:
                    ancestor = parent.get(ancestor, -1)
                moves[b, k] = float(ancestor == owner)
        mass = model.body_mass.numpy()[:bodies].astype(np.float64)
        frames, sides = [], []
        for inertia, m in zip(model.body_inertia.numpy()[:bodies].astype(np.float64), mass,
                              strict=True):  # fmt: skip
            moments, axes = _principal_axes(inertia)
            sides.append(np.sqrt(np.maximum(1e-15, moments.sum() - 2 * moments) / max(m, 1e-15)
                                 * 6.0))  # fmt: skip
            frames.append(axes)

        def tensor(value: Any) -> torch.Tensor:
            return torch.as_tensor(np.asarray(value), dtype=torch.float32, device=env.device)

        self.moves = tensor(moves) * tensor(mass > 1e-15)[:, None]  # massless bodies feel none
        self.frames, self.sides = tensor(frames), tensor(sides)
        self.com = tensor(model.body_com.numpy()[:bodies])
        self.hinge = tensor([joint.type == "hinge" for _, joint, _, _ in self.joints])
        self.axes = tensor([joint.axis for _, joint, _, _ in self.joints])
        self.crosses = tensor([np.cross(joint.axis, np.eye(3)).T for _, joint, *_ in self.joints])
        self.pivots = tensor([joint.pos for _, joint, _, _ in self.joints])
        self.q_index = torch.tensor([q for *_, q, _ in self.joints], device=env.device)
        self.qd_index = torch.tensor([qd for *_, qd in self.joints], device=env.device)
        self.refs = tensor([joint.ref for _, joint, _, _ in self.joints])

    def joint_forces(self, env: NewtonEnv, state: State) -> torch.Tensor:
        """Generalized fluid forces ``[N, dofs]`` of ``state`` (at its velocities)."""
        positions, quaternions = env.body_poses(state)
        rotations = _matrix(quaternions)  # [N, B, 3, 3]
        com = positions + (rotations @ self.com[..., None])[..., 0]
        axes, anchors = self._joint_axes(state, positions, rotations)  # [N, K, 3] (world)
        levers = torch.linalg.cross(axes[:, None], com[:, :, None] - anchors[:, None], dim=-1)
        hinge = self.hinge[:, None]
        linear = self.moves[None, ..., None] * (hinge * levers + (1 - hinge) * axes[:, None])
        angular = self.moves[None, ..., None] * (hinge * axes)[:, None]  # [N, B, K, 3]
        qd = state["joint_qd"][:, self.qd_index]
        velocity = (linear * qd[:, None, :, None]).sum(2)  # [N, B, 3]
        spin = (angular * qd[:, None, :, None]).sum(2)
        frames = rotations @ self.frames  # principal axes in the world
        force, torque = self._wrench(_apply(frames, velocity, True), _apply(frames, spin, True))
        force, torque = _apply(frames, force), _apply(frames, torque)
        generalized = (linear * force[:, :, None]).sum((1, 3))
        generalized = generalized + (angular * torque[:, :, None]).sum((1, 3))  # J^T wrench
        out = torch.zeros_like(state["joint_qd"])
        return out.index_copy(1, self.qd_index, generalized)

    def _joint_axes(
        self, state: State, positions: torch.Tensor, rotations: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """World axes and anchors of the joints: each body's joints undone from its pose,
        last first (MuJoCo turns a body about its hinge anchors in the file's order)."""
        angle = state["joint_q"][:, self.q_index] - self.refs
        axes: list[Any] = [None] * len(self.joints)
        anchors: list[Any] = [None] * len(self.joints)
        frame: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        for k in reversed(range(len(self.joints))):
            body = self.joints[k][0]
            x, rotation = frame.get(body, (positions[:, body], rotations[:, body]))
            axis = rotation @ self.axes[k]
            if bool(self.hinge[k]):
                anchor = x + rotation @ self.pivots[k]
                rotation = rotation @ _axis_angle(self.crosses[k], -angle[:, k])
                x = anchor - rotation @ self.pivots[k]
            else:
                x = x - axis * angle[:, k, None]
                anchor = x
            axes[k], anchors[k] = axis, anchor
            frame[body] = (x, rotation)
        return torch.stack(axes, 1), torch.stack(anchors, 1)

    def _wrench(self, v: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Force and torque ``[N, B, 3]`` in the principal axes of local ``v``, ``w``."""
        r = self.sides
        diameter = r.mean(-1, keepdim=True)
        force = -3.0 * math.pi * diameter * self.viscosity * v
        torque = -math.pi * diameter**3 * self.viscosity * w
        across = r.roll(-1, -1) * r.roll(-2, -1)  # r_j r_k
        force = force - 0.5 * self.density * across * v.abs() * v
        fourth = r.roll(-1, -1) ** 4 + r.roll(-2, -1) ** 4
        return force, torque - self.density * r * fourth * w.abs() * w / 64.0


def _principal_axes(inertia: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Principal moments and axes (columns) of a 3x3 inertia; the body's own axes where it
    is diagonal (so that equal moments keep them, as MuJoCo's frame of a capsule does)."""
    off = inertia - np.diag(np.diag(inertia))
    if np.abs(off).max() <= 1e-6 * max(np.abs(inertia).max(), 1e-30):
        return np.diag(inertia).copy(), np.eye(3)
    return np.linalg.eigh(0.5 * (inertia + inertia.T))


def _matrix(quaternion: torch.Tensor) -> torch.Tensor:
    """Rotation matrices ``[..., 3, 3]`` of unit quaternions ``[..., 4]`` (x, y, z, w)."""
    x, y, z, w = quaternion.unbind(-1)
    rows = [
        1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w),
        2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w),
        2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y),
    ]  # fmt: skip
    return torch.stack(rows, -1).unflatten(-1, (3, 3))


def _axis_angle(cross: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rotations ``[N, 3, 3]`` by ``angle [N]`` about a unit axis (``cross``: its cross-product
    matrix), by Rodrigues' formula."""
    sin, cos = angle.sin()[:, None, None], angle.cos()[:, None, None]
    eye = torch.eye(3, dtype=cross.dtype, device=cross.device)
    return eye + sin * cross + (1 - cos) * (cross @ cross)


def _apply(frames: torch.Tensor, vectors: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    matrices = frames.transpose(-1, -2) if inverse else frames
    return (matrices @ vectors[..., None])[..., 0]


def _fluid_options(path: str) -> tuple[float, float]:
    """The file's ``<option density viscosity>`` (0 where unset); a wind is refused."""
    density = viscosity = 0.0
    for option in parse_mjcf(path).iter("option"):
        density = float(option.get("density", density))
        viscosity = float(option.get("viscosity", viscosity))
        if any(float(v) != 0.0 for v in option.get("wind", "0 0 0").split()):
            raise ValueError(f"'{path}': a fluid wind is not modelled.")
    return density, viscosity


class GymnasiumSwimmer(GymnasiumControl):
    """Swimmer-v5 on Newton: swimmer.xml, frame skip 4 (dt 0.04 s); observation ``qpos[2:]``
    and ``qvel`` (8); reward ``forward_reward_weight`` x the x velocity of ``qpos[0]`` over
    the step minus ``ctrl_cost_weight |a|^2`` (1e-4); no termination; reset noise uniform
    0.1 on qpos and qvel; 1000 steps.

    The swimmer's thrust is the file's fluid (``density 4000``, ``viscosity 0.1``):
    :class:`InertiaBoxFluid`, MuJoCo's inertia-box model, evaluated at the start of each of
    the step's ``frame_skip`` frames of the file's timestep and held over the frame's
    substeps (MuJoCo evaluates it at every RK4 stage). It matches MuJoCo's
    ``qfrc_passive`` of a state to float precision, and a gait inside the hinges' ranges
    follows MuJoCo's course within 3 cm over 2 s; large actions drive the hinges to their
    ±100° limits within half a second, where the limit models part the courses.
    """

    asset = "swimmer.xml"
    frame_skip = 4
    observation_dim = 8
    planes = ("floor",)
    options = ("forward_reward_weight", "ctrl_cost_weight", "reset_noise_scale")
    forward_reward_weight = 1.0
    ctrl_cost_weight = 1e-4
    reset_noise_scale = 0.1

    extra_forces_each_file_timestep = True  # the fluid's force, at each frame's start

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", **kwargs: Any) -> None:
        super().__init__(num_envs, device, **kwargs)
        self.fluid = InertiaBoxFluid(self, *_fluid_options(self.model_file))

    def build_world(self, builder: Any) -> None:
        """The file, with the note that its fluid is not applied dropped (this env applies it)."""
        self.mujoco_coordinates, notes = load_model_file(
            builder, self.model_file, self.model_file_options(), mujoco_meaning=self.mujoco_meaning
        )
        for note in notes:
            note = re.sub(r"fluid forces \(<option [^>]*>\): none are applied[^;]*(; )?", "", note)
            warnings.warn(f"{type(self).__name__}: {note}", UserWarning, stacklevel=3)

    def extra_joint_forces(self, state: State) -> torch.Tensor:
        return self.fluid.joint_forces(self, state)

    def _observe(self, state: State) -> torch.Tensor:
        qpos, qvel = self.qpos_qvel(state)
        return torch.cat([qpos[:, 2:], qvel], dim=-1)

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        before, _ = self.qpos_qvel(state)
        after, _ = self.qpos_qvel(next_state)
        x_velocity = (after[:, 0] - before[:, 0]) / self.dt
        return (
            self.forward_reward_weight * x_velocity
            - self.ctrl_cost_weight * action.square().sum(-1)
        )

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        qpos, _ = self.qpos_qvel(state)
        return {"x_position": qpos[:, 0].detach()}
