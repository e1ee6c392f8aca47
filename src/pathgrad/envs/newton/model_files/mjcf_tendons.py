"""An MJCF file's fixed tendons, as MuJoCo applies them, in torch.

A fixed tendon is a linear combination of hinge and slide coordinates: its length
``L = sum coef_j qpos_j`` and velocity ``dL = sum coef_j qvel_j``. MuJoCo applies
its spring and damper, ``f = -stiffness (L - springlength) - damping dL`` (no
spring force inside a deadband ``springlength="low high"``; ``-1``, the
default: the length at the joints' ``springref``), as the generalized force
``coef_j f`` on each of its joints; and an actuator may act through it
(:mod:`.mjcf_actuators`: length ``gear L``, force ``gear coef_j force``).
Featherstone has no tendons: :class:`TendonForces` adds these forces to the step,
evaluated at each file timestep. A fixed tendon's limit and friction loss, and
spatial tendons (paths through sites and wrapping geoms), are not applied; the
model's warning names them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import torch

from pathgrad.envs.newton.model_files.mjcf_file import parse_mjcf
from pathgrad.envs.newton.model_files.mjcf_joints import default_classes

__all__ = ["FixedTendon", "TendonForces", "read_fixed_tendons"]


@dataclass(frozen=True)
class FixedTendon:
    """A fixed tendon of the file: ``joints`` its (joint name, coefficient) pairs."""

    name: str
    joints: tuple[tuple[str, float], ...]
    stiffness: float = 0.0
    springlength: tuple[float, float] = (-1.0, -1.0)
    damping: float = 0.0
    limited: bool = False
    frictionloss: float = 0.0

    @property
    def passive(self) -> bool:
        """Whether it pushes its joints by itself (a spring or a damper)."""
        return self.stiffness != 0.0 or self.damping != 0.0


def _numbers(text: str | None) -> list[float]:
    return [float(value) for value in text.split()] if text else []


def read_fixed_tendons(path: str | Path) -> tuple[list[FixedTendon], list[str]]:
    """The file's fixed tendons, and the names of its spatial ones (not applied)."""
    try:
        root = parse_mjcf(path)
    except ElementTree.ParseError:
        return [], []
    classes = default_classes(root, "tendon")
    fixed, spatial = [], []
    for block in root.findall("tendon"):
        for element in block:
            name = element.get("name", f"tendon {len(fixed) + len(spatial)}")
            if element.tag != "fixed":
                spatial.append(name)
                continue
            values = {**classes.get(element.get("class", "main"), {}), **element.attrib}
            length = (_numbers(values.get("springlength")) or [-1.0]) * 2
            limited = values.get("limited", "auto")
            ranged = len(_numbers(values.get("range"))) == 2
            fixed.append(FixedTendon(
                name=name,
                joints=tuple((j.get("joint", ""), float(j.get("coef", 1.0)))
                             for j in element.findall("joint")),  # fmt: skip
                stiffness=float(values.get("stiffness", 0.0)),
                springlength=(length[0], length[1]),
                damping=float(values.get("damping", 0.0)),
                limited=limited == "true" or (limited == "auto" and ranged),
                frictionloss=float(values.get("frictionloss", 0.0)),
            ))  # fmt: skip
    return fixed, spatial


def moments(
    joints: Sequence[tuple[str, float]], places: dict[str, Any], coordinates: int, dofs: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ``joint_q`` and ``joint_qd`` coefficients ``([coordinates], [dofs])`` of a
    linear combination of the file's joints (``places``: name -> its ``q``, ``qd``)."""
    q, qd = torch.zeros(coordinates, dtype=torch.float64), torch.zeros(dofs, dtype=torch.float64)
    for joint, coef in joints:
        if joint not in places:
            raise ValueError(f"a tendon names joint '{joint}', which is not a hinge or slide "
                             "of the model.")  # fmt: skip
        q[places[joint].q] += coef
        qd[places[joint].qd] += coef
    return q, qd


class TendonForces:
    """The generalized forces ``[N, dofs]`` of fixed tendons' springs and dampers.

    Args:
        tendons: The tendons with a spring or a damper.
        places: The file's joint name -> its ``q`` and ``qd`` columns.
        coordinates, dofs: Widths of ``joint_q`` and ``joint_qd``.
        rest_q: Each coordinate's spring reference (the joints' ``springref``,
            ``[coordinates]``).
        device: Torch device.
    """

    def __init__(
        self,
        tendons: Sequence[FixedTendon],
        places: dict[str, Any],
        coordinates: int,
        dofs: int,
        rest_q: Sequence[float],
        device: Any,
    ) -> None:
        rows = [moments(t.joints, places, coordinates, dofs) for t in tendons]
        rest = torch.tensor(list(rest_q), dtype=torch.float64)
        low, high = [], []
        for tendon, (q_row, _) in zip(tendons, rows, strict=True):
            first, second = tendon.springlength
            if first == second == -1.0:  # MuJoCo: the tendon's length at the joints' springref
                first = second = float(q_row @ rest)
            low.append(first)
            high.append(max(first, second))

        def tensor(values: Any) -> torch.Tensor:
            return torch.as_tensor(values, dtype=torch.float32, device=device)

        self.moment_q = tensor(torch.stack([row[0] for row in rows]))
        self.moment_qd = tensor(torch.stack([row[1] for row in rows]))
        self.stiffness = tensor([t.stiffness for t in tendons])
        self.damping = tensor([t.damping for t in tendons])
        self.low, self.high = tensor(low), tensor(high)

    def joint_forces(self, joint_q: torch.Tensor, joint_qd: torch.Tensor) -> torch.Tensor:
        length = joint_q @ self.moment_q.T
        velocity = joint_qd @ self.moment_qd.T
        stretch = length - torch.clamp(length, self.low, self.high)  # 0 inside a deadband
        force = -self.stiffness * stretch - self.damping * velocity
        return force @ self.moment_qd
