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
import torch

from pathgrad.envs.newton.scene_checks import ground_penetration

__all__ = ["instability_hint"]


def instability_hint(env: Any) -> str:
    """One clause on the stiff terms of ``env`` (a NewtonEnv) and the settings that tame them."""
    simulation = env.simulation
    model = simulation.model
    dofs = int(env.dofs)
    substep = float(simulation.substep_dt)
    damping = model.joint_damping.numpy()[:dofs].astype(np.float64)
    armature = model.joint_armature.numpy()[:dofs].astype(np.float64)
    parts = [f"substep {substep:.3g} s ({simulation.substeps} per env step of {env.dt:.3g} s)"]
    mass_matrix = _mass_matrix_at_rest(env)  # armature included
    if dofs and damping.max() > 0.0 and mass_matrix is not None:
        # Explicit damping M qdd = -C qd is stable while substep x max eig(M^-1 C) < 2.
        rates, modes = np.linalg.eig(np.linalg.solve(mass_matrix, np.diag(damping)))
        fastest = int(np.argmax(rates.real))
        factor = substep * float(rates.real[fastest])
        dof = int(np.argmax(np.abs(modes[:, fastest])))
        verdict = "above" if factor >= 2.0 else "below"
        parts.append(
            f"joint damping {damping[dof]:g} on joint '{_joint_of_dof(model, dof)}' (armature "
            f"{armature[dof]:g}) gives substep x its fastest rate (max eig of M^-1 C at the "
            f"model's pose) = {factor:.3g}, {verdict} the bound 2 of explicit damping at that "
            "pose (poses of more inertia allow more)"
        )
    elif dofs and damping.max() > 0.0:
        dof = int(np.argmax(damping))
        parts.append(
            f"joint damping up to {damping[dof]:g} (joint '{_joint_of_dof(model, dof)}', "
            f"armature {armature[dof]:g}): stable only while damping x substep "
            f"({damping[dof] * substep:.3g}) < 2 x (the DOF's inertia + armature)"
        )
    limits = _stiffest_limit(model, dofs, mass_matrix)
    if limits is not None:
        parts.append(limits)
    if simulation.uses_contacts:
        start = ground_penetration(model)
        parts.append(start if start is not None else "contacts are explicit springs too")
    return (
        "a Newton step that turns non-finite usually has a force too stiff for its substep: "
        + "; ".join(parts)
        + ". Raise armature or substeps, or lower the damping or limit stiffness "
        "(docs/simulators.md, 'Stable steps')"
    )


def _stiffest_limit(model: Any, dofs: int, mass_matrix: np.ndarray | None) -> str | None:
    """The joint limit spring with the shortest stable substep, if any DOF has a limit."""
    lower = model.joint_limit_lower.numpy()[:dofs].astype(np.float64)
    upper = model.joint_limit_upper.numpy()[:dofs].astype(np.float64)
    stiffness = model.joint_limit_ke.numpy()[:dofs].astype(np.float64)
    limited = (np.abs(lower) < 1e6) | (np.abs(upper) < 1e6)
    limited &= stiffness > 0.0
    if not limited.any():
        return None
    inertia = np.diag(mass_matrix) if mass_matrix is not None else None
    if inertia is None:
        dof = int(np.argmax(np.where(limited, stiffness, -1.0)))
        return (
            f"joint '{_joint_of_dof(model, dof)}' has a limit spring of stiffness "
            f"{stiffness[dof]:g} (limit_ke): stable only while substep < 2 sqrt(inertia / ke)"
        )
    bounds = np.where(limited, 2.0 * np.sqrt(np.maximum(inertia, 0.0) / stiffness), np.inf)
    dof = int(np.argmin(bounds))
    return (
        f"joint '{_joint_of_dof(model, dof)}' has a limit spring of stiffness "
        f"{stiffness[dof]:g} (limit_ke), stable only while substep < 2 sqrt(inertia / ke) = "
        f"{bounds[dof]:.3g} s at the model's pose"
    )


def _mass_matrix_at_rest(env: Any) -> np.ndarray | None:
    """World 0's joint-space mass matrix at the model's pose, with the armature the solver adds.

    One forward step from the default coordinates (velocities and forces 0)
    makes Featherstone evaluate it; the env's own state is not touched.
    ``None`` for another solver or a world of several articulations.
    """
    simulation, dofs = env.simulation, int(env.dofs)
    solver = simulation.solver
    if simulation.maximal or getattr(solver, "H", None) is None:
        return None
    try:
        starts = solver.articulation_H_start.numpy()
        if int(simulation.model.articulation_count) != env.num_envs:  # one per world
            return None
        rows = env.num_envs
        zeros = torch.zeros(rows, dofs, device=env.device)
        simulation.forward(env.default_joint_q.expand(rows, -1), zeros, zeros)
        block = solver.H.numpy()[int(starts[0]) : int(starts[0]) + dofs * dofs]
        matrix = block.reshape(dofs, dofs).astype(np.float64)
        armature = getattr(solver, "joint_armature_effective", simulation.model.joint_armature)
        matrix += np.diag(armature.numpy()[:dofs].astype(np.float64))  # added at the factoring
    except Exception:  # noqa: BLE001 - a hint is best effort: fall back to the bare bound
        return None
    return matrix if np.all(np.isfinite(matrix)) else None


def _joint_of_dof(model: Any, dof: int) -> str:
    starts = model.joint_qd_start.numpy()
    joint = int(np.searchsorted(starts, dof, side="right") - 1)
    return str(model.joint_label[joint]).rsplit("/", 1)[-1]
