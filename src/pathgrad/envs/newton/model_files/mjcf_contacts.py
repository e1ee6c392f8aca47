"""MuJoCo's contact softness as penalty springs: each body's contacts as soft as its file says.

MuJoCo's contact is a soft constraint like its joint limit (:mod:`.mjcf_limits`): the
reference acceleration ``-b v - k r`` of a penetration ``r`` comes from the geoms'
``solref`` (default ``0.02 1``: time constant, damping ratio), and the force is that
acceleration times the effective mass the contact meets. So past ``solimp``'s width the
contact of a body with the ground pushes as a spring and damper on that mass ``m``:

    ``ke = m / (tc^2 ratio^2)``,  ``kd = 2 m / tc``

(a negative ``solref = -K -B`` gives ``K m`` and ``B m``; ``refsafe`` floors ``tc`` at two
timesteps). ``m`` is read once, at the file's pose: the body's effective mass along the up
axis at its centre, or, for a body that cannot move along it (a planar arm, an object sliding
on a table), the least over the directions it moves in
(:func:`~pathgrad.envs.newton.engine.stability.contact_masses`). A body's geoms
share its first geom's ``solref`` (``<default>`` classes and ``childclass`` applied; a
``<pair>``'s own ``solref`` and ``solmix`` are not read).

The constants are per shape, and Newton averages the two shapes of a contact, so a static
shape (a floor, a table, the ground plane) gets 0 and each body's shapes twice its values: a
body on the ground meets exactly its own; two bodies meeting get the sum of theirs, so of two
bodies that can touch, the heavier takes at most half their reduced mass (the
least effective mass of their relative motion, MuJoCo's mass for that contact) and the
lighter keeps its own: a foot stands as stiffly as MuJoCo's, a torso that the foot can reach
is as soft against the ground as against the foot, and the pair is at most about three
times as stiff as MuJoCo's.

What a penalty cannot do: MuJoCo's constraint also cancels ``solimp``'s ``d`` (90-95%) of a
sustained push at once, so under a load the penalty sinks more: ``load / ke``, where MuJoCo's
contact sinks by ``(1 - d)`` of that. And MuJoCo's effective mass changes with the pose; these
are the file pose's. Friction stays Newton's (its slope ``contact_kf`` and the geoms' ``mu``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from pathgrad.envs.newton.engine.kinematics import newton_label
from pathgrad.envs.newton.engine.stability import contact_masses
from pathgrad.envs.newton.model_files.mjcf_joints import read_mjcf_joints
from pathgrad.envs.newton.model_files.mjcf_limits import LimitReference

__all__ = ["apply_contact_softness", "body_contact_references", "contact_constants"]



def body_contact_references(path: str | Path) -> dict[str, LimitReference]:
    """Body name -> the ``solref`` of its first geom (with classes), for each named body of
    ``worldbody`` (MuJoCo's default where it has none).

    Raises:
        ValueError: For a ``solref`` that is not two numbers (naming the body).
    """
    return {
        body.name: LimitReference.parse(body.geom_solref, body.name, "body", "solref")
        for body in read_mjcf_joints(path)
        if body.name
    }


def contact_constants(
    masses: np.ndarray,
    references: list[LimitReference],
    timestep: float | None,
    refsafe: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """``(ke, kd)`` per body for its shapes: twice MuJoCo's spring and damper on the body's
    effective mass (Newton halves them against a static shape of 0); NaN where the mass is
    not finite (a body that cannot move keeps the model's constants)."""
    stiffness = np.full(len(references), np.nan)
    damping = np.full(len(references), np.nan)
    for body, (mass, reference) in enumerate(zip(masses, references, strict=True)):
        if np.isfinite(mass):
            per_stiffness, per_damping = reference.per_unit_mass(timestep, refsafe)
            stiffness[body], damping[body] = 2.0 * per_stiffness * mass, 2.0 * per_damping * mass
    return stiffness, damping


def apply_contact_softness(
    env: Any, timestep: float | None, refsafe: bool, keep: tuple[str, ...] = ()
) -> bool:
    """Every shape of ``env``'s model (a NewtonEnv of an MJCF file) with MuJoCo's contact
    softness: ``ke``, ``kd`` from :func:`contact_constants`, 0 on static shapes. ``keep``
    names the constants the user set (``"ke"``, ``"kd"``), which stay. Returns whether the
    constants were applied (False, with a warning, where the masses cannot be computed)."""
    computed = contact_masses(env)
    if computed is None:
        warnings.warn(
            f"{type(env).__name__}: contact_softness='mujoco': the bodies' effective masses "
            "could not be computed at the file's pose, so contacts keep the model's "
            "contact_ke and contact_kd.",
            UserWarning,
            stacklevel=5,
        )
        return False
    masses, pairs = computed
    own = masses.copy()
    for a, b, reduced in pairs:  # two bodies meeting get the sum of theirs:
        heavier = a if own[a] >= own[b] else b  # the heavier takes half their relative
        masses[heavier] = min(masses[heavier], 0.5 * reduced)  # motion's (MuJoCo's) mass
    solrefs = body_contact_references(env.model_file)
    names = [label.rsplit("/", 1)[-1] for label in env.body_labels]
    default = LimitReference.parse(None, "")
    solrefs = {newton_label(name): reference for name, reference in solrefs.items()}
    references = [solrefs.get(name, default) for name in names]
    stiffness, damping = contact_constants(masses, references, timestep, refsafe)
    model = env.simulation.model
    bodies = len(names)
    shape_body = model.shape_body.numpy()
    local = np.where(shape_body >= 0, shape_body % max(bodies, 1), -1)
    for key, values in (("ke", stiffness), ("kd", damping)):
        if key in keep:
            continue
        array = getattr(model, f"shape_material_{key}")
        current = array.numpy().astype(np.float64)
        mapped = np.where(local >= 0, values[np.maximum(local, 0)], 0.0)
        chosen = np.where(np.isnan(mapped), 2.0 * current, mapped)  # immobile: the model's
        array.assign(chosen.astype(np.float32))
    return True
