"""Mistakes in a user's robot model that Newton's importers accept without a word.

Newton's MJCF importer reads an unknown joint ``type`` (``"hing"``) as a
prismatic joint, and a body without mass builds a model whose mass matrix is
singular: the first step gives NaN far from the cause. These checks name the
joint or body and what was expected, at construction.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import numpy as np

from pathgrad.envs.newton.model_files.mjcf_file import asset_files, parse_mjcf
from pathgrad.envs.newton.model_files.urdf_assets import missing_collision_meshes

__all__ = ["MJCF_GEOM_TYPES", "MJCF_JOINT_TYPES", "URDF_JOINT_TYPES", "check_model_file",
           "check_finite_model", "check_masses", "fixed_urdf_root", "flat_inertias", "limit_units",
           "unbalanced_inertias", "unread_motors"]  # fmt: skip

MJCF_JOINT_TYPES = ("hinge", "slide", "ball", "free")
MJCF_GEOM_TYPES = ("plane", "hfield", "sphere", "capsule", "ellipsoid", "cylinder", "box",
                   "mesh", "sdf")  # fmt: skip
URDF_JOINT_TYPES = ("revolute", "continuous", "prismatic", "fixed", "floating", "planar")


def check_model_file(path: str | Path) -> None:
    """Check the joint (and MJCF geom) types of an MJCF or URDF file by name.

    A file that is not well-formed XML passes: the importer's own error names it.

    Raises:
        ValueError: ``model_file '<path>': joint 'hip' has type 'hing'; ...``, or for a
            URDF with xacro substitutions left in it.
    """
    path = Path(path)
    try:
        root = parse_mjcf(path)
    except (ElementTree.ParseError, OSError):
        return
    urdf = path.suffix.lower() == ".urdf"
    template = next(((e, k, v) for e in root.iter() for k, v in e.attrib.items()
                     if "$(" in v or "${" in v), None) if urdf else None  # fmt: skip
    if template is not None:
        element, key, value = template
        raise ValueError(
            f"model_file '{path}': <{element.tag} {key}=\"{value}\"> is a xacro substitution: "
            "expand the file with xacro first (xacro robot.urdf.xacro > robot.urdf)."
        )
    rules = [("joint", URDF_JOINT_TYPES)] if urdf else [
        ("joint", MJCF_JOINT_TYPES), ("geom", MJCF_GEOM_TYPES)
    ]  # fmt: skip
    for tag, allowed in rules:
        for element, where in _elements(root, tag):
            kind = element.get("type")
            if kind is None or kind.strip() in allowed:
                continue
            raise ValueError(
                f"model_file '{path}': {where} has type {kind!r}; {'URDF' if urdf else 'MJCF'} "
                f"{tag} types are {', '.join(allowed)}."
            )
    _check_mesh_files(path, root, urdf=urdf)


def _check_mesh_files(path: Path, root: ElementTree.Element, *, urdf: bool) -> None:
    """Every collision mesh file a model names by a plain path exists (Newton would skip
    the shape with a warning, leaving its body without collision geometry).

    URDF ``<collision>``'s ``<mesh filename>`` is relative to the file; MJCF ``<mesh file>``
    where MuJoCo reads it (:func:`~pathgrad.envs.newton.model_files.mjcf_file.asset_files`).
    ``package://`` and other URIs are left to the importer.
    """
    if urdf:
        folder = path.parent  # collision meshes: a missing visual one only draws nothing
        names = [m.get("filename") for c in root.iter("collision") for m in c.iter("mesh")]
        files = [(name, folder / name) for name in names if name and "://" not in name]
        unfound = missing_collision_meshes(root, path)
        if unfound and importlib.util.find_spec("resolve_robotics_uri_py") is None:
            package = unfound[0][len("package://"):].partition("/")[0]
            raise ValueError(
                f"model_file '{path}': collision mesh '{unfound[0]}' is not found (no folder "
                f"'{package}' above the file or beside it holds it; {len(unfound)} in all); "
                "without it its body has no collision geometry. Write the path relative to "
                "the URDF, or pip install resolve-robotics-uri-py and set ROS_PACKAGE_PATH."
            )
    else:
        files = [(element.get("file"), location) for element, location in asset_files(root, path)
                 if element.tag == "mesh"]  # fmt: skip
    for name, location in files:
        if not location.is_file():
            raise ValueError(
                f"model_file '{path}': mesh file '{name}' does not exist (looked for "
                f"'{location}'); without it the shape is left out and its body has no "
                "collision geometry."
            )


def _elements(root: ElementTree.Element, tag: str) -> list[tuple[ElementTree.Element, str]]:
    """Every ``tag`` element with words that find it: its name, or its body or default class."""
    found = []

    def visit(element: ElementTree.Element, owner: str) -> None:
        for child in element:
            if child.tag == tag:
                name = child.get("name")
                found.append((child, f"{tag} '{name}'" if name else f"a {tag} {owner}"))
            if child.tag == "body":
                visit(child, f"of body '{child.get('name', '?')}'")
            elif child.tag == "default":
                visit(child, f"of <default class='{child.get('class', 'main')}'>")
            else:
                visit(child, owner)

    visit(root, "of the model")
    return found


def check_masses(world: Any, body_labels: Sequence[str], joint_labels: Sequence[str]) -> None:
    """Every moving body must carry mass, itself or through the bodies it carries.

    A joint whose child and everything below it weigh nothing (and whose DOFs
    have no armature) leaves the mass matrix singular.

    Raises:
        ValueError: Naming the body (negative or zero mass) and its joint.
    """
    masses = [float(mass) for mass in world.body_mass]
    for body, mass in enumerate(masses):
        if mass < 0.0 or mass != mass:
            raise ValueError(f"body '{_short(body_labels[body])}' has mass {mass}; masses must be "
                             "positive.")  # fmt: skip
    children: dict[int, list[int]] = {}
    for parent, child in zip(world.joint_parent, world.joint_child, strict=True):
        children.setdefault(int(parent), []).append(int(child))

    def carried(body: int) -> float:
        return masses[body] + sum(carried(child) for child in children.get(body, []))

    starts, dims, armature = (
        list(world.joint_qd_start),
        list(world.joint_dof_dim),
        world.joint_armature,
    )
    for joint, child in enumerate(world.joint_child):
        count = sum(dims[joint])
        dofs = range(int(starts[joint]), int(starts[joint]) + count)
        if count == 0 or any(float(armature[dof]) > 0.0 for dof in dofs):
            continue
        if carried(int(child)) <= 0.0:
            raise ValueError(
                f"body '{_short(body_labels[int(child)])}' (moved by joint "
                f"'{_short(joint_labels[joint])}') has no mass, nor does any body it carries: "
                "its mass matrix is singular. Give its geoms a density or mass, or the body an "
                "<inertial> element (or its joint armature)."
            )


def check_something_moves(world: Any, path: str | Path | None) -> None:
    """A model must have a DOF: with none there is nothing to simulate or observe.

    Raises:
        ValueError: Saying why a model may have none (a URDF's root fixed by Newton).
    """
    if int(world.joint_dof_count) > 0:
        return
    source = f"model_file '{path}'" if path is not None else "the model"
    if path is not None and Path(path).suffix.lower() == ".urdf":
        why = (" Newton fixes a URDF's root link to the world: for a free base (a drone, a "
               "legged robot), return {'floating': True} from model_file_options().")
    else:
        why = " Give a body a <joint> or a <freejoint/> (or a joint in build_world)."
    raise ValueError(f"{source} has no joint that moves (0 DOFs): nothing can act.{why}")


def check_finite_model(world: Any) -> None:
    """Every pose, axis, mass and inertia of the model must be finite (a file's ``nan``).

    Raises:
        ValueError: Naming the first body, joint or shape with a non-finite value.
    """
    bodies, joints = world.body_label, world.joint_label
    checks = [
        ("joint", joints, world.joint_X_p, "frame in its parent body (the body's pos/quat)"),
        ("joint", joints, world.joint_X_c, "frame in its child body"),
        ("joint", joints, world.joint_axis, "axis"),
        ("body", bodies, world.body_com, "centre of mass"),
        ("body", bodies, world.body_inertia, "inertia"),
        ("body", bodies, [[m] for m in world.body_mass], "mass"),
        ("shape", world.shape_label, world.shape_transform, "pose (the geom's pos/quat)"),
    ]
    for kind, labels, values, what in checks:
        for index, value in enumerate(values):
            numbers = np.asarray(value, dtype=np.float64).reshape(-1)
            if not np.isfinite(numbers).all():
                name = _short(labels[index]) if index < len(labels) else str(index)
                owner = {"shape": world.shape_body, "joint": world.joint_child}.get(kind)
                body = -1 if owner is None else int(owner[index])
                where = f" (of body '{_short(bodies[body])}')" if 0 <= body < len(bodies) else ""
                raise ValueError(
                    f"{kind} '{name}'{where} has a non-finite {what}: "
                    f"{np.round(numbers, 6).tolist()}; the model must give finite numbers."
                )


def _short(label: str) -> str:
    return label.rsplit("/", 1)[-1]


def unread_motors(path: str | Path | None, action_scale: Any) -> str | None:
    """A warning when an MJCF file's ``<motor>`` gears are not what the env applies.

    NewtonEnv does not read MJCF actuators: an action is a generalized force
    ``action x action_scale``. A file whose motors have gears other than 1,
    loaded with every scale at 1, most likely meant the gears.
    """
    root = _mjcf_root(path)
    if root is None:
        return None
    motors = []
    for motor in root.iter("motor"):
        joint = motor.get("joint")
        try:
            gear = float((motor.get("gear") or "1").split()[0])
        except ValueError:
            continue
        if joint is not None:
            motors.append((joint, gear))
    scales = [float(value) for value in action_scale]
    if not motors or all(gear == 1.0 for _, gear in motors) or any(v != 1.0 for v in scales):
        return None
    joints = [joint for joint, _ in motors]
    gears = ", ".join(f"{gear:g}" for _, gear in motors)
    return (
        f"model_file '{path}' has <motor> actuators ({', '.join(joints)}: gear {gears}) that "
        "NewtonEnv does not read: an action is a generalized force action x action_scale, "
        f"here 1 on every actuated DOF. To use the gears, pass actuated_joints={joints} "
        f"and action_scale=[{gears}]."
    )


def fixed_urdf_root(
    path: str | Path | None, options: dict[str, Any], *, contacts: bool
) -> str | None:
    """A warning when a URDF robot meant to move on the ground is fixed to the world.

    Newton's URDF importer joins the root link to the world with a fixed joint
    unless ``floating=True`` (or a ``base_joint``) is passed; with ground
    contacts on, a legged robot would then hang where it was built.
    """
    if path is None or Path(path).suffix.lower() != ".urdf" or not contacts:
        return None
    if options.get("floating") is not None or options.get("base_joint") is not None:
        return None
    return (
        f"model_file '{path}' is a URDF, whose root link Newton fixes to the world unless "
        "told otherwise, and the env has ground contacts: a legged or wheeled robot would hang "
        "where it was built. For a free base, return {'floating': True} from "
        "model_file_options(); for a fixed one, {'floating': False} (and this warning goes)."
    )


def unbalanced_inertias(world: Any, body_labels: Sequence[str]) -> str | None:
    """A warning naming the first body with mass whose principal moments break the triangle
    inequality ``a + b >= c`` (no rigid body has them: a CAD export's rounding, as in
    PyBullet's mini_cheetah.urdf), which MuJoCo rejects and Newton's validation changes
    silently (it raises the smaller moments)."""
    for body, (mass, inertia) in enumerate(zip(world.body_mass, world.body_inertia, strict=True)):
        moments = np.sort(np.linalg.eigvalsh(np.asarray(inertia, dtype=np.float64).reshape(3, 3)))
        if float(mass) > 0.0 and moments[0] + moments[1] < moments[2] * (1.0 - 1e-6):
            shown = ", ".join(f"{moment:.4g}" for moment in moments)
            return (
                f"body '{_short(body_labels[body])}' has principal moments of inertia {shown}, "
                "whose two smaller ones sum to less than the largest: no rigid body has them "
                "(MuJoCo rejects the file), and Newton raises the smaller ones. Correct its "
                "inertia in the file."
            )
    return None


def flat_inertias(world: Any, body_labels: Sequence[str]) -> str | None:
    """A warning naming the first body with mass whose inertia has a principal moment of
    about 0 for its mass (a radius of gyration under 10 um: a light marker's tiny moments,
    Gymnasium's pusher goal's 1e-12 on 4e-10 kg, are in proportion).

    Newton's importers turn a negative moment (``diaginertia="-0.01 ..."``) into 0
    and its model into 1e-6 with a warning that names no body; a real body's
    moments are all positive, and a zero one makes its rotation nearly weightless.
    """
    for body, (mass, inertia) in enumerate(zip(world.body_mass, world.body_inertia, strict=True)):
        if float(mass) <= 0.0:
            continue
        moments = np.linalg.eigvalsh(np.asarray(inertia, dtype=np.float64).reshape(3, 3))
        if moments.min() <= 1e-10 * float(mass):  # a radius of gyration under 10 um
            shown = ", ".join(f"{moment:.3g}" for moment in moments)
            return (
                f"body '{_short(body_labels[body])}' has mass {float(mass):g} but principal "
                f"moments of inertia {shown}: a moment of 0 (or a negative one in the file, "
                "which the importer set to 0) leaves its rotation nearly weightless and its "
                "gradients wrong. Give it a positive inertia (MJCF <inertial diaginertia>, URDF "
                "<inertia>) or geoms with a density."
            )
    return None


def limit_units(world: Any, path: str | Path | None) -> str | None:
    """A warning when a hinge's limits look written in the other angle unit.

    Limits are radians in the model: beyond 2 pi (a URDF in degrees, or an MJCF
    file with ``<compiler angle="radian"/>`` and degrees) they limit nothing;
    an MJCF file without that compiler setting reads ``range`` in degrees, so a
    range of radians becomes a sliver (below 0.1 rad) that freezes the joint.
    """
    import newton

    degrees = _mjcf_in_degrees(path)
    for joint, kind in enumerate(world.joint_type):
        if int(kind) != int(newton.JointType.REVOLUTE):
            continue
        dof = int(world.joint_qd_start[joint])
        lower, upper = float(world.joint_limit_lower[dof]), float(world.joint_limit_upper[dof])
        if not (abs(lower) < 1e5 and abs(upper) < 1e5):
            continue  # unlimited
        name = _short(world.joint_label[joint])
        if max(abs(lower), abs(upper)) > 2 * math.pi + 0.01:  # a turn, as files round it: not
            return (
                f"joint '{name}' has limits {lower:g} to {upper:g} rad ({math.degrees(lower):.0f} "
                f"to {math.degrees(upper):.0f} degrees), beyond a turn: written in degrees? URDF "
                'limits are radians, and so is an MJCF range under <compiler angle="radian"/>.'
            )
        if degrees and 0.0 < upper - lower < 0.1:
            return (
                f"joint '{name}' has a range of {lower:.3g} to {upper:.3g} rad: this MJCF file "
                "reads range in degrees (MJCF's default), so a range written in radians "
                'becomes a sliver that freezes the joint. Add <compiler angle="radian"/> or '
                "write degrees."
            )
    return None


def _mjcf_in_degrees(path: str | Path | None) -> bool:
    """Whether an MJCF file reads its angles in degrees (no ``<compiler angle="radian"/>``)."""
    root = _mjcf_root(path)
    if root is None:
        return False
    return all(compiler.get("angle", "degree") != "radian" for compiler in root.iter("compiler"))


def _mjcf_root(path: str | Path | None) -> ElementTree.Element | None:
    """The root element of an MJCF file; ``None`` for another file or one that does not parse
    (the importer names that)."""
    if path is None or Path(path).suffix.lower() not in (".xml", ".mjcf"):
        return None
    try:
        return parse_mjcf(path)
    except (ElementTree.ParseError, OSError, ValueError):
        return None
