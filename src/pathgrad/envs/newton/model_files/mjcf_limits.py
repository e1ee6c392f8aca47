"""MuJoCo's joint limits as penalty springs: each limited hinge and slide as soft as its file
says.

MuJoCo's limit is a soft constraint. Its reference acceleration ``-b v - k r`` (``r`` the
penetration, ``v`` its rate) comes from the joint's ``solreflimit`` (default ``0.02 1``: a
time constant and a damping ratio; ``b = 2 / (dmax tc)``, ``k = d / (dmax^2 tc^2 ratio^2)``,
``d`` the impedance of ``solimplimit``, ``dmax`` its largest value), and the constraint force
on the joint is ``d / A`` times the acceleration it must change, ``A`` the joint's inverse
effective mass at ``qpos0`` (MuJoCo's ``dof_invweight0``). Past the impedance's width (0.001
rad or m by default) ``d = dmax``, so the force on a penetration is that of a spring and a
damper on the joint's effective mass ``m = 1 / A`` with

    ``limit_ke = m / (tc^2 ratio^2)``,  ``limit_kd = 2 m / tc``

(a negative ``solreflimit = -K -B`` gives ``K m`` and ``B m``), whatever ``solimplimit`` is.
With ``<flag refsafe>`` (MuJoCo's default) ``tc`` is at least twice the file's timestep.
Newton's Featherstone applies these as its limit spring and damper (``joint_limit_ke``,
``joint_limit_kd``): the penetration then recovers as MuJoCo's does, critically damped in 0.02 s
by default, on a light fingertip as on a heavy hip. What a penalty cannot do: MuJoCo's
constraint also cancels ``d`` (90-95%) of a force pushing into the limit at once, so under a
sustained push a penalty limit gives way more (``force / limit_ke``) than MuJoCo's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["MUJOCO_SOLREF", "LimitReference", "effective_masses", "limit_constants"]

MUJOCO_SOLREF = (0.02, 1.0)  # MuJoCo's default solref: time constant (s), damping ratio
_MUJOCO_TIMESTEP = 0.002  # MuJoCo's default <option timestep>


@dataclass(frozen=True)
class LimitReference:
    """A joint's ``solreflimit`` as MuJoCo reads it (two numbers, either sign)."""

    first: float
    second: float

    @classmethod
    def parse(cls, text: str | None, joint: str, owner: str = "joint",
              attribute: str = "solreflimit") -> LimitReference:  # fmt: skip
        """From the attribute's text (``None``: MuJoCo's default); ``owner`` and
        ``attribute`` name where it was read (a geom's ``solref`` has the same form).

        Raises:
            ValueError: For text that is not two numbers.
        """
        if text is None:
            return cls(*MUJOCO_SOLREF)
        try:
            values = [float(value) for value in text.split()]
        except ValueError:
            values = []
        if len(values) != 2:
            raise ValueError(
                f"{owner} '{joint}': {attribute}={text!r} is not two numbers (a time constant "
                "and a damping ratio, or a negative stiffness and damping)."
            )
        return cls(*values)

    def per_unit_mass(self, timestep: float | None, refsafe: bool = True) -> tuple[float, float]:
        """``(stiffness, damping)`` of the limit per unit effective mass (1/s^2, 1/s)."""
        if self.first < 0.0 or self.second < 0.0:  # direct: -stiffness, -damping
            return -min(self.first, 0.0), -min(self.second, 0.0)
        time_constant, ratio = self.first, self.second
        if refsafe:
            time_constant = max(time_constant, 2.0 * (timestep or _MUJOCO_TIMESTEP))
        if time_constant <= 0.0 or ratio <= 0.0:
            return 0.0, 0.0  # MuJoCo: a zero reference means no limit force
        return 1.0 / (time_constant * ratio) ** 2, 2.0 / time_constant


def limit_constants(
    references: list[LimitReference | None],
    mass_matrix: np.ndarray,
    timestep: float | None,
    refsafe: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(limit_ke, limit_kd, effective masses)`` per DOF of one world.

    Args:
        references: Each DOF's ``solreflimit`` (``None``: a DOF these constants leave alone,
            whose entries are NaN).
        mass_matrix: The world's joint-space mass matrix at the file's pose, armature
            included; the effective mass of a DOF is ``1 / (M^-1)_ii``.
        timestep: The file's ``<option timestep>`` (``refsafe``'s floor on the time constant).
    """
    masses = effective_masses(mass_matrix)
    stiffness = np.full(len(references), np.nan)
    damping = np.full(len(references), np.nan)
    for dof, reference in enumerate(references):
        if reference is not None:
            per_stiffness, per_damping = reference.per_unit_mass(timestep, refsafe)
            stiffness[dof], damping[dof] = per_stiffness * masses[dof], per_damping * masses[dof]
    return stiffness, damping, masses


def effective_masses(mass_matrix: np.ndarray) -> np.ndarray:
    """Each DOF's effective mass ``1 / (M^-1)_ii`` (MuJoCo's ``1 / dof_invweight0`` at the
    file's pose)."""
    inverse = np.linalg.inv(0.5 * (mass_matrix + mass_matrix.T))
    return 1.0 / np.maximum(np.diag(inverse), 1e-300)
