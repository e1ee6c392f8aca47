"""An MJCF file's ``<option><flag ...="disable"/>``s, applied as MuJoCo applies them.

MuJoCo's ``spring``, ``damper``, ``frictionloss`` and ``limit`` flags switch off every
joint's and tendon's stiffness, damping, friction loss and limits (``constraint`` switches
off limits and friction loss with the rest of the constraints); Newton's importer reads
none of them. :func:`apply_disabled_flags` takes those attributes out of the tree that
Newton and pathgrad's readers both read, so the model is what MuJoCo simulates.
:func:`unapplied_flags` names the flags that change what an env does and are not applied
(``actuation``, ``contact``, ``clampctrl``); ``gravity`` Newton's importer reads itself.
"""

from __future__ import annotations

from xml.etree import ElementTree

__all__ = ["apply_disabled_flags", "disabled_flags", "unapplied_flags"]

_TAKEN_OUT = {"spring": "stiffness", "damper": "damping", "frictionloss": "frictionloss"}
_UNAPPLIED = {
    "actuation": "the actions still drive the actuators",
    "contact": "contacts follow the env's contacts option",
    "clampctrl": "actions are clipped to ctrlrange",
}


def disabled_flags(root: ElementTree.Element) -> set[str]:
    """The names of the flags ``root``'s ``<option>``s disable (the last one counts)."""
    states: dict[str, str] = {}
    for option in root.findall("option"):
        for flag in option.findall("flag"):
            states.update(flag.attrib)
    found = {name for name, state in states.items() if state == "disable"}
    return found | ({"limit", "frictionloss"} if "constraint" in found else set())


def apply_disabled_flags(root: ElementTree.Element) -> None:
    """Take the stiffness, damping, friction loss and limits that ``root``'s flags disable
    out of its joints and tendons (their own attributes and their ``<default>``s), in
    place."""
    disabled = disabled_flags(root)
    if not disabled & {*_TAKEN_OUT, "limit"}:
        return
    for element in _joints_and_tendons(root):
        for flag, attribute in _TAKEN_OUT.items():
            if flag in disabled:
                element.attrib.pop(attribute, None)
        if "limit" in disabled:
            element.set("limited", "false")


def unapplied_flags(root: ElementTree.Element) -> list[str]:
    """One clause per disabled flag that is not applied, saying what is done instead."""
    disabled = disabled_flags(root)
    return [f'<flag {name}="disable">: {instead}'
            for name, instead in _UNAPPLIED.items() if name in disabled]  # fmt: skip


def _joints_and_tendons(root: ElementTree.Element) -> list[ElementTree.Element]:
    """The ``<joint>``s of the bodies and defaults and the tendons (not the joints a fixed
    tendon lists: those carry coefficients only)."""
    found = [e for body in root.findall("worldbody") for e in body.iter("joint")]
    for default in root.iter("default"):
        found += default.findall("joint") + default.findall("tendon")
    for tendons in root.findall("tendon"):
        found += tendons.findall("fixed") + tendons.findall("spatial")
    return found
