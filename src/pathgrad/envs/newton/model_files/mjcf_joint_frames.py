"""A body whose joints one Newton joint cannot hold, as a chain of joint frames.

MuJoCo composes a body's joints in the file's order, each turning or sliding the body
about its own anchor. Newton's importer merges them into one D6 joint that pivots at
one point and slides before it turns; that is MuJoCo's meaning only where the hinges
share an anchor and no slide follows a hinge (Gymnasium's walker: slides, then one
hinge). Elsewhere (dm_control's humanoid's ankles, the fish's fins) bodies would sit
centimetres from where MuJoCo puts them. :func:`split_joint_frames` rewrites such a
body, in the parsed file, as a chain: the body's frame and first joint on a massless
frame body named ``<body>:<joint>``, each further joint on the next, and the body
itself (its name, geoms, inertia, children) at the end of the chain with the last
joint, at the identity pose. Composing the chain is what MuJoCo does with the joints
of one body, so positions, velocities and accelerations are MuJoCo's; ``joint_q``
keeps one coordinate per file joint, in the file's order.
"""

from __future__ import annotations

import copy
from xml.etree import ElementTree

import numpy as np

__all__ = ["needs_joint_frames", "split_joint_frames"]

_FRAME = ("pos", "quat", "axisangle", "xyaxes", "zaxis", "euler", "childclass")
_JOINT_TAGS = ("joint", "freejoint")


def _joint_values(element: ElementTree.Element, classes: dict, active: str) -> dict[str, str]:
    if element.tag == "freejoint":
        return {"type": "free", **element.attrib}
    return {"type": "hinge", "pos": "0 0 0", **classes.get(element.get("class", active), {}),
            **element.attrib}  # fmt: skip


def needs_joint_frames(joints: list[dict[str, str]]) -> bool:
    """Whether one Newton joint cannot hold these joints of one body as MuJoCo means them:
    hinges about different anchors, a slide after a hinge, or a ``ref`` on a hinge other
    than the first (or beside slides), which one joint frame cannot turn the body by."""
    rotational = [j for j in joints if j["type"] in ("hinge", "ball")]
    anchors = [np.array([float(v) for v in j.get("pos", "0 0 0").split()]) for j in rotational]
    apart = any(not np.allclose(a, anchors[0]) for a in anchors[1:])
    first_turn = next((k for k, j in enumerate(joints) if j["type"] in ("hinge", "ball")), None)
    slide_after = first_turn is not None and any(
        j["type"] == "slide" for j in joints[first_turn + 1 :]
    )
    turned = [j for j in rotational if float(j.get("ref", "0")) != 0.0]
    slides = any(j["type"] == "slide" for j in joints)
    refs = bool(turned) and (turned[0] is not rotational[0] or len(turned) > 1 or slides)
    return apart or slide_after or refs


def split_joint_frames(root: ElementTree.Element) -> list[str]:
    """Rewrite, in place, each body whose joints need it as a chain of joint frames;
    the names of the bodies rewritten."""
    from pathgrad.envs.newton.model_files.mjcf_joints import child_bodies, default_classes

    classes = default_classes(root)
    rewritten: list[str] = []

    def visit(body: ElementTree.Element, active: str, index: list[int]) -> None:
        active = body.get("childclass", active)
        index[0] += 1
        joints = [child for child in body if child.tag in _JOINT_TAGS]
        values = [_joint_values(j, classes, active) for j in joints]
        children = child_bodies(body, active)  # before the chain moves them
        if (
            len(joints) > 1
            and not any(v["type"] == "free" for v in values)
            and needs_joint_frames(values)
        ):
            rewritten.append(body.get("name") or f"body {index[0]}")
            _chain(body, joints, index[0])
        for child, inherited in children:
            visit(child, inherited, index)

    for world in root.findall("worldbody"):
        for body, active in child_bodies(world, world.get("childclass", "main")):
            visit(body, active, [0])
    return rewritten


def _chain(body: ElementTree.Element, joints: list[ElementTree.Element], number: int) -> None:
    """``body`` becomes the first frame of the chain; the body itself its last link."""
    name = body.get("name") or f"body{number}"
    inner = ElementTree.Element("body", {k: v for k, v in body.attrib.items() if k not in _FRAME})
    for child in list(body):
        if child.tag not in _JOINT_TAGS:
            inner.append(child)
        body.remove(child)
    for key in list(body.attrib):
        if key not in _FRAME:
            del body.attrib[key]
    frame = body
    for k, joint in enumerate(joints):
        joint_name = joint.get("name") or f"joint{k}"
        if k == len(joints) - 1:
            inner.insert(0, copy.copy(joint))
            frame.append(inner)
        else:
            frame.set("name", f"{name}:{joint_name}")
            frame.append(copy.copy(joint))
            if k < len(joints) - 2:
                nested = ElementTree.Element("body")
                frame.append(nested)
                frame = nested
