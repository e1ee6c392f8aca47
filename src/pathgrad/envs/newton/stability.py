"""What to try when a Newton env's step turns non-finite: its explicit stiff terms, named.

Featherstone's forces are explicit at each substep (docs/simulators.md, "Stable
steps"): a joint damping ``c`` is stable only while ``c dt_sub < 2 (inertia +
armature)`` on its DOF. :func:`instability_hint` reads the model's damping,
armature and substep and says which DOF is the likeliest cause; ``pathgrad
check-env`` and a skipped update's warning append it to a non-finite value.
"""

from __future__ import annotations

from typing import Any

import newton
import numpy as np
import torch
import warp as wp

from pathgrad.envs.newton.scene_checks import ground_penetration

__all__ = ["instability_hint", "stable_substeps", "steps_are_stable", "stiff_terms"]


def instability_hint(env: Any) -> str:
    """One clause on the stiff terms of ``env`` (a NewtonEnv) and the settings that tame them."""
    simulation = env.simulation
    substep = float(simulation.substep_dt)
    step = substep * simulation.substeps
    per = f"env step of {env.dt:.3g} s"
    if abs(step - env.dt) > 1e-9 * env.dt:  # actuator or frame steps: several per env step
        per = f"simulation step of {step:.3g} s, {round(env.dt / step)} per {per}"
    parts = [f"substep {substep:.3g} s ({simulation.substeps} per {per})"]
    terms = [text for _, text in stiff_terms(env)]
    contact = [text for text in terms if text.startswith("ground contact")]
    parts += [text for text in terms if text not in contact]
    if simulation.uses_contacts:  # a body that starts inside the ground says more
        start = ground_penetration(simulation.model)
        parts.append(start or (contact or ["contacts are explicit springs too"])[0])
    return (
        "a Newton step that turns non-finite usually has a force too stiff for its substep: "
        + "; ".join(parts)
        + ". Raise armature or substeps, or lower the damping, limit or contact stiffness "
        "(docs/simulators.md, 'Stable steps')"
    )


def steps_are_stable(env: Any) -> bool:
    """Whether every stiff term of ``env`` (a NewtonEnv) allows its substep."""
    substep = float(env.simulation.substep_dt)
    return all(bound > substep for bound, _ in stiff_terms(env))


def stiff_terms(env: Any) -> list[tuple[float, str]]:
    """Each explicit stiff term of ``env``: the longest stable substep it allows (s; inf
    where it cannot be computed) and a clause naming it, with its numbers."""
    simulation = env.simulation
    model, dofs = simulation.model, int(env.dofs)
    substep = float(simulation.substep_dt)
    damping = model.joint_damping.numpy()[:dofs].astype(np.float64)
    armature = model.joint_armature.numpy()[:dofs].astype(np.float64)
    mass_matrix = _mass_matrix_at_rest(env)  # armature included
    terms = []
    if dofs and damping.max() > 0.0 and mass_matrix is not None:
        # Explicit damping M qdd = -C qd is stable while substep x max eig(M^-1 C) < 2.
        rates, modes = np.linalg.eig(np.linalg.solve(mass_matrix, np.diag(damping)))
        fastest = int(np.argmax(rates.real))
        factor = substep * float(rates.real[fastest])
        dof = int(np.argmax(np.abs(modes[:, fastest])))
        verdict = "above" if factor >= 2.0 else "below"
        terms.append((2.0 / float(rates.real[fastest]), (
            f"joint damping {damping[dof]:g} on joint '{_joint_of_dof(model, dof)}' (armature "
            f"{armature[dof]:g}) gives substep x its fastest rate (max eig of M^-1 C at the "
            f"model's pose) = {factor:.3g}, {verdict} the bound 2 of explicit damping at that "
            "pose (poses of more inertia allow more)"
        )))  # fmt: skip
    elif dofs and damping.max() > 0.0:
        dof = int(np.argmax(damping))
        terms.append((float("inf"), (
            f"joint damping up to {damping[dof]:g} (joint '{_joint_of_dof(model, dof)}', "
            f"armature {armature[dof]:g}): stable only while damping x substep "
            f"({damping[dof] * substep:.3g}) < 2 x (the DOF's inertia + armature)"
        )))  # fmt: skip
    for term in (
        _stiffest_limit(model, dofs, mass_matrix, substep),
        None if not simulation.uses_contacts or mass_matrix is None
        else _stiffest_contact(env, mass_matrix, substep),
    ):  # fmt: skip
        if term is not None:
            terms.append(term)
    return terms


def stable_substeps(env: Any, dt: float, margin: float = 0.5) -> tuple[int, str]:
    """Substeps per env step of ``dt`` that keep every stiff term of ``env`` at ``margin``
    of its stability bound, and the clause naming the stiffest (or why one suffices)."""
    found = stiff_terms(env)
    terms = [term for term in found if np.isfinite(term[0])]
    if not terms and found:
        return 1, (f"its stiff terms could not be bounded here, so raise substeps if a step "
                   f"turns non-finite: {found[0][1]}")  # fmt: skip
    if not terms:
        return 1, "no explicit stiff term bounds the substep"
    bound, text = min(terms, key=lambda term: term[0])
    count = max(1, int(np.ceil(dt / (margin * bound))))
    return count, text


def _stable_substep(stiffness: float, damping: float, mass: float) -> float:
    """The longest substep at which a spring-damper on ``mass`` stays bounded.

    Featherstone integrates velocities, then positions (semi-implicit Euler);
    for ``m x'' = -k x - c x'`` that is stable while
    ``dt^2 k / m + 2 dt c / m < 4``, whose root is returned.
    """
    if stiffness <= 0.0:
        return 2.0 * mass / damping if damping > 0.0 else float("inf")
    return (-damping + np.sqrt(damping**2 + 4.0 * stiffness * mass)) / stiffness


def _bound_text(substep: float, bound: float) -> str:
    verdict = "above it" if substep >= bound else "below it"
    return f"stable only while substep < {bound:.3g} s ({substep:.3g} s is {verdict})"


def _stiffest_contact(
    env: Any, mass_matrix: np.ndarray, substep: float
) -> tuple[float, str] | None:
    """The ground contact (stiffness ``ke``, damping ``kd``) with the shortest stable substep.

    Over world 0's colliding bodies: each one's effective mass along the up
    axis at its centre of mass, from the joint-space mass matrix and the
    Jacobian of its centre's velocity (Newton's forward kinematics of unit
    joint velocities) at the model's pose. A contact point away from the
    centre meets less mass, so the bound is an upper one. (Friction, a slope
    ``kf`` capped at ``mu`` times the normal force, is left out.)
    """
    model, dofs, worlds = env.simulation.model, int(env.dofs), env.num_envs
    bodies = int(model.body_count) // worlds
    shape_body = model.shape_body.numpy()
    colliding = sorted({int(b) for b in shape_body if 0 <= b < bodies})
    if not colliding or dofs == 0:
        return None
    up = int(np.argmax(np.abs(np.asarray(env.gravity, dtype=np.float64))))
    jacobian = np.zeros((bodies, dofs))  # world 0's COM velocity along up per joint velocity
    state = model.state()
    joint_q = wp.array(env.default_joint_q.expand(worlds, -1).reshape(-1).cpu().numpy(),
                       dtype=wp.float32, device=model.device)  # fmt: skip
    for dof in range(dofs):
        velocity = np.zeros((worlds, dofs), dtype=np.float32)
        velocity[:, dof] = 1.0
        joint_qd = wp.array(velocity.reshape(-1), dtype=wp.float32, device=model.device)
        newton.eval_fk(model, joint_q, joint_qd, state)
        jacobian[:, dof] = state.body_qd.numpy()[:bodies, up]  # linear (COM) part first
    inverse = np.linalg.inv(mass_matrix)
    stiffness, damping = model.shape_material_ke.numpy(), model.shape_material_kd.numpy()
    worst: tuple[float, str] | None = None
    for body in colliding:
        reach = float(jacobian[body] @ inverse @ jacobian[body])
        if reach <= 1e-12:
            continue
        shapes = np.flatnonzero(shape_body == body)
        mass, ke, kd = 1.0 / reach, float(stiffness[shapes].max()), float(damping[shapes].max())
        bound = _stable_substep(ke, kd, mass)
        if worst is None or bound < worst[0]:
            name = str(model.body_label[body]).rsplit("/", 1)[-1]
            worst = (float(bound), (
                f"ground contact stiffness {ke:g} and damping {kd:g} (ke, kd of the shapes "
                f"of body '{name}'; effective mass {mass:.3g} kg along the normal at its "
                f"centre at the model's pose) are {_bound_text(substep, bound)}"
            ))  # fmt: skip
    return worst


def _stiffest_limit(
    model: Any, dofs: int, mass_matrix: np.ndarray | None, substep: float
) -> tuple[float, str] | None:
    """The joint limit (spring ``limit_ke``, damper ``limit_kd``) with the shortest stable
    substep, if any DOF has a limit."""
    lower = model.joint_limit_lower.numpy()[:dofs].astype(np.float64)
    upper = model.joint_limit_upper.numpy()[:dofs].astype(np.float64)
    stiffness = model.joint_limit_ke.numpy()[:dofs].astype(np.float64)
    damping = model.joint_limit_kd.numpy()[:dofs].astype(np.float64)
    limited = (np.abs(lower) < 1e6) | (np.abs(upper) < 1e6)
    limited &= (stiffness > 0.0) | (damping > 0.0)
    if not limited.any():
        return None
    if mass_matrix is None:
        dof = int(np.argmax(np.where(limited, stiffness, -1.0)))
        return float("inf"), (
            f"joint '{_joint_of_dof(model, dof)}' has a limit of stiffness {stiffness[dof]:g} "
            f"and damping {damping[dof]:g} (limit_ke, limit_kd): stable only while "
            "substep^2 ke / inertia + 2 substep kd / inertia < 4"
        )
    inertia = np.maximum(np.diag(mass_matrix), 0.0)
    bounds = [
        _stable_substep(stiffness[dof], damping[dof], inertia[dof]) if limited[dof] else np.inf
        for dof in range(dofs)
    ]
    dof = int(np.argmin(bounds))
    return float(bounds[dof]), (
        f"joint '{_joint_of_dof(model, dof)}' has a limit of stiffness {stiffness[dof]:g} and "
        f"damping {damping[dof]:g} (limit_ke, limit_kd; inertia {inertia[dof]:.3g} with "
        f"armature at the model's pose), {_bound_text(substep, bounds[dof])}"
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
        simulation.forward(env.default_joint_q.expand(rows, -1), zeros, zeros, keep_inputs=False)
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
