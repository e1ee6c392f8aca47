"""What an MJCF file says beyond its bodies: ``<option>``, ``<compiler>``, and what Newton lacks.

:func:`read_mjcf_options` gives the physics a NewtonEnv applies from the file
(gravity, timestep, ``settotalmass``) and names, one line each, what
Featherstone cannot express and what pathgrad does instead (spatial tendons and
fixed tendons' limits, equality constraints, joint friction loss, fluid forces,
MuJoCo's integrator and solver settings, ``solref``/``solimp``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import numpy as np

from pathgrad.envs.newton.model_files.mjcf_actuators import MjcfMotor, read_mjcf_motors
from pathgrad.envs.newton.model_files.mjcf_file import parse_mjcf
from pathgrad.envs.newton.model_files.mjcf_flags import unapplied_flags
from pathgrad.envs.newton.model_files.mjcf_joints import MjcfBody, MjcfJoint, read_mjcf_joints
from pathgrad.envs.newton.model_files.mjcf_tendons import read_fixed_tendons

__all__ = ["MjcfMotor", "MjcfOptions", "read_mjcf_motors", "read_mjcf_options", "scale_total_mass"]


@dataclass
class MjcfOptions:
    """``gravity`` where the file sets it (else None) and ``timestep`` (MuJoCo's 0.002 s
    where a file sets none; None for no file)."""

    gravity: tuple[float, float, float] | None = None
    timestep: float | None = None
    total_mass: float | None = None  # the compiler's settotalmass
    refsafe: bool = True  # <flag refsafe>: a limit's time constant at least 2 timesteps
    # MuJoCo integrates joint damping implicitly: Euler (with <flag eulerdamp>), implicit,
    # implicitfast; RK4 explicitly. False for no file.
    implicit_damping: bool = False
    not_applied: list[str] = field(default_factory=list)


MUJOCO_TIMESTEP = 0.002  # MuJoCo's default <option timestep>


def _numbers(text: str | None) -> list[float]:
    return [float(value) for value in (text or "").split()]


def read_mjcf_options(path: str | Path) -> MjcfOptions:
    """The file's options and what of it Newton's Featherstone does not apply."""
    try:
        root = parse_mjcf(path)
    except ElementTree.ParseError:
        return MjcfOptions()
    # MuJoCo's defaults: Euler with eulerdamp, a 2 ms timestep (what a file without one means)
    found = MjcfOptions(implicit_damping=True, timestep=MUJOCO_TIMESTEP)
    for option in root.iter("option"):
        gravity = _numbers(option.get("gravity"))
        if len(gravity) == 3:
            found.gravity = (gravity[0], gravity[1], gravity[2])
        if option.get("timestep") is not None:
            found.timestep = float(option.get("timestep"))
        integrator = option.get("integrator", "Euler")
        found.implicit_damping = integrator in ("Euler", "implicit", "implicitfast")
        for flag in option.iter("flag"):
            found.refsafe = flag.get("refsafe", "enable") != "disable"
            if integrator == "Euler" and flag.get("eulerdamp") == "disable":
                found.implicit_damping = False
        fluid = [key for key in ("density", "viscosity") if float(option.get(key, 0)) > 0]
        if fluid:
            found.not_applied.append(
                f"fluid forces (<option {' and '.join(fluid)}>): none are applied, the bodies "
                "move as in vacuum"
            )
        if option.get("integrator", "Euler") != "Euler":
            found.not_applied.append(
                f'<option integrator="{option.get("integrator")}">: pathgrad steps '
                "semi-implicit Euler (choose substeps for accuracy)"
            )
        settings = ("solver", "iterations", "tolerance", "cone", "impratio")
        solver = [key for key in settings if key in option.attrib]
        if solver:
            found.not_applied.append(
                f"MuJoCo's solver settings ({', '.join(solver)}): Featherstone solves joints "
                "exactly and contacts with penalty forces"
            )
    compiler = root.find("compiler")
    if compiler is not None and float(compiler.get("settotalmass", "-1")) > 0:
        found.total_mass = float(compiler.get("settotalmass"))
    fixed, spatial = read_fixed_tendons(path)
    bounded = [t.name for t in fixed if t.limited or t.frictionloss]
    found.not_applied += unapplied_flags(root)
    if spatial:
        found.not_applied.append(f"{len(spatial)} spatial tendons: left out")
    unbuilt = [f"<{tag}>" for tag in ("composite", "flexcomp", "attach", "flex")
               if root.find(f".//{tag}") is not None]  # fmt: skip
    if unbuilt:
        found.not_applied.append(f"{', '.join(unbuilt)}: not built (Newton's importer reads no "
                                 "such element), what it makes is missing")  # fmt: skip
    mocap = {b.get("name") for b in root.iter("body") if b.get("mocap") == "true"}
    equalities = [_equality(element, mocap) for element in root.findall("equality/*")]
    if equalities:
        found.not_applied.append(
            f"equality constraints ({_listed(equalities)}): left out, nothing holds what they "
            "tie (a weld to a mocap body does not move its body)"
        )
    if bounded:
        names = ", ".join(bounded[:4]) + (", ..." if len(bounded) > 4 else "")
        found.not_applied.append(
            f"the limits and friction loss of fixed tendons ({names}): left out (their "
            "springs, dampers and actuators apply)"
        )
    joints = [(body, joint) for body in read_mjcf_joints(root) for joint in body.joints]
    rubbing = [(body, j) for body, j in joints if j.frictionloss > 0]
    applied = [_joint_name(b, j) for b, j in rubbing if j.type in ("hinge", "slide")]
    if applied:
        found.not_applied.append(
            f"joint friction loss ({_listed(applied)}): a damper that saturates at it "
            "(MuJoCo's constraint also holds a joint still against a load below it; this "
            "one lets it creep)"
        )
    cones = [_joint_name(b, j) for b, j in joints if j.type == "ball" and j.limited]
    if cones:
        found.not_applied.append(f"the limits of ball joints ({_listed(cones)}): left out "
                                 "(Featherstone has no cone limit)")  # fmt: skip
    left = [_joint_name(b, j) for b, j in rubbing if j.type not in ("hinge", "slide")]
    if left:
        found.not_applied.append(f"the friction loss of ball and free joints ({_listed(left)}): "
                                 "left out")  # fmt: skip
    if any("solref" in e.attrib or "solimp" in e.attrib for e in root.iter()):
        found.not_applied.append(
            "solref/solimp of contacts: contacts use penalty stiffness and damping instead "
            "(the env's contact_ke and contact_kd; contact_softness='mujoco' reads geoms' "
            "solref on each body's effective mass)"
        )
    return found


def _equality(element: Any, mocap: set) -> str:
    """One equality constraint as ``weld 'name' (a to b)``, its ``mocap`` bodies said."""
    ends = [element.get(f"{what}{k}") for k in (1, 2) for what in ("body", "joint", "tendon",
                                                                   "site", "flex")]  # fmt: skip
    ends = [f"mocap body '{e}'" if e in mocap else f"'{e}'" for e in ends if e]
    name = f" '{element.get('name')}'" if element.get("name") else ""
    tied = " to ".join(ends) if len(ends) > 1 else (ends[0] + " to the world" if ends else "?")
    return f"{element.tag}{name} ({tied})"


def _joint_name(body: MjcfBody, joint: MjcfJoint) -> str:
    return joint.name or f"the unnamed joint of body '{body.name or '?'}'"


def _listed(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f", ... ({len(names)} in all)" if len(names) > 4 else "")


def keep_file_inertias(builder: Any) -> None:
    """Let ``builder`` (before ``finalize``) keep a file's small inertias as MuJoCo does.

    Newton's validation raises a principal moment under ``1e-10`` kg m^2 by that floor
    plus ``1e-6``: dm_control's manipulator puts 1e-12 on a 1e-6 kg marker fixed to its
    hand, and the hand then turned with 1e-6 more, a quarter of its own (its fingers'
    accelerations 4% off MuJoCo's). MuJoCo keeps what the file says; so does this, but
    for moments under a millionth of a body's largest (Newton's relative floor) or under
    MuJoCo's 1e-15, raised to that floor and no more.
    """
    builder.inertia_absolute_tolerance = 1e-15  # MuJoCo's mjMINVAL
    builder.inertia_correction = 0.0


def scale_total_mass(builder: Any, first_body: int, total: float) -> None:
    """Scale the masses and inertias of the bodies from ``first_body`` so they sum to
    ``total`` (MuJoCo's ``<compiler settotalmass>``)."""
    masses = np.asarray(builder.body_mass[first_body:], dtype=np.float64)
    if masses.sum() <= 0.0:
        return
    factor = float(np.float32(total / masses.sum()))  # Warp's matrices take float32 scalars
    for body in range(first_body, builder.body_count):
        builder.body_mass[body] = float(builder.body_mass[body]) * factor
        builder.body_inertia[body] = builder.body_inertia[body] * factor
        if hasattr(builder, "body_inv_mass"):
            mass = float(builder.body_mass[body])
            builder.body_inv_mass[body] = 1.0 / mass if mass > 0.0 else 0.0
        if hasattr(builder, "body_inv_inertia"):
            builder.body_inv_inertia[body] = builder.body_inv_inertia[body] * float(
                np.float32(1.0 / factor)
            )
