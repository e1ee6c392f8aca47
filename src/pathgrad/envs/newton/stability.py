"""What to try when a Newton env's step turns non-finite: its explicit stiff terms, named.

Featherstone's forces are explicit at each substep (docs/simulators.md, "Stable
steps"): a joint damping ``c`` is stable only while ``c dt_sub < 2 (inertia +
armature)`` on its DOF. :func:`instability_hint` reads the model's damping,
armature and substep and says which DOF is the likeliest cause; ``pathgrad
check-env`` and a skipped update's warning append it to a non-finite value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["instability_hint"]


def instability_hint(env: Any) -> str:
    """One clause on the stiff terms of ``env`` (a NewtonEnv) and the settings that tame them."""
    simulation = env.simulation
    model = simulation.model
    dofs = int(env.dofs)
    substep = float(simulation.substep_dt)
    damping = model.joint_damping.numpy()[:dofs].astype(np.float64)
    armature = model.joint_armature.numpy()[:dofs].astype(np.float64)
    worst = int(np.argmax(damping)) if dofs else 0
    parts = [f"substep {substep:.3g} s ({simulation.substeps} per env step of {env.dt:.3g} s)"]
    if dofs and damping[worst] > 0.0:
        joint = _joint_of_dof(model, worst)
        parts.append(
            f"joint damping up to {damping[worst]:g} (joint '{joint}', armature "
            f"{armature[worst]:g}): stable only while damping x substep "
            f"({damping[worst] * substep:.3g}) < 2 x (the DOF's inertia + armature)"
        )
    if simulation.uses_contacts:
        parts.append("contacts and joint limits are explicit springs too")
    return (
        "a Newton step that turns non-finite usually has a force too stiff for its substep: "
        + "; ".join(parts)
        + ". Raise armature or substeps, or lower the damping (docs/simulators.md, "
        "'Stable steps')"
    )


def _joint_of_dof(model: Any, dof: int) -> str:
    starts = model.joint_qd_start.numpy()
    joint = int(np.searchsorted(starts, dof, side="right") - 1)
    return str(model.joint_label[joint]).rsplit("/", 1)[-1]
