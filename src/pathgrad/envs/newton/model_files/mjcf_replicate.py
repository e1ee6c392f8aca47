"""MuJoCo's ``<replicate>``, expanded as MuJoCo compiles it (Newton's importer skips it).

``<replicate count="n" offset="x y z" euler="a b c" sep="s">`` stands for ``n`` copies of
its children. Copy ``k`` is turned by ``R_k``, the rotation of ``k x euler`` (in the
compiler's ``angle`` unit and ``eulerseq``; ``R_k`` is not ``R_1^k`` where ``euler`` turns
about two axes), and placed at ``sum_{i<k} R_i offset``. Every ``name`` in copy ``k`` gets
``s`` and ``k`` with as many digits as ``n`` has (``leg`` -> ``leg-0``; ``toe`` of 12 ->
``toe07``); an inner replicate's suffix comes first. Each actuator, sensor, tendon and
contact pair or exclusion that refers to a name inside is copied once per copy, referring
to that copy's names, and the copies go to the end of their section (MuJoCo's order,
checked with the ``mujoco`` package).
"""

from __future__ import annotations

import copy
from xml.etree import ElementTree

import numpy as np

__all__ = ["expand_replicates"]

# Attributes by which an actuator, sensor, tendon or contact element names a model element.
_REFERENCES = frozenset({
    "joint", "joint1", "joint2", "jointinparent", "tendon", "tendon1", "tendon2", "site",
    "site1", "site2", "sidesite", "refsite", "cranksite", "slidersite", "body", "body1",
    "body2", "geom", "geom1", "geom2", "objname", "refname", "actuator",
})  # fmt: skip
_FOLLOWING = ("actuator", "sensor", "tendon", "contact")


def expand_replicates(root: ElementTree.Element) -> None:
    """Replace every ``<replicate>`` under ``root`` (a ``<mujoco>`` element, includes
    expanded) by its copies, in place.

    Raises:
        ValueError: For a count that is not a positive integer, or an offset or euler
            that is not three numbers.
    """
    angle, sequence = "degree", "xyz"
    for compiler in root.iter("compiler"):
        angle = compiler.get("angle", angle)
        sequence = compiler.get("eulerseq", sequence)
    sections = [section for tag in _FOLLOWING for section in root.findall(tag)]
    _expand_within(root, sections, angle == "degree", sequence)


def _expand_within(
    parent: ElementTree.Element, sections: list, degrees: bool, sequence: str
) -> None:
    children = []
    for child in list(parent):
        _expand_within(child, sections, degrees, sequence)  # inner replicates first
        if child.tag == "replicate":
            children.extend(_copies(child, sections, degrees, sequence))
        else:
            children.append(child)
    parent[:] = children


def _copies(
    replicate: ElementTree.Element, sections: list, degrees: bool, sequence: str
) -> list[ElementTree.Element]:
    count = _count(replicate.get("count", ""))
    offset, euler = _three(replicate, "offset"), _three(replicate, "euler")
    separator, width = replicate.get("sep", ""), len(str(count))
    inside = {e.get("name") for e in replicate.iter() if e.get("name")}
    frames, position = [], np.zeros(3)
    suffixes = [f"{separator}{k:0{width}d}" for k in range(count)]
    for k, suffix in enumerate(suffixes):
        rotation = _euler_quaternion(k * euler, degrees, sequence)
        frame = ElementTree.Element("frame", {
            "pos": " ".join(f"{v:.17g}" for v in position),
            "quat": " ".join(f"{v:.17g}" for v in rotation),
        })  # fmt: skip
        for child in replicate:
            frame.append(_renamed(copy.deepcopy(child), inside, suffix))
        frames.append(frame)
        position = position + _rotate(rotation, offset)
    for section in sections:
        following = [e for e in section if _refers_to(e, inside)]
        for element in following:
            section.remove(element)
        for suffix in suffixes:
            section.extend(_renamed(copy.deepcopy(e), inside, suffix) for e in following)
    return frames


def _renamed(element: ElementTree.Element, inside: set, suffix: str) -> ElementTree.Element:
    """``element`` with its names and its references to ``inside`` suffixed (in place)."""
    for node in element.iter():
        for key, value in node.attrib.items():
            if key == "name" or (key in _REFERENCES and value in inside):
                node.set(key, value + suffix)
    return element


def _refers_to(element: ElementTree.Element, inside: set) -> bool:
    return any(key in _REFERENCES and value in inside
               for node in element.iter() for key, value in node.attrib.items())  # fmt: skip


def _count(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise ValueError(f"<replicate count='{text}'>: count must be a positive integer.")
    return count


def _three(element: ElementTree.Element, key: str) -> np.ndarray:
    text = element.get(key, "0 0 0")
    try:
        values = np.array([float(v) for v in text.split()])
    except ValueError:
        values = np.zeros(0)
    if values.shape != (3,):
        raise ValueError(f"<replicate {key}='{text}'>: {key} must be three numbers.")
    return values


def _euler_quaternion(angles: np.ndarray, degrees: bool, sequence: str) -> np.ndarray:
    """MuJoCo's ``euler`` as a quaternion (w x y z): a lower-case axis of ``eulerseq``
    turns with the frame (multiplied on the right), an upper-case one stays fixed."""
    if len(sequence) != 3 or any(axis not in "xyzXYZ" for axis in sequence):
        raise ValueError(f"<compiler eulerseq='{sequence}'>: three of x, y, z (X, Y, Z).")
    quaternion = np.array([1.0, 0.0, 0.0, 0.0])
    for axis, angle in zip(sequence, np.radians(angles) if degrees else angles, strict=True):
        half = np.zeros(4)
        half[0], half[1 + "xyz".index(axis.lower())] = np.cos(angle / 2), np.sin(angle / 2)
        quaternion = (_multiply(quaternion, half) if axis.islower()
                      else _multiply(half, quaternion))  # fmt: skip
    return quaternion


def _multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    w1, v1, w2, v2 = a[0], a[1:], b[0], b[1:]
    return np.concatenate([[w1 * w2 - v1 @ v2], w1 * v2 + w2 * v1 + np.cross(v1, v2)])


def _rotate(quaternion: np.ndarray, vector: np.ndarray) -> np.ndarray:
    w, axis = quaternion[0], quaternion[1:]
    twice = 2.0 * np.cross(axis, vector)
    return vector + w * twice + np.cross(axis, twice)
