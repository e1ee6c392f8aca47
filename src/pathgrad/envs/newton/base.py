"""``NewtonEnv``: a batched pathgrad env whose physics is a Newton model.

The env state is torch tensors (``joint_q`` ``[N, coordinates]``,
``joint_qd`` ``[N, dofs]`` and any task entries), so auto-reset,
``final_observation``, seeding, exact ``state_dict`` and checkpoints work as
for the built-in envs. A subclass gives the model (:meth:`build_world`, or a
``model_file`` MJCF/URDF) and writes in torch only the initial-state
distribution, reward, observation, termination, metrics and optional extra
joint forces (only the reward is required: the initial state defaults to the
model's pose and the observation to ``joint_q`` and ``joint_qd``). One env step
is one autograd function through :class:`~pathgrad.envs.newton.engine.bridge.NewtonSimulation`;
:meth:`NewtonEnv.body_poses` and :meth:`NewtonEnv.body_point` give body poses
and points of a state by Newton's forward kinematics, differentiable in torch.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import newton
import torch

from pathgrad.core.env_contract import EnvContractError
from pathgrad.envs.base import BatchedDifferentiableEnv, State
from pathgrad.envs.newton.engine.actuation import (
    action_scales,
    actuated_dofs,
    check_positive_integers,
    control_range,
    per_dof,
)
from pathgrad.envs.newton.engine.bridge import NewtonBodyStep, NewtonSimulation, NewtonStep
from pathgrad.envs.newton.engine.contact_capacity import (
    ContactCapacityWatch,
    contact_capacity_problems,
)
from pathgrad.envs.newton.engine.contact_materials import override_contact_constants
from pathgrad.envs.newton.engine.contact_signal import CONTACT_SIGNAL_FRAMES
from pathgrad.envs.newton.engine.gradient_check_start import GradientCheckStarts
from pathgrad.envs.newton.engine.kinematics import BodyPoses, NewtonKinematics
from pathgrad.envs.newton.engine.model_checks import (
    check_finite_model,
    check_masses,
    check_something_moves,
    fixed_urdf_root,
    flat_inertias,
    limit_units,
    unbalanced_inertias,
    unread_motors,
)
from pathgrad.envs.newton.engine.scene_checks import (
    check_free_joint_quaternions,
    floor_without_contacts,
    ground_penetration,
    has_floor,
)
from pathgrad.envs.newton.engine.stability import instability_hint, steps_are_stable
from pathgrad.envs.newton.engine.state_names import column_labels, state_column_name
from pathgrad.envs.newton.model_files.mjcf_keyframes import keyframe_state
from pathgrad.envs.newton.model_files.mjcf_options import keep_file_inertias
from pathgrad.envs.newton.model_files.model_file import RobotFileMixin, load_model_file
from pathgrad.envs.newton.model_files.mujoco_meaning import MujocoCoordinates

__all__ = ["NewtonEnv"]


class NewtonEnv(RobotFileMixin, BodyPoses, GradientCheckStarts, BatchedDifferentiableEnv):
    """One Newton world per env row, stepped through the autograd bridge (float32).

    Args:
        num_envs: Number of worlds.
        device: Torch device; Warp runs on the same one.
        model_file: MJCF (``.xml``) or URDF (``.urdf``) of one world (instead of
            overriding :meth:`build_world`).
        solver: ``featherstone`` (joint coordinates) or ``semi_implicit`` (maximal
            coordinates: the state also carries ``body_q`` ``[N, bodies*7]`` and
            ``body_qd`` ``[N, bodies*6]``; ``joint_q``/``joint_qd`` follow from them).
        substeps: Solver steps per env step, or ``"auto"``: as many as keep every
            explicit stiff term (joint damping, limits, ground contact on the
            effective masses) at half its stability bound, said once. ``None``:
            ``"auto"`` where ``dt`` is an MJCF file's timestep, else 1.
        dt: Duration of one env step (s); ``None``: an MJCF file's ``<option
            timestep>`` (with ``mujoco_meaning``; MuJoCo's 0.002 where it sets none), else
            1/60.
        actuated_joints: Labels (or label suffixes) of the joints the action
            drives, in action order. By default, an MJCF file's ``<motor>`` joints
            (with ``mujoco_meaning``; neither this nor ``action_scale`` given), else
            every joint DOF that is not a free joint's.
        action_scale: Generalized force (N or N m) per unit action, a scalar or
            one per actuated DOF; by default the motors' gears (their ``ctrlrange``
            then bounds the action space, and actions are clamped to it, as MuJoCo
            clamps ``ctrl``), else 1.
        armature: Inertia (kg m^2, kg on sliders) added to every joint DOF's
            diagonal of the mass matrix, a scalar or one per DOF of the world
            (free joints included); ``None`` keeps the model's.
        joint_damping: Passive damping (N m s/rad, N s/m) of every joint DOF,
            evaluated by the solver at every substep, a scalar or one per DOF
            (Featherstone ignores it on free joints); ``None`` keeps the model's.
        contacts: Detect contacts (ground plane, self-collision) every substep.
        solver_options: Keyword arguments of the solver.
        contact_signal_frame: Frame of ``info["contact_forces"]`` and
            ``info["accelerations"]`` (Featherstone with contacts; AHAC reads them):
            ``"world_origin"`` (dflex's, in which AHAC's threshold was set) or
            ``"body"``; ``None`` keeps the class's :attr:`contact_signal_frame`.
        contacts_per_shape_pair: Contact buffer size per collidable shape pair
            (a capsule or sphere on a plane makes at most 2); ``None`` keeps the
            class's :attr:`contacts_per_shape_pair` (its ``None``: Newton's estimate).
            A step that needs more is warned about once (:mod:`.contact_capacity`).
        contact_ke: Contact stiffness (N/m) of every shape and the ground, replacing
            the model's (an MJCF file's: see ``contact_softness``); ``None`` keeps it. A
            softer contact changes less across touch and allows longer substeps.
        contact_kd: Contact damping (N s/m) likewise.
        contact_kf: Friction slope (N s/m) likewise (Newton's 1000): viscous below the
            Coulomb cap, explicit, stable while ``substep x kf < 2 x`` the effective mass
            the contact meets (a foot: a fraction of its leg's; the hint names it).
        capture: Replay each step's Warp operations as captured graphs (the
            same results; ``False`` launches every kernel from Python).
        joint_limits: ``"mujoco"``: an MJCF file's limited hinges and slides as soft as
            MuJoCo makes them (:mod:`.mjcf_limits`); ``"newton"``: the model's ``limit_ke``,
            ``limit_kd`` (Newton's import: 1e4, 10); ``None``: the class's.
        implicit_damping: Joint damping implicit, as MuJoCo's Euler integrates it; ``None``:
            the class's (its ``None``: as MuJoCo integrates the file, explicit under RK4).
        contact_softness: ``"mujoco"`` (a file's default): an MJCF file's contacts as soft
            as its geoms' ``solref`` on each body's effective mass (:mod:`.mjcf_contacts`;
            ``contact_ke``, ``contact_kd`` given win); ``"newton"``: the model's (Newton's
            import: 2500, 100); ``None``: the class's.
        keyframe: An MJCF file's ``<key>`` (its name or index) where resets start instead
            of ``qpos0`` (:mod:`.mjcf_keyframes`).
        **kwargs: ``dtype`` (float32 only), ``max_episode_steps``, ``seed``.

    Raises:
        FileNotFoundError: If ``model_file`` does not exist.
        ValueError: For a malformed model file, an unknown actuated joint, a
            bad solver, armature or damping setting or a dtype other than float32.
    """

    supported_dtypes = ("float32",)
    supports_torch_compile = False
    default_max_episode_steps = 1000
    default_model_file: str | None = None
    # An MJCF model_file keeps MuJoCo's joint pivots and coordinates (mujoco_meaning.py);
    # False keeps Newton's import as it is (the DiffRL robots, tuned on it).
    mujoco_meaning = True
    joint_limits = "mujoco"  # a file's limits: its solreflimit; "newton": the model's constants
    implicit_damping: bool | None = None  # None: as MuJoCo integrates the file's damping
    contact_softness = "mujoco"  # a file's contacts: its geoms' solref; "newton": the model's
    # None: an MJCF file's <option gravity> (with mujoco_meaning), else (0, 0, -9.81).
    gravity: tuple[float, float, float] | None = None
    # With contacts, a ground plane at z = 0 where the model file has no floor of its own.
    ground_plane = True
    # Contact capacity per collidable shape pair (None: Newton's estimate; see NewtonSimulation).
    contacts_per_shape_pair: int | None = None
    # Frame of info["contact_forces"] / ["accelerations"]: "world_origin" (dflex's) or "body".
    contact_signal_frame = "world_origin"
    # Keep each forward substep's contacts for the backward pass (NewtonSimulation).
    keep_contacts = True
    # Keep each forward substep's intermediates for its adjoint (no recompute; more memory).
    keep_intermediates = True
    # True where extra_joint_forces depends on the state as MuJoCo computes it at every
    # timestep of the file (a fluid): the env step is then simulated one file timestep at a
    # time, the forces evaluated again at each (as a state-dependent actuator's are).
    extra_forces_each_file_timestep = False

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        *,
        model_file: str | Path | None = None,
        solver: str = "featherstone",
        substeps: int | str | None = None,
        dt: float | None = None,
        actuated_joints: Sequence[str] | None = None,
        action_scale: float | Sequence[float] | None = None,
        armature: float | Sequence[float] | None = None,
        joint_damping: float | Sequence[float] | None = None,
        contacts: bool = False,
        solver_options: dict[str, Any] | None = None,
        capture: bool = True,
        contact_signal_frame: str | None = None,
        contacts_per_shape_pair: int | None = None,
        contact_ke: float | None = None,
        contact_kd: float | None = None,
        contact_kf: float | None = None,
        joint_limits: str | None = None,
        implicit_damping: bool | None = None,
        contact_softness: str | None = None,
        keyframe: str | int | None = None,
        **kwargs: Any,
    ) -> None:
        if contacts_per_shape_pair is not None:
            check_positive_integers(contacts_per_shape_pair=contacts_per_shape_pair)
            self.contacts_per_shape_pair = int(contacts_per_shape_pair)
        if contact_signal_frame not in (None, *CONTACT_SIGNAL_FRAMES):
            raise ValueError(
                f"contact_signal_frame must be one of {list(CONTACT_SIGNAL_FRAMES)}, "
                f"got {contact_signal_frame!r}."
            )
        self.contact_signal_frame = contact_signal_frame or self.contact_signal_frame
        if str(kwargs.get("dtype", "float32")).removeprefix("torch.") != "float32":
            raise ValueError(
                f"{type(self).__name__} computes in float32 (Newton); dtype "
                f"{kwargs['dtype']!r} is not available."
            )
        if int(num_envs) <= 0:
            raise ValueError(f"num_envs must be positive, got {num_envs}.")
        self.model_file = self._resolve_model_file(model_file)
        file_options = self._file_options()
        if self.gravity is None:
            self.gravity = file_options.gravity or (0.0, 0.0, -9.81)
        auto = substeps == "auto" or (substeps is None and dt is None and file_options.timestep)
        if isinstance(substeps, str) and substeps != "auto":
            raise ValueError(f"substeps must be a positive integer or 'auto', got {substeps!r}.")
        substeps = 1 if auto or substeps is None else substeps
        dt = dt if dt is not None else file_options.timestep or 1.0 / 60.0
        world = newton.ModelBuilder(gravity=self.gravity)
        self.mujoco_coordinates: MujocoCoordinates | None = None  # build_world may set it
        self.build_world(world)
        fixed = fixed_urdf_root(self.model_file, self.model_file_options(), contacts=contacts)
        if fixed is not None:
            warnings.warn(f"{type(self).__name__}: {fixed}", UserWarning, stacklevel=2)
        check_something_moves(world, self.model_file)  # no joint, or none with a DOF
        for name, value, values in (
            ("armature", armature, world.joint_armature),
            ("joint_damping", joint_damping, world.joint_damping),
        ):
            if value is not None:
                values[:] = per_dof(name, value, world.joint_dof_count)
        ground = override_contact_constants(
            world, self.ground_config(), contact_ke, contact_kd, contact_kf
        )
        check_finite_model(world)
        check_masses(world, world.body_label, world.joint_label)
        for warning in (
            flat_inertias(world, world.body_label),
            unbalanced_inertias(world, world.body_label),
            limit_units(world, self.model_file),
        ):
            if warning is not None:
                warnings.warn(f"{type(self).__name__}: {warning}", UserWarning, stacklevel=2)
        builder = newton.ModelBuilder(gravity=self.gravity)
        if self.mujoco_coordinates is not None:
            keep_file_inertias(builder)
        builder.replicate(world, int(num_envs))
        floor = self.mujoco_coordinates is not None and has_floor(world)
        if contacts and self.ground_plane and not floor:
            builder.add_ground_plane(cfg=ground)  # a file's own floor: not twice
        model = builder.finalize(device=str(torch.device(device)), requires_grad=True)
        for warning in (
            ground_penetration(model) if contacts else None,
            floor_without_contacts(model, contacts=contacts),
        ):
            if warning is not None:
                warnings.warn(f"{type(self).__name__}: {warning}", UserWarning, stacklevel=2)
        self.coordinates = world.joint_coord_count
        self.dofs = world.joint_dof_count
        motors = self._file_motors(actuated_joints, action_scale)
        self.tendon_forces = self._tendon_forces(world.joint_rest_q, torch.device(device))
        self.friction_loss = None  # the joints', with the file's physics (their masses then)
        self.free_damping = self._free_damping(torch.device(device))
        # A state-dependent actuator (position, velocity, bias) or tendon acts as MuJoCo's: its
        # force is computed again at every timestep of the file, each an actuator step.
        self.actuator_steps = self._actuator_steps(motors, dt, file_options.timestep)
        # What the simulation is built with, but the solver (a subclass replacing it keeps them)
        self.simulation_options: dict[str, Any] = {
            "substeps": substeps,
            "dt": dt / self.actuator_steps,
            "contacts": contacts,
            "solver_options": solver_options,
            "capture": capture,
            "contacts_per_shape_pair": self.contacts_per_shape_pair,
            "contact_signal_frame": self.contact_signal_frame,
            "keep_contacts": self.keep_contacts,
            "keep_intermediates": self.keep_intermediates,
        }
        self.simulation = NewtonSimulation(model, solver=solver, **self.simulation_options)
        self._contact_watch = ContactCapacityWatch()
        self.dt = float(dt)
        self.joint_labels = list(world.joint_label)
        self._free_joints = [  # (first coordinate, label): checked in the first initial state
            (int(world.joint_q_start[j]), label.rsplit("/", 1)[-1])
            for j, label in enumerate(self.joint_labels)
            if int(world.joint_type[j]) == int(newton.JointType.FREE)
        ]
        self.body_labels = list(world.body_label)
        self.coordinate_labels = column_labels(
            world.joint_q_start, self.coordinates, self.joint_labels
        )
        self.dof_labels = column_labels(world.joint_qd_start, self.dofs, self.joint_labels)
        self._kinematics: NewtonKinematics | None = None
        if motors:  # one action per actuator (a tendon's: its DOF of the largest coefficient)
            action_scale = [motor.gear * motor.gain for motor in motors]
            self.actuated_dofs = self._motor_dofs(motors)
        else:
            self.actuated_dofs = self._file_joint_dofs(actuated_joints) or actuated_dofs(
                world, self.joint_labels, actuated_joints
            )
        self._actuated_index = torch.as_tensor(
            self.actuated_dofs, dtype=torch.long, device=torch.device(device)
        )  # long even when empty
        self.action_dim = len(self.actuated_dofs)
        self.action_scale = action_scales(
            1.0 if action_scale is None else action_scale, self.action_dim, torch.device(device)
        )
        self.control_range = control_range(motors, torch.device(device))
        self.file_actuation = self._file_actuation(motors, torch.device(device))
        unread = unread_motors(self.model_file, self.action_scale.tolist())
        if unread is not None:
            warnings.warn(f"{type(self).__name__}: {unread}", UserWarning, stacklevel=2)
        self.default_joint_q = torch.tensor(world.joint_q, dtype=torch.float32, device=device)
        self.default_joint_qd = torch.tensor(world.joint_qd, dtype=torch.float32, device=device)
        if keyframe is not None:  # the file's saved pose: every reset starts there
            self.default_joint_q, self.default_joint_qd = keyframe_state(self, keyframe)
        if getattr(type(self), "observation_dim", None) is None:  # the default observation
            self.observation_dim = self.coordinates + self.dofs
            self.observation_dim_note = (
                f"{type(self).__name__} sets no observation_dim, so it is the model's "
                f"{self.coordinates} joint coordinates + {self.dofs} DOFs (the default "
                "_observe's width): set observation_dim on the class to the width your "
                "_observe returns"
            )
        super().__init__(num_envs, device, **kwargs)
        self._apply_control_range()
        given = tuple(k for k, v in (("ke", contact_ke), ("kd", contact_kd)) if v is not None)
        self._apply_file_physics(joint_limits, implicit_damping, contact_softness, given)
        if auto:
            self._choose_substeps(solver)

    # Model ---------------------------------------------------------------------------

    def build_world(self, builder: Any) -> None:
        """Add one world's bodies and joints to ``builder`` (default: load ``model_file``,
        an MJCF file with MuJoCo's meaning unless the class sets ``mujoco_meaning = False``)."""
        if self.model_file is None:
            raise EnvContractError(f"{type(self).__name__} needs a model_file or a build_world().")
        self.mujoco_coordinates, notes = load_model_file(
            builder, self.model_file, self.model_file_options(), mujoco_meaning=self.mujoco_meaning
        )
        for note in notes:
            warnings.warn(f"{type(self).__name__}: {note}", UserWarning, stacklevel=3)

    def model_file_options(self) -> dict[str, Any]:
        """Keyword arguments of ``add_mjcf``/``add_urdf`` for ``model_file``."""
        return {}

    def ground_config(self) -> Any:
        """Contact settings of the ground plane (``newton.ModelBuilder.ShapeConfig``)."""
        return None

    # Task defaults: the model's pose, joint coordinates and velocities -------------------

    def _sample_initial_state(self, num: int) -> State:
        """The model's default joint coordinates and velocities in every row."""
        return {
            "joint_q": self.default_joint_q.expand(num, -1).clone(),
            "joint_qd": self.default_joint_qd.expand(num, -1).clone(),
        }

    def _observe(self, state: State) -> torch.Tensor:
        """``joint_q`` and ``joint_qd`` side by side."""
        return torch.cat([state["joint_q"], state["joint_qd"]], dim=-1)

    # Physics -------------------------------------------------------------------------

    def extra_joint_forces(self, state: State) -> torch.Tensor | None:
        """Generalized forces ``[N, dofs]`` computed in torch (differentiable), or ``None``.

        Evaluated once per simulation step (the env step, or each file timestep of it
        with ``extra_forces_each_file_timestep`` or a state-dependent actuator), at its
        start state, and held over its substeps: a damping or stiffness term here is
        explicit at that step, less stable than the model's own (``joint_damping``), which
        the solver evaluates every substep.
        """
        return None

    def joint_forces(self, state: State, action: torch.Tensor) -> torch.Tensor:
        """Generalized forces of the step: the actions' (scaled on the actuated DOFs, or the
        file's actuators as MuJoCo computes them), the file's fixed tendons', joints' friction
        loss and free joints' damping, and the extras
        (actions clamped to the actuators' ``ctrlrange`` first, where the file gives one)."""
        if self.control_range is not None:
            action = torch.clamp(action, *self.control_range)
        if self.file_actuation is not None:  # MuJoCo's force of each actuator at this state
            forces = self.file_actuation.joint_forces(state["joint_q"], state["joint_qd"], action)
        else:
            forces = torch.zeros(
                (self.num_envs, self.dofs), dtype=action.dtype, device=action.device
            ).index_add(1, self._actuated_index, action * self.action_scale)
        if self.tendon_forces is not None:  # the file's fixed tendons' springs and dampers
            forces = forces + self.tendon_forces.joint_forces(state["joint_q"], state["joint_qd"])
        if self.friction_loss is not None:  # the file's joints' friction loss
            forces = forces + self.friction_loss.joint_forces(state["joint_qd"])
        if self.free_damping is not None:  # the file's free joints' damping
            forces = forces + self.free_damping.joint_forces(state["joint_q"], state["joint_qd"])
        extra = self.extra_joint_forces(state)
        if extra is None:
            return forces
        if extra.shape != forces.shape:
            raise EnvContractError(
                f"{type(self).__name__}.extra_joint_forces must return shape "
                f"{tuple(forces.shape)} (num_envs, dofs), got {tuple(extra.shape)}."
            )
        return forces + extra

    def state_entry_name(self, key: str, column: int) -> str | None:
        """The joint or body of column ``column`` of ``state[key]`` (for messages)."""
        return state_column_name(self, key, column)

    def _initial_state(self, num: int) -> State:
        """Sampled initial states, with their body coordinates when the solver carries them."""
        state = self._sample_initial_state(num)
        for key, width in (("joint_q", self.coordinates), ("joint_qd", self.dofs)):
            value = state.get(key) if isinstance(state, Mapping) else None
            if not isinstance(value, torch.Tensor) or value.shape != (num, width):
                got = (
                    "no such entry" if value is None
                    else f"shape {tuple(value.shape)}" if isinstance(value, torch.Tensor)
                    else f"a {type(value).__name__}"
                )  # fmt: skip
                raise EnvContractError(
                    f"{type(self).__name__}._sample_initial_state({num}) must return "
                    f"'{key}' of shape ({num}, {width}); got {got}."
                )
        if self._free_joints:  # once: a host synchronisation
            check_free_joint_quaternions(type(self).__name__, state["joint_q"], self._free_joints)
            self._free_joints = []
        if self.simulation.maximal:
            state = {**state, **self._body_coordinates(state["joint_q"], state["joint_qd"])}
        return state

    def _body_coordinates(
        self, joint_q: torch.Tensor, joint_qd: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """Body poses and twists ``[num, bodies*7]``, ``[num, bodies*6]`` of joint coordinates.

        The worlds are identical copies, so rows are evaluated in worlds
        ``0..num-1`` (padded with the first row up to ``num_envs``).
        """
        num = joint_q.shape[0]
        if num > self.num_envs:
            raise ValueError(f"at most num_envs={self.num_envs} initial states at once, got {num}.")
        pad = self.num_envs - num
        rows_q = torch.cat([joint_q.detach(), joint_q[:1].detach().expand(pad, -1)])
        rows_qd = torch.cat([joint_qd.detach(), joint_qd[:1].detach().expand(pad, -1)])
        body_q, body_qd = self.simulation.body_coordinates(rows_q, rows_qd)
        body_q = body_q.view(self.num_envs, -1)[:num]
        body_qd = body_qd.view(self.num_envs, -1)[:num]
        return {"body_q": body_q, "body_qd": body_qd}

    def _dynamics(self, state: State, action: torch.Tensor) -> State:
        for _ in range(self.actuator_steps):  # the actuators' forces again at each
            state = self._simulate(state, action)
        return state

    def _simulate(self, state: State, action: torch.Tensor) -> State:
        """One simulation step (its substeps) under the actuators' forces at ``state``."""
        if self.simulation.maximal:
            body_q, body_qd, joint_q, joint_qd = NewtonBodyStep.apply(
                self.simulation, state["body_q"], state["body_qd"], self.joint_forces(state, action)
            )
            return {
                **state,
                "body_q": body_q,
                "body_qd": body_qd,
                "joint_q": joint_q,
                "joint_qd": joint_qd,
            }
        joint_q, joint_qd = NewtonStep.apply(
            self.simulation, state["joint_q"], state["joint_qd"], self.joint_forces(state, action)
        )
        return {**state, "joint_q": joint_q, "joint_qd": joint_qd}

    @property
    def provides_contact_signal(self) -> bool:
        """Whether every step's ``info`` holds ``contact_forces`` and ``accelerations``
        ``[N, bodies, 6]`` (detached): Featherstone with contacts."""
        return self.simulation.contact_signal is not None

    def _step_info_extras(self) -> dict[str, Any]:
        """The step's per-body contact wrenches and accelerations, when there are contacts."""
        if self.simulation.uses_contacts:
            self._contact_watch.after_step(self)
        return self.simulation.contact_info(self.num_envs)

    instability_hint = instability_hint  # said with a non-finite step (check-env, a skip)
    steps_are_stable = steps_are_stable  # every stiff term within its bound

    def simulation_problems(self) -> list[str]:
        """What the simulation got wrong so far (``pathgrad check-env`` fails its rollout on it)."""
        return contact_capacity_problems(self) if self.simulation.uses_contacts else []

    def compile_step(self, **compile_kwargs: Any) -> None:
        """Refused: the step runs in Warp, outside PyTorch (``supports_torch_compile``)."""
        raise ValueError(f"{type(self).__name__} cannot be compiled: its step runs in Warp.")
