"""Loading a robot file (MJCF or URDF) into a Newton world, as its author meant it.

An MJCF file keeps MuJoCo's meaning (:mod:`pathgrad.envs.newton.mujoco_meaning`):
its joints pivot where MuJoCo pivots them, ``joint_q`` holds MuJoCo's ``qpos``,
``settotalmass`` scales the masses, and what Featherstone cannot express is
named in one warning (:mod:`pathgrad.envs.newton.mjcf_options`). A file whose
``<option>`` Newton's importer rejects (``solver="PGS"``: MuJoCo's solver
settings, which Featherstone has no use for) loads without Newton reading its
options.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from pathgrad.envs.newton.mjcf_joints import read_mjcf_joints
from pathgrad.envs.newton.mjcf_options import read_mjcf_options, scale_total_mass
from pathgrad.envs.newton.model_checks import check_model_file
from pathgrad.envs.newton.mujoco_meaning import MujocoCoordinates, apply_mujoco_meaning

__all__ = ["load_model_file"]

_MJCF, _URDF = (".xml", ".mjcf"), (".urdf",)


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
    try:
        loader(str(path), **options)
    except Exception as error:  # noqa: BLE001 - a parser error of any kind is bad input
        raise ValueError(f"cannot load model_file '{path}': {error}") from error
    if suffix not in _MJCF or not mujoco_meaning:
        return None, []
    file_options = read_mjcf_options(path)
    if file_options.total_mass is not None:
        scale_total_mass(builder, first_body, file_options.total_mass)
    coordinates, notes = apply_mujoco_meaning(
        builder, read_mjcf_joints(path), first_body, first_joint
    )
    if file_options.not_applied:
        notes.append(
            f"model_file '{path.name}': what Newton's Featherstone does not apply: "
            + "; ".join(file_options.not_applied)
        )
    return coordinates, notes


def _solver_named(path: Path) -> bool:
    """Whether an ``<option>`` names MuJoCo's solver (``PGS``, ``CG``, ``Newton``): Newton's
    importer reads it as a number and stops."""
    try:
        root = ElementTree.parse(path).getroot()
    except ElementTree.ParseError:
        return False
    return any(not o.get("solver", "0").strip().isdigit() for o in root.iter("option"))
