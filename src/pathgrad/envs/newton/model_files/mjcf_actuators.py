"""An MJCF file's joint and fixed-tendon actuators as MuJoCo computes their force, in torch.

MuJoCo's actuator force is ``gain x ctrl + b0 + b1 x length + b2 x velocity``, with
``length = gear x qpos`` and ``velocity = gear x qvel`` of the joint (of a fixed
tendon: ``gear x`` its length and velocity, :mod:`.mjcf_tendons`), clamped to
``forcerange`` where force-limited, and it pushes the joint with ``gear x force``
(each of a tendon's joints with ``gear x coef x force``); ``ctrl`` is clamped to
``ctrlrange`` first. The shortcuts set gain and bias:
``<motor>`` gain 1, no bias; ``<position kp kv>`` gain ``kp``, bias ``(0, -kp, -kv)``;
``<velocity kv>`` gain ``kv``, bias ``(0, 0, -kv)``; ``<general>`` its ``gainprm[0]``
(``gaintype="fixed"``) and ``biasprm[:3]`` (``biastype="affine"``). Other kinds
(activation dynamics, spatial-tendon or site transmission, ``dampratio``, muscles)
are not applied and are named instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import torch

from pathgrad.envs.newton.model_files.mjcf_file import parse_mjcf
from pathgrad.envs.newton.model_files.mjcf_joints import default_classes
from pathgrad.envs.newton.model_files.mjcf_tendons import moments, read_fixed_tendons

__all__ = ["FileActuation", "MjcfMotor", "read_mjcf_motors"]

_KINDS = ("motor", "position", "velocity", "general")


@dataclass(frozen=True)
class MjcfMotor:
    """A joint actuator: the force on ``joint`` is ``gear x clamp(gain x ctrl + bias[0] +
    bias[1] x gear x qpos + bias[2] x gear x qvel, forcerange)``, ``ctrl`` clamped to
    ``ctrlrange`` where control-limited (None where not limited). Through a fixed
    tendon (``tendon``: its (joint, coef) pairs; ``joint`` that of the largest
    ``|coef|``), ``qpos``
    and ``qvel`` are the tendon's length and velocity, and each joint is pushed by
    ``coef x`` the force."""

    joint: str
    gear: float
    ctrlrange: tuple[float, float] | None
    kind: str = "motor"
    gain: float = 1.0
    bias: tuple[float, float, float] = (0.0, 0.0, 0.0)
    forcerange: tuple[float, float] | None = None
    tendon: tuple[tuple[str, float], ...] = ()

    @property
    def transmission(self) -> tuple[tuple[str, float], ...]:
        """The (joint, coefficient) pairs it pushes through."""
        return self.tendon or ((self.joint, 1.0),)

    @property
    def state_dependent(self) -> bool:
        """Whether its force depends on the joint's state or is clamped."""
        return any(self.bias[1:]) or self.forcerange is not None

    @property
    def affine(self) -> bool:
        """Whether its force is more than ``gain x ctrl`` (a bias or a force range)."""
        return self.state_dependent or self.bias[0] != 0.0


def _numbers(text: str | None) -> list[float]:
    return [float(value) for value in text.split()] if text else []


def _limits(values: dict[str, str], name: str) -> tuple[float, float] | None:
    """``ctrlrange``/``forcerange`` where it applies (``*limited`` true, or auto and a range)."""
    low_high = _numbers(values.get(f"{name}range"))
    limited = values.get(f"{name}limited", "auto")
    ranged = len(low_high) == 2 and low_high[0] < low_high[1]
    bounded = limited == "true" or (limited == "auto" and ranged)
    return (low_high[0], low_high[1]) if bounded and ranged else None


def _gain_and_bias(tag: str, values: dict[str, str]) -> tuple[float, tuple[float, ...]] | str:
    """The actuator's gain and bias, or why it is not applied."""
    if tag == "motor":
        return 1.0, (0.0, 0.0, 0.0)
    if tag == "position":
        if float(values.get("dampratio", 0.0)):
            return "dampratio (needs MuJoCo's mass matrix at qpos0)"
        kp, kv = float(values.get("kp", 1.0)), float(values.get("kv", 0.0))
        return kp, (0.0, -kp, -kv)
    if tag == "velocity":
        kv = float(values.get("kv", 1.0))
        return kv, (0.0, 0.0, -kv)
    if values.get("dyntype", "none") != "none" or values.get("gaintype", "fixed") != "fixed":
        return "activation dynamics or a gain that is not fixed"
    biastype = values.get("biastype", "none")
    if biastype not in ("none", "affine"):
        return f"biastype '{biastype}'"
    gain = (_numbers(values.get("gainprm")) or [1.0])[0]
    bias = (_numbers(values.get("biasprm")) + [0.0, 0.0, 0.0])[:3]
    return gain, tuple(bias) if biastype == "affine" else (0.0, 0.0, 0.0)


def read_mjcf_motors(path: str | Path) -> tuple[list[MjcfMotor], list[str]]:
    """The file's joint and fixed-tendon actuators (motor, position, velocity, general) in
    actuator order, and those pathgrad does not apply, one phrase each."""
    try:
        root = parse_mjcf(path)
    except ElementTree.ParseError:
        return [], []
    classes = {tag: default_classes(root, tag) for tag in (*_KINDS, "general")}
    tendons = {tendon.name: tendon.joints for tendon in read_fixed_tendons(path)[0]}
    motors, skipped = [], []
    for block in root.findall("actuator"):
        for element in block:
            name = f"<{element.tag} name='{element.get('name', '?')}'>"
            tendon = tendons.get(element.get("tendon", ""), ())
            joint = element.get("joint", element.get("jointinparent"))  # a hinge's: the same
            if element.tag not in _KINDS or (joint is None and not tendon):
                skipped.append(name)
                continue
            kind = element.get("class", "main")
            values = {**classes["general"].get(kind, {}), **classes[element.tag].get(kind, {}),
                      **element.attrib, **({"joint": joint} if joint else {})}  # fmt: skip
            found = _gain_and_bias(element.tag, values)
            if isinstance(found, str):
                skipped.append(f"{name} ({found})")
                continue
            gain, bias = found
            motors.append(MjcfMotor(
                joint=values["joint"] if "joint" in values else max(
                    tendon, key=lambda pair: abs(pair[1]))[0],  # fmt: skip
                gear=(_numbers(values.get("gear")) or [1.0])[0],
                ctrlrange=_limits(values, "ctrl"),
                kind=element.tag,
                gain=float(gain),
                bias=(float(bias[0]), float(bias[1]), float(bias[2])),
                forcerange=_limits(values, "force"),
                tendon=() if "joint" in values else tendon,
            ))  # fmt: skip
    return motors, skipped


class FileActuation:
    """The generalized forces of a file's actuators, as MuJoCo computes them.

    Args:
        motors: The actuators, in action order.
        places: The file's joint name -> its ``q`` and ``qd`` columns (with MuJoCo's
            meaning, a hinge's or slide's ``qpos`` and ``qvel`` entries).
        coordinates, dofs: Widths of ``joint_q`` and ``joint_qd``.
        device: Torch device.
    """

    def __init__(
        self,
        motors: list[MjcfMotor],
        places: dict[str, Any],
        coordinates: int,
        dofs: int,
        device: torch.device,
    ) -> None:
        def tensor(values: Any) -> torch.Tensor:
            return torch.as_tensor(values, dtype=torch.float32, device=device)

        rows = [moments(m.transmission, places, coordinates, dofs) for m in motors]
        gear = torch.tensor([m.gear for m in motors], dtype=torch.float64)[:, None]
        # gear x each joint's coefficient: the actuator's length and velocity are these
        # rows times joint_q and joint_qd, and its push on the DOFs is the force times them
        self.moment_q = tensor(gear * torch.stack([q for q, _ in rows]))
        self.moment_qd = tensor(gear * torch.stack([qd for _, qd in rows]))
        self.gain = tensor([m.gain for m in motors])
        self.bias = [tensor([m.bias[k] for m in motors]) for k in range(3)]
        inf = float("inf")
        self.force_low = tensor([(m.forcerange or (-inf, inf))[0] for m in motors])
        self.force_high = tensor([(m.forcerange or (-inf, inf))[1] for m in motors])

    def joint_forces(
        self, joint_q: torch.Tensor, joint_qd: torch.Tensor, ctrl: torch.Tensor
    ) -> torch.Tensor:
        """The actuators' generalized forces ``[N, dofs]`` at this state and ``ctrl``."""
        length = joint_q @ self.moment_q.T
        velocity = joint_qd @ self.moment_qd.T
        force = self.gain * ctrl + self.bias[0] + self.bias[1] * length + self.bias[2] * velocity
        return torch.clamp(force, self.force_low, self.force_high) @ self.moment_qd
