"""The joints of an MJCF file as MuJoCo reads them: per body, in the file's order.

Newton's importer keeps less of a joint than MuJoCo means by it (one pivot
per body, no ``ref``); :mod:`pathgrad.envs.newton.model_files.mujoco_meaning` restores the
rest from what this module reads: each joint's type, anchor (``pos``), axis
and ``ref``, with ``<default>`` classes, ``childclass`` and the compiler's
angle unit applied as MuJoCo applies them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from xml.etree import ElementTree

import numpy as np

from pathgrad.envs.newton.model_files.mjcf_file import parse_mjcf

__all__ = ["MjcfBody", "MjcfJoint", "child_bodies", "default_classes", "read_mjcf_joints"]

# MuJoCo's defaults of the joint attributes read here.
_JOINT_DEFAULTS = {"type": "hinge", "pos": "0 0 0", "axis": "0 0 1", "ref": "0"}
_ROTATIONAL = ("hinge", "ball")


@dataclass(frozen=True)
class MjcfJoint:
    """One joint of the file: ``type`` is hinge, slide, ball or free; ``ref`` in radians or
    metres (the coordinate's value in the file's pose)."""

    name: str
    type: str
    pos: tuple[float, float, float]
    axis: tuple[float, float, float]
    ref: float
    # What Newton's importer subtracted from the joint's limits and spring rest (it reads
    # ref from the element alone, and shifts limits only where the element has a range).
    limit_shift: float = 0.0
    rest_shift: float = 0.0
    solreflimit: str | None = None  # the attribute's text (with classes); None: MuJoCo's default
    damping: float = 0.0  # with classes, as the three below
    frictionloss: float = 0.0
    solreffriction: str | None = None  # the attributes' text; None: MuJoCo's default
    solimpfriction: str | None = None
    limited: bool = False  # MuJoCo's: "true", or "auto" with a range and autolimits

    @property
    def rotational(self) -> bool:
        return self.type in _ROTATIONAL


@dataclass
class MjcfBody:
    """A body of the file (depth-first order, as MuJoCo and Newton number them)."""

    name: str | None
    joints: list[MjcfJoint] = field(default_factory=list)
    # the solref of its first geom (with classes); None: MuJoCo's default or no geom
    geom_solref: str | None = None


def _vector(text: str) -> tuple[float, float, float]:
    values = [float(v) for v in text.split()]
    return (values + [0.0, 0.0, 0.0])[:3]  # type: ignore[return-value]


def default_classes(root: ElementTree.Element, tag: str = "joint") -> dict[str, dict[str, str]]:
    """Class name -> the attributes its ``<default>`` sets on ``tag`` elements (inherited
    from enclosing defaults; the top one is ``main``)."""
    classes: dict[str, dict[str, str]] = {}

    def visit(element: ElementTree.Element, inherited: dict[str, str], name: str) -> None:
        own = dict(inherited)
        for child in element:
            if child.tag == tag:
                own.update(child.attrib)
        classes[name] = own
        for child in element:
            if child.tag == "default":
                visit(child, own, child.get("class", name))

    for top in root.findall("default"):
        visit(top, {}, top.get("class", "main"))
    return classes


def read_mjcf_joints(path: str | Path | ElementTree.Element) -> list[MjcfBody]:
    """The bodies of ``worldbody`` (depth-first) with their joints as MuJoCo reads them,
    from a file or its parsed root.

    Raises:
        ValueError: For a file that is not XML.
    """
    if isinstance(path, ElementTree.Element):
        root = path
    else:
        try:
            root = parse_mjcf(path)
        except ElementTree.ParseError as error:
            raise ValueError(f"model_file '{path}' is not valid XML: {error}") from error
    classes = default_classes(root)
    geom_classes = default_classes(root, "geom")
    compiler = root.find("compiler")
    degrees = compiler is None or compiler.get("angle", "degree") != "radian"
    autolimits = compiler is None or compiler.get("autolimits", "true") == "true"
    bodies: list[MjcfBody] = []

    def joint(element: ElementTree.Element, active: str) -> MjcfJoint:
        if element.tag == "freejoint":
            values = {**_JOINT_DEFAULTS, "type": "free", **element.attrib}
        else:
            values = {**_JOINT_DEFAULTS, **classes.get(element.get("class", active), {})}
            values.update(element.attrib)
        kind = values["type"]
        ref = float(values["ref"])
        own = float(element.get("ref", 0.0))
        if kind == "hinge" and degrees:
            ref, own = math.radians(ref), math.radians(own)
        axis = np.asarray(_vector(values["axis"]), dtype=np.float64)
        norm = float(np.linalg.norm(axis)) or 1.0
        return MjcfJoint(
            name=values.get("name", ""),
            type=kind,
            pos=_vector(values["pos"]),
            axis=tuple(float(a) for a in axis / norm),  # type: ignore[arg-type]
            ref=ref if kind in ("hinge", "slide") else 0.0,
            limit_shift=own if "range" in element.attrib else 0.0,
            rest_shift=own if {"ref", "springref"} & set(element.attrib) else 0.0,
            solreflimit=values.get("solreflimit"),
            damping=float(values.get("damping", 0.0)),
            frictionloss=float(values.get("frictionloss", 0.0)),
            solreffriction=values.get("solreffriction"),
            solimpfriction=values.get("solimpfriction"),
            limited=values.get("limited", "auto") == "true"
            or (values.get("limited", "auto") == "auto" and autolimits and "range" in values),
        )

    def visit(body: ElementTree.Element, active: str) -> None:
        active = body.get("childclass", active)
        entry = MjcfBody(body.get("name"))
        bodies.append(entry)
        for child in body:
            if child.tag in ("joint", "freejoint"):
                entry.joints.append(joint(child, active))
        geom = body.find("geom")
        if geom is not None:
            values = {**geom_classes.get(geom.get("class", active), {}), **geom.attrib}
            entry.geom_solref = values.get("solref")
        for child, inherited in child_bodies(body, active):
            visit(child, inherited)

    for world in root.findall("worldbody"):
        for body, active in child_bodies(world, world.get("childclass", "main")):
            visit(body, active)
    return bodies


def child_bodies(
    element: ElementTree.Element, active: str
) -> list[tuple[ElementTree.Element, str]]:
    """The bodies directly under ``element``, also those inside its ``<frame>``s (MuJoCo 3:
    a frame places what it holds, and its ``childclass`` applies to it), in file order, each
    with the default class active there."""
    found = []
    for child in element:
        if child.tag == "body":
            found.append((child, active))
        elif child.tag == "frame":
            found += child_bodies(child, child.get("childclass", active))
    return found
