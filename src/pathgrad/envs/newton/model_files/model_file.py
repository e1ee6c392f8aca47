"""Loading a robot file (MJCF or URDF) into a Newton world, as its author meant it.

An MJCF file keeps MuJoCo's meaning (:mod:`pathgrad.envs.newton.model_files.mujoco_meaning`):
its joints pivot where MuJoCo pivots them, ``joint_q`` holds MuJoCo's ``qpos``,
``settotalmass`` scales the masses, and what Featherstone cannot express is
named in one warning (:mod:`pathgrad.envs.newton.model_files.mjcf_options`). A file whose
``<option>`` Newton's importer rejects (``solver="PGS"``: MuJoCo's solver
settings, which Featherstone has no use for) loads without Newton reading its
options. A body whose joints one Newton joint cannot hold (hinges about different
anchors) is imported as a chain of joint frames (:mod:`.mjcf_joint_frames`).
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import newton
import numpy as np
import torch
from gymnasium.spaces import Box

from pathgrad.envs.newton.engine.bridge import NewtonSimulation
from pathgrad.envs.newton.engine.model_checks import check_model_file
from pathgrad.envs.newton.engine.stability import mass_matrix_at_rest, stable_substeps
from pathgrad.envs.newton.model_files.mjcf_actuators import FileActuation
from pathgrad.envs.newton.model_files.mjcf_contacts import apply_contact_softness
from pathgrad.envs.newton.model_files.mjcf_file import (
    parse_mjcf,
    path_resolver_beside,
    resolve_asset_files,
)
from pathgrad.envs.newton.model_files.mjcf_free_damping import (
    FreeJointDamping,
    unstable_free_damping,
)
from pathgrad.envs.newton.model_files.mjcf_friction import FrictionLoss, friction_damping
from pathgrad.envs.newton.model_files.mjcf_joint_frames import split_joint_frames
from pathgrad.envs.newton.model_files.mjcf_joints import read_mjcf_joints
from pathgrad.envs.newton.model_files.mjcf_limits import (
    LimitReference,
    effective_masses,
    limit_constants,
)
from pathgrad.envs.newton.model_files.mjcf_options import (
    MjcfMotor,
    MjcfOptions,
    read_mjcf_motors,
    read_mjcf_options,
    scale_total_mass,
)
from pathgrad.envs.newton.model_files.mjcf_tendons import TendonForces, read_fixed_tendons
from pathgrad.envs.newton.model_files.mujoco_meaning import MujocoCoordinates, apply_mujoco_meaning
from pathgrad.envs.newton.model_files.urdf_assets import urdf_with_resolved_meshes

__all__ = ["RobotFileMixin", "load_model_file"]

_MJCF, _URDF = (".xml", ".mjcf"), (".urdf",)
_MODES = ("mujoco", "newton")  # the values of joint_limits and contact_softness


def load_model_file(
    builder: Any, path: str | Path, options: dict[str, Any], *, mujoco_meaning: bool = True
) -> tuple[MujocoCoordinates | None, list[str]]:
    """Add the file's bodies and joints to ``builder``.

    Returns the MuJoCo coordinate map of an MJCF file loaded with
    ``mujoco_meaning`` (else None) and notes on what keeps Newton's meaning.

    Raises:
        FileNotFoundError: If the file does not exist.
        ValueError: For another extension, a mistake in the file, or an import error.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model_file '{path}' does not exist.")
    suffix = path.suffix.lower()
    if suffix not in _MJCF + _URDF:
        raise ValueError(f"model_file '{path}' must be an MJCF (.xml) or URDF (.urdf) file.")
    check_model_file(path)
    options = dict(options)
    if suffix in _MJCF and _solver_named(path):
        options.setdefault("parse_mujoco_options", False)
    first_body, first_joint = builder.body_count, builder.joint_count
    loader = builder.add_mjcf if suffix in _MJCF else builder.add_urdf
    source, joints_of = str(path), path
    if suffix in _URDF:  # package:// meshes where ROS or PyBullet find them
        source = urdf_with_resolved_meshes(path) or source
    if suffix in _MJCF and mujoco_meaning:
        root = _parsed(path)
        if root is not None:  # Newton builds the tree pathgrad reads: includes expanded,
            split_joint_frames(root)  # one top default, assets where MuJoCo finds them,
            resolve_asset_files(root, path)  # joints one Newton joint cannot hold split
            source, joints_of = ElementTree.tostring(root, encoding="unicode"), root
            options.setdefault("path_resolver", path_resolver_beside(path))
            # Newton turns a weld or connect into a second joint to a body that has one:
            # Featherstone's tree would pose the body by it (the file's equality
            # constraints are named and left out instead; mjcf_options)
            options.setdefault("convert_mjc_equality_constraints", False)
    try:
        loader(source, **options)
    except Exception as error:  # noqa: BLE001 - a parser error of any kind is bad input
        raise ValueError(f"cannot load model_file '{path}': {error}") from error
    if suffix not in _MJCF or not mujoco_meaning:
        return None, []
    # Newton's importer turns <position kp>/<velocity kv> into PD drives toward a target of
    # 0 that no action moves; pathgrad applies the file's actuators itself, as MuJoCo does.
    first_dof = builder.joint_qd_start[first_joint] if first_joint < builder.joint_count else 0
    for gains in (builder.joint_target_ke, builder.joint_target_kd):
        gains[first_dof:] = [0.0] * (len(gains) - first_dof)
    file_options = read_mjcf_options(path)
    if file_options.total_mass is not None:
        scale_total_mass(builder, first_body, file_options.total_mass)
    coordinates, notes = apply_mujoco_meaning(
        builder, read_mjcf_joints(joints_of), first_body, first_joint
    )
    if file_options.not_applied:
        notes.append(
            f"model_file '{path.name}': what Newton's Featherstone does not apply: "
            + "; ".join(file_options.not_applied)
        )
    return coordinates, notes


def _parsed(path: Path) -> ElementTree.Element | None:
    try:
        return parse_mjcf(path)
    except ElementTree.ParseError:
        return None  # the importer says what is wrong


def _solver_named(path: Path) -> bool:
    """Whether an ``<option>`` names MuJoCo's solver (``PGS``, ``CG``, ``Newton``): Newton's
    importer reads it as a number and stops."""
    try:
        root = parse_mjcf(path)
    except ElementTree.ParseError:
        return False
    return any(not o.get("solver", "0").strip().isdigit() for o in root.iter("option"))


class RobotFileMixin:
    """What a NewtonEnv reads of its MJCF file beyond the bodies: MuJoCo's coordinates,
    the ``<option>`` it applies, the motors that define its actions."""

    model_file: str | None
    default_model_file: str | None
    mujoco_meaning: bool
    mujoco_coordinates: MujocoCoordinates | None
    coordinate_labels: list[str]
    simulation: Any
    simulation_options: dict[str, Any]
    dt: float

    def _resolve_model_file(self, given: str | Path | None) -> str | None:
        """The model file: a relative one is found beside the module that defines the env.

        A ``model_file`` given as an argument is taken relative to the working
        directory first; ``default_model_file`` relative to its class's module.

        Raises:
            FileNotFoundError: Naming every place looked at, if none holds it.
        """
        if given is None and self.default_model_file is None:
            return None
        owner = type(self)
        if given is None:
            owner = next(k for k in type(self).__mro__ if "default_model_file" in vars(k))
        path = Path(given if given is not None else self.default_model_file).expanduser()
        if path.is_absolute():
            candidates = [path]
        else:
            beside = Path(inspect.getfile(owner)).resolve().parent / path
            candidates = [Path.cwd() / path, beside] if given is not None else [beside]
        for candidate in candidates:
            if candidate.is_file():
                return str(candidate)
        places = " nor ".join(f"'{candidate}'" for candidate in candidates)
        raise FileNotFoundError(f"model_file: neither {places} exists." if len(candidates) > 1
                                else f"model_file '{candidates[0]}' does not exist.")  # fmt: skip

    @property
    def coordinate_names(self) -> list[str]:
        """The file's joint of each ``joint_q`` coordinate (MJCF, MuJoCo's meaning), else
        Newton's joint label (with the coordinate's place in a joint of several)."""
        mapping = self.mujoco_coordinates
        return list(mapping.names) if mapping is not None else list(self.coordinate_labels)

    def joint_state_from_mujoco(
        self, qpos: torch.Tensor, qvel: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(joint_q, joint_qd)`` of MuJoCo's ``qpos [N, nq]``, ``qvel [N, nv]`` (batched,
        differentiable; see :mod:`pathgrad.envs.newton.model_files.mujoco_meaning`)."""
        return self._mujoco_map().joint_state_from_mujoco(qpos, qvel)

    def mujoco_from_joint_state(
        self, joint_q: torch.Tensor, joint_qd: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """MuJoCo's ``(qpos, qvel)`` of ``joint_q``, ``joint_qd`` (the inverse of
        :meth:`joint_state_from_mujoco`)."""
        return self._mujoco_map().mujoco_from_joint_state(joint_q, joint_qd)

    def _mujoco_map(self) -> MujocoCoordinates:
        if self.mujoco_coordinates is None:
            raise ValueError(
                f"{type(self).__name__} has no MuJoCo coordinates: it was not loaded from an "
                "MJCF file with mujoco_meaning."
            )
        return self.mujoco_coordinates

    def _file_joint_dofs(self, joints: Any) -> list[int] | None:
        """The DOFs of the file's hinges and slides named in ``joints`` (MuJoCo's names,
        also where Newton merged them into one joint); None unless all are such."""
        mapping = self.mujoco_coordinates
        if mapping is None or not joints or isinstance(joints, str):
            return None
        if len(set(joints)) != len(joints):  # actuated_dofs names the repeated joint
            return None
        if not all(name in mapping.dof_names for name in joints):
            return None
        return [mapping.dof_names.index(name) for name in joints]

    def _motor_dofs(self, motors: list[MjcfMotor]) -> list[int]:
        """The DOF of each actuator's joint (one action each).

        Raises:
            ValueError: For an actuator of a joint that is not a hinge or slide.
        """
        names = self._mujoco_map().dof_names
        for motor in motors:
            if motor.joint not in names:
                raise ValueError(
                    f"model_file '{Path(str(self.model_file)).name}': the actuator of joint "
                    f"'{motor.joint}' drives no hinge or slide; pathgrad applies actuators of "
                    "hinges, slides and fixed tendons (give actuated_joints and action_scale)."
                )
        return [names.index(motor.joint) for motor in motors]

    def _file_motors(self, joints: Any, scale: Any) -> list[MjcfMotor]:
        """The MJCF file's actuators of joints and fixed tendons, where they define the
        actions (neither ``actuated_joints`` nor ``action_scale`` given); other actuators
        are warned about."""
        path = self.model_file
        if joints is not None or scale is not None or not self._file_options_apply():
            return []
        motors, skipped = read_mjcf_motors(path)
        if skipped:
            what = (
                "the actions drive the file's joint motors"
                if motors
                else "no actuator of the file drives a joint, so the actions drive every "
                "joint (scale 1; choose with actuated_joints and action_scale)"
            )
            warnings.warn(
                f"{type(self).__name__}: {what}; its other actuators are not applied: "
                f"{', '.join(skipped)}.",
                UserWarning,
                stacklevel=3,
            )
        return motors

    def _actuator_steps(self, motors: list[MjcfMotor], dt: float, timestep: float | None) -> int:
        """Simulation steps per env step: one per file timestep in ``dt`` where an actuator's
        force or the env's extra force depends on the state (MuJoCo computes it every
        timestep), else 1."""
        state_dependent = self.extra_forces_each_file_timestep or (  # type: ignore[attr-defined]
            self.tendon_forces is not None  # type: ignore[attr-defined]
            or self.free_damping is not None  # type: ignore[attr-defined]
            or bool(self._rubbing_joints())
        )
        if not timestep or not (state_dependent or any(m.state_dependent for m in motors)):
            return 1
        return max(1, round(dt / timestep))

    def _file_actuation(self, motors: list[MjcfMotor], device: Any) -> FileActuation | None:
        """The file's actuators as MuJoCo computes their force, where any depends on the
        state, is more than gain x ctrl (a position or velocity actuator, a bias, a force
        range) or acts through a tendon; else None (the actions are scaled by gear x gain)."""
        if not any(motor.affine or motor.tendon for motor in motors):
            return None
        places = {joint.name: joint for joint in self._mujoco_map().joints}
        return FileActuation(motors, places, self.coordinates, self.dofs, device)  # type: ignore[attr-defined]

    def _tendon_forces(self, rest_q: Any, device: Any) -> TendonForces | None:
        """The file's fixed tendons' springs and dampers (None where it has none)."""
        if not self._file_options_apply():
            return None
        tendons = [t for t in read_fixed_tendons(self.model_file)[0] if t.passive]
        if not tendons:
            return None
        places = {joint.name: joint for joint in self._mujoco_map().joints}
        return TendonForces(tendons, places, self.coordinates, self.dofs, rest_q, device)  # type: ignore[attr-defined]

    def _free_damping(self, device: Any) -> FreeJointDamping | None:
        """The file's free joints' damping (:mod:`.mjcf_free_damping`; None where none is)."""
        if not self._file_options_apply() or self.mujoco_coordinates is None:  # type: ignore[attr-defined]
            return None
        damped = [(j.q, j.qd, j.source.damping, j.com)
                  for j in self.mujoco_coordinates.joints  # type: ignore[attr-defined]
                  if j.type == "free" and j.source.damping > 0.0]  # fmt: skip
        return FreeJointDamping(int(self.dofs), damped, device) if damped else None  # type: ignore[attr-defined]

    def _rubbing_joints(self) -> list[Any]:
        """The file's hinges and slides with friction loss (MuJoCo's meaning only)."""
        if not self._file_options_apply() or self.mujoco_coordinates is None:  # type: ignore[attr-defined]
            return []
        return [j for j in self.mujoco_coordinates.joints  # type: ignore[attr-defined]
                if j.source.frictionloss > 0.0 and j.type in ("hinge", "slide")]  # fmt: skip

    def _apply_friction_loss(self) -> None:
        """The file's joints' friction loss as a damper saturating at it (:mod:`.mjcf_friction`:
        its damping from ``solreffriction`` on the joint's effective mass at the file's pose)."""
        joints = self._rubbing_joints()
        matrix = mass_matrix_at_rest(self) if joints else None
        if matrix is None:
            if joints:
                warnings.warn(
                    f"{type(self).__name__}: the joints' effective masses could not be computed "
                    "at the file's pose, so their friction loss is left out.",
                    UserWarning,
                    stacklevel=4,
                )
            return
        masses, options = effective_masses(matrix), self._file_options()
        damping = [friction_damping(j.source.solreffriction, j.source.solimpfriction,
                                    masses[j.qd], options.timestep, options.refsafe, j.name)
                   for j in joints]  # fmt: skip
        self.friction_loss = FrictionLoss(  # type: ignore[attr-defined]
            int(self.dofs), [j.qd for j in joints],  # type: ignore[attr-defined]
            [j.source.frictionloss for j in joints], damping, self.device,  # type: ignore[attr-defined]
        )  # fmt: skip

    def _file_options_apply(self) -> bool:
        path = self.model_file
        return path is not None and self.mujoco_meaning and Path(path).suffix.lower() != ".urdf"

    def _file_options(self) -> MjcfOptions:
        """The MJCF file's options this env applies (none for URDF, Newton's meaning)."""
        return read_mjcf_options(self.model_file) if self._file_options_apply() else MjcfOptions()

    def _apply_control_range(self) -> None:
        """A Gymnasium action space of the motors' ``ctrlrange`` (where the file gives one)."""
        if self.control_range is None:  # type: ignore[attr-defined]
            return
        low, high = (bound.cpu().numpy() for bound in self.control_range)  # type: ignore[attr-defined]
        low, high = np.where(np.isfinite(low), low, -1.0), np.where(np.isfinite(high), high, 1.0)
        self.single_action_space = Box(low, high, (self.action_dim,), np.float32)  # type: ignore[attr-defined]

    def _apply_file_physics(
        self, joint_limits: str | None, implicit_damping: bool | None,
        contact_softness: str | None = None, keep_contacts: tuple[str, ...] = (),
    ) -> None:  # fmt: skip
        """How the file's limits, contacts and joint damping act (``NewtonEnv``'s options of
        the names; ``keep_contacts``: the contact constants the user gave)."""
        self._apply_joint_limits(joint_limits)
        self._apply_friction_loss()
        self._apply_contact_softness(contact_softness, keep_contacts)
        chosen = type(self).implicit_damping if implicit_damping is None else implicit_damping  # type: ignore[attr-defined]
        featherstone = not self.simulation.maximal  # the armature is Featherstone's
        if chosen is None:  # as MuJoCo integrates the file's damping
            chosen = self._file_options().implicit_damping
        elif chosen and implicit_damping is not None and not (
            self._file_options_apply() and featherstone
        ):
            raise ValueError(
                "implicit_damping=True needs an MJCF model_file read with MuJoCo's meaning and "
                f"the featherstone solver (model_file: {self.model_file!r})."
            )
        self.implicit_damping = bool(chosen) and self._file_options_apply() and featherstone
        model = self.simulation.model
        self._file_armature = model.joint_armature.numpy().copy()
        self._damp_implicitly()
        held = self.free_damping  # type: ignore[attr-defined]
        note = None if held is None or self.implicit_damping else unstable_free_damping(
            model, held, float(self.simulation_options["dt"]))  # fmt: skip
        if note:
            warnings.warn(f"{type(self).__name__}: {note}.", UserWarning, stacklevel=3)

    def _damp_implicitly(self) -> None:
        """With ``implicit_damping``, armature ``+ substep x damping`` on each damped DOF:
        Featherstone's explicit damping force then advances the velocity as an implicit
        damper would, ``(M + h D) v' = M v + h f`` (MuJoCo's Euler, ``eulerdamp``), stable at
        any substep."""
        if not self.implicit_damping:  # type: ignore[attr-defined]
            return
        model = self.simulation.model
        damping = model.joint_damping.numpy().astype(np.float64)
        free = np.zeros(damping.shape, dtype=bool)  # Featherstone does not damp free joints
        starts, types = model.joint_qd_start.numpy(), model.joint_type.numpy()
        for joint, kind in enumerate(types):
            if int(kind) == int(newton.JointType.FREE):
                free[int(starts[joint]) : int(starts[joint + 1])] = True
        added = np.where(free, 0.0, float(self.simulation.substep_dt) * damping)
        held = self.free_damping  # type: ignore[attr-defined]
        if held is not None:  # a free joint's damping force is held over an actuator step
            per_world = added.reshape(int(self.num_envs), int(self.dofs))  # type: ignore[attr-defined]
            for column, value in zip(held.columns, held.damping, strict=True):
                per_world[:, column : column + 6] = float(self.simulation_options["dt"]) * value
        model.joint_armature.assign((self._file_armature + added).astype(np.float32))  # type: ignore[attr-defined]

    def _file_mode(self, option: str, mode: str | None) -> str:
        """The ``"mujoco"`` or ``"newton"`` meaning of ``option`` (``joint_limits``,
        ``contact_softness``): ``mode``, or the class's where ``None``; a class's
        ``"mujoco"`` is ``"newton"`` where the file is not read with MuJoCo's meaning (a
        world built in code, a URDF).

        Raises:
            ValueError: For another value, or ``"mujoco"`` given without such a file.
        """
        chosen = getattr(type(self), option) if mode is None else mode
        if chosen not in _MODES:
            raise ValueError(f"{option} must be 'mujoco' or 'newton', got {chosen!r}.")
        if chosen == "mujoco" and not self._file_options_apply():
            if mode is not None:
                raise ValueError(
                    f"{option}='mujoco' needs an MJCF model_file read with MuJoCo's meaning "
                    f"(model_file: {self.model_file!r}); give 'newton' to keep the model's "
                    "constants."
                )
            chosen = "newton"
        return chosen

    def _apply_joint_limits(self, mode: str | None) -> None:
        """``joint_limits``: ``"mujoco"`` gives each limited hinge and slide of an MJCF file
        MuJoCo's softness (its ``solreflimit`` on its effective mass, :mod:`.mjcf_limits`);
        ``"newton"`` keeps the model's ``limit_ke``/``limit_kd``. ``None``: the class's."""
        chosen = self._file_mode("joint_limits", mode)
        self.joint_limits = chosen
        if chosen == "newton":
            return
        model, dofs = self.simulation.model, int(self.dofs)  # type: ignore[attr-defined]
        lower = model.joint_limit_lower.numpy()[:dofs]
        upper = model.joint_limit_upper.numpy()[:dofs]
        references: list[LimitReference | None] = [None] * dofs
        for joint in self._mujoco_map().joints:
            limited = abs(float(lower[joint.qd])) < 1e6 or abs(float(upper[joint.qd])) < 1e6
            if joint.type in ("hinge", "slide") and limited:
                references[joint.qd] = LimitReference.parse(joint.source.solreflimit, joint.name)
        matrix = mass_matrix_at_rest(self) if any(references) else None
        if matrix is None:
            if any(references):
                warnings.warn(
                    f"{type(self).__name__}: joint_limits='mujoco': the joints' effective "
                    "masses could not be computed at the file's pose, so the limits keep the "
                    "model's limit_ke and limit_kd.",
                    UserWarning,
                    stacklevel=4,
                )
            return
        options = self._file_options()
        stiffness, damping, _ = limit_constants(references, matrix, options.timestep,
                                                options.refsafe)  # fmt: skip
        chosen_dofs = ~np.isnan(stiffness)
        worlds = int(self.num_envs)  # type: ignore[attr-defined]
        for name, values in (("joint_limit_ke", stiffness), ("joint_limit_kd", damping)):
            array = getattr(model, name)
            per_world = array.numpy().reshape(worlds, dofs).copy()
            per_world[:, chosen_dofs] = values[chosen_dofs]
            array.assign(per_world.reshape(-1).astype(np.float32))

    def _apply_contact_softness(self, mode: str | None, keep: tuple[str, ...]) -> None:
        """``contact_softness``: ``"mujoco"`` gives an MJCF file's contacts its geoms'
        ``solref`` on each body's effective mass (:mod:`.mjcf_contacts`); ``"newton"`` keeps
        the model's ``ke``/``kd``. ``None``: the class's. Nothing to do without contacts."""
        chosen = self._file_mode("contact_softness", mode)
        if len(keep) == 2:  # contact_ke and contact_kd given: the user's constants
            chosen = "newton"
        if chosen == "mujoco" and self.simulation.uses_contacts:
            options = self._file_options()
            if not apply_contact_softness(self, options.timestep, options.refsafe, keep):
                chosen = "newton"
        self.contact_softness = chosen

    def _choose_substeps(self, solver: str) -> None:
        """``substeps="auto"``: rebuild the simulation with the substeps its stiff terms need."""
        step = float(self.simulation_options["dt"])  # an actuator step's, or the env step's
        count, why = stable_substeps(self, step)
        # Implicit damping's armature shrinks with the substep, and with it the bounds: again
        # until they hold (the count only grows, bounded by the file's own armature's count).
        while count > int(self.simulation_options["substeps"]):
            self.simulation_options["substeps"] = count
            self.simulation = NewtonSimulation(
                self.simulation.model, solver=solver, **self.simulation_options
            )
            self._damp_implicitly()
            count, why = max(stable_substeps(self, step), (count, why), key=lambda c: c[0])
        per = f"env step of {self.dt:.3g} s"
        if self.actuator_steps > 1:  # type: ignore[attr-defined]
            per = f"actuator step of {step:.3g} s ({self.actuator_steps} per {per})"  # type: ignore[attr-defined]
        warnings.warn(
            f"{type(self).__name__}: substeps auto: {count} of {step / count:.3g} s per {per}, "
            f"half the stability bound of its stiffest term ({why}).",
            UserWarning,
            stacklevel=3,
        )
