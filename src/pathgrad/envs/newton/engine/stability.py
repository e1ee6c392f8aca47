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
import warp as wp

from pathgrad.envs.newton.engine.scene_checks import ground_penetration

__all__ = [
    "contact_masses",
    "instability_hint",
    "mass_matrix_at_rest",
    "stable_substeps",
    "steps_are_stable",
    "stiff_terms",
]


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
    contact = [text for text in terms if "contact stiffness" in text or "friction" in text]
    parts += [text for text in terms if text not in contact]
    if simulation.uses_contacts:  # a body that starts inside the ground says more
        start = ground_penetration(simulation.model)
        parts.append(start or "; ".join(contact) or "contacts are explicit springs too")
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
    featherstone = not simulation.maximal and getattr(simulation.solver, "H", None) is not None
    jacobians = _velocity_jacobians(env) if dofs and featherstone else None
    mass_matrix = _mass_matrix_at_rest(env, jacobians) if jacobians else None  # armature included
    terms = []
    # Damping integrated implicitly (NewtonEnv's implicit_damping) is stable at any substep.
    damped = dofs and damping.max() > 0.0 and not getattr(env, "implicit_damping", False)
    if damped and mass_matrix is not None:
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
    elif damped:
        dof = int(np.argmax(damping))
        terms.append((float("inf"), (
            f"joint damping up to {damping[dof]:g} (joint '{_joint_of_dof(model, dof)}', "
            f"armature {armature[dof]:g}): stable only while damping x substep "
            f"({damping[dof] * substep:.3g}) < 2 x (the DOF's inertia + armature)"
        )))  # fmt: skip
    pairs = _contact_pairs(env) if simulation.uses_contacts and mass_matrix is not None else []
    for term in (
        _stiffest_limit(model, dofs, mass_matrix, substep),
        _stiffest_contact(env, mass_matrix, substep, pairs, jacobians) if pairs else None,
        _stiffest_friction(env, mass_matrix, substep, pairs, jacobians) if pairs else None,
    ):
        if term is not None:
            terms.append(term)
    return terms


def stable_substeps(env: Any, dt: float, margin: float = 0.5) -> tuple[int, str]:
    """Substeps per env step of ``dt`` that keep every stiff term of ``env`` at ``margin``
    of its stability bound, and the clause naming the stiffest (or why one suffices).

    Friction is left out: its bound is set by ``contact_kf``, which no file states
    (MuJoCo's friction is a constraint), and substeps for a light body's slope would
    multiply the cost (ANYmal's feet: four times); a slope above its bound makes
    :func:`steps_are_stable` false and :func:`instability_hint` name it.
    """
    found = [term for term in stiff_terms(env) if "friction slope" not in term[1]]
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


def _contact_pairs(env: Any) -> list[tuple[int, int]]:
    """World 0's pairs of shapes that can collide (``model.shape_contact_pairs``; every
    colliding shape against the ground, ``-1``, where Newton lists none)."""
    model, worlds = env.simulation.model, env.num_envs
    bodies = int(model.body_count) // worlds
    shape_body = model.shape_body.numpy()
    world = model.shape_world.numpy()
    collides = (model.shape_flags.numpy() & int(newton.ShapeFlags.COLLIDE_SHAPES)) != 0
    mine = set(np.flatnonzero(collides & (world <= 0)).tolist())  # world 0's, shared
    pairs = getattr(model, "shape_contact_pairs", None)
    if pairs is not None and int(model.shape_contact_pair_count):
        return [(int(a), int(b)) for a, b in pairs.numpy()[: int(model.shape_contact_pair_count)]
                if a in mine and b in mine]  # fmt: skip
    return [(int(a), -1) for a in mine if 0 <= shape_body[a] < bodies]


def _velocity_jacobians(env: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """World 0's body velocities per unit joint velocity at the model's pose: the linear
    (centre of mass) ``[bodies + 1, 3, dofs]`` and angular ``[bodies + 1, 3, dofs]`` parts
    (the last row, for body -1, the static world, stays 0), the bodies' poses
    ``[bodies, 7]`` and their centres of mass in the world ``[bodies, 3]`` (Newton's
    forward kinematics of unit joint velocities)."""
    model, dofs, worlds = env.simulation.model, int(env.dofs), env.num_envs
    bodies = int(model.body_count) // worlds
    linear, angular = np.zeros((bodies + 1, 3, dofs)), np.zeros((bodies + 1, 3, dofs))
    state = model.state()
    joint_q = wp.array(env.default_joint_q.expand(worlds, -1).reshape(-1).cpu().numpy(),
                       dtype=wp.float32, device=model.device)  # fmt: skip
    for dof in range(dofs):
        velocity = np.zeros((worlds, dofs), dtype=np.float32)
        velocity[:, dof] = 1.0
        joint_qd = wp.array(velocity.reshape(-1), dtype=wp.float32, device=model.device)
        newton.eval_fk(model, joint_q, joint_qd, state)
        twists = state.body_qd.numpy()[:bodies]
        linear[:bodies, :, dof], angular[:bodies, :, dof] = twists[:, :3], twists[:, 3:]
    poses = state.body_q.numpy()[:bodies].astype(np.float64)
    centres = poses[:, :3] + _rotate(poses[:, 3:], model.body_com.numpy()[:bodies])
    return linear, angular, poses, centres


def _rotate(quaternions: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Vectors rotated by quaternions (x y z w, Newton's order), row by row."""
    axis, real = quaternions[..., :3], quaternions[..., 3:]
    twice = 2.0 * np.cross(axis, vectors)
    return vectors + real * twice + np.cross(axis, twice)


def _stiffest_contact(
    env: Any, mass_matrix: np.ndarray, substep: float, pairs: list, jacobians: tuple
) -> tuple[float, str] | None:
    """The contact (stiffness ``ke``, damping ``kd``) with the shortest stable substep.

    Over world 0's pairs of shapes that can collide: against a static shape (the
    ground), the body's effective mass along the up axis (the plane's normal) at its
    centre of mass; against another body, the smallest effective mass of their
    relative motion over directions (the inverse of the largest eigenvalue of
    ``(J_a - J_b) M^-1 (J_a - J_b)^T``, their reduced mass: a light object pushed
    sideways). ``J`` is the Jacobian of a body's centre's velocity and ``M`` the
    joint-space mass matrix, at the model's pose. A contact point away from the centre
    meets less mass, so the bound is an upper one; with MuJoCo's contact softness (whose
    ``ke``, ``kd`` scale with the centre's mass) a ground contact is read at the shape's
    lightest edge (:func:`_shape_edges`) instead. (Friction: :func:`_stiffest_friction`.)
    """
    model = env.simulation.model
    shape_body = model.shape_body.numpy()
    jacobian = jacobians[0]
    inverse = np.linalg.inv(mass_matrix)
    up = int(model.up_axis)
    edges = getattr(env, "contact_softness", "newton") == "mujoco"
    stiffness, damping = model.shape_material_ke.numpy(), model.shape_material_kd.numpy()
    worst: tuple[float, str] | None = None
    for a, b in pairs:
        body_a = int(shape_body[a]) if a >= 0 else -1
        body_b = int(shape_body[b]) if b >= 0 else -1
        if body_a < 0 and body_b < 0:
            continue
        relative = jacobian[body_a] - jacobian[body_b]
        if (body_a < 0 or body_b < 0) and edges:  # MuJoCo's softness: ke, kd scale with the
            shape = a if body_a >= 0 else b  # centre's mass, so the lightest point bounds
            reach = max(_reach_along_up(jacobians, inverse, up, int(shape_body[shape]), point)
                        for point in _shape_edges(model, shape, jacobians))  # fmt: skip
            along = "along the normal at the shape's lightest edge"
        elif body_a < 0 or body_b < 0:
            reach = float(relative[up] @ inverse @ relative[up])
            along = "along the normal at its centre"
        else:
            reach = _largest_mobility(relative, inverse)
            along = "relative, in the direction of least mass at its centre"
        if reach <= 1e-12:
            continue
        shapes = [shape for shape in (a, b) if shape >= 0]  # Newton averages the two shapes'
        ke = float(np.mean(stiffness[shapes])) if b >= 0 else float(stiffness[a])
        kd = float(np.mean(damping[shapes])) if b >= 0 else float(damping[a])
        mass = 1.0 / reach
        bound = _stable_substep(ke, kd, mass)
        if worst is None or bound < worst[0]:
            what = "ground contact" if min(body_a, body_b) < 0 else "contact"
            worst = (float(bound), (
                f"{what} stiffness {ke:g} and damping {kd:g} (ke, kd of the shapes "
                f"of body '{_body_names(model, body_a, body_b)}'; effective mass {mass:.3g} kg "
                f"{along} at the model's pose) are {_bound_text(substep, bound)}"
            ))  # fmt: skip
    return worst


def _stiffest_friction(
    env: Any, mass_matrix: np.ndarray, substep: float, pairs: list, jacobians: tuple
) -> tuple[float, str] | None:
    """The contact whose friction slope ``kf`` allows the shortest stable substep.

    Newton's friction is viscous below its Coulomb cap, ``f_t = -kf v_t`` while
    ``kf |v_t| < mu f_n``: an explicit damper on the contact point's tangential motion,
    stable while ``substep kf / m_t < 2``, where ``m_t`` is the effective mass that the
    contact meets across the normal, at the shape's centre (a foot at the end of a
    leg meets far less than its body's mass); none where ``mu`` is 0 (a frictionless
    contact, MJCF's ``condim="1"``). Above the bound a sticking contact
    chatters, held by the cap in the rollout, while the gradient, which follows the
    viscous branch, grows by ``|1 - substep kf / m_t|`` every substep.
    """
    model, dofs = env.simulation.model, int(env.dofs)
    shape_body = model.shape_body.numpy()
    friction, coulomb = model.shape_material_kf.numpy(), model.shape_material_mu.numpy()
    if not ((friction > 0.0) & (coulomb > 0.0)).any():
        return None
    linear, angular, poses, centres = jacobians
    offsets = model.shape_transform.numpy()[:, :3].astype(np.float64)
    inverse = np.linalg.inv(mass_matrix)
    tangent = [axis for axis in range(3) if axis != int(model.up_axis)]

    def point_jacobian(shape: int) -> np.ndarray:  # the shape centre's velocity per joint's
        body = int(shape_body[shape]) if shape >= 0 else -1
        if body < 0:
            return np.zeros((3, dofs))
        arm = poses[body, :3] + _rotate(poses[body, 3:], offsets[shape]) - centres[body]
        return linear[body] - np.cross(arm, angular[body], axis=0)

    worst: tuple[float, str] | None = None
    for a, b in pairs:
        body_a = int(shape_body[a]) if a >= 0 else -1
        body_b = int(shape_body[b]) if b >= 0 else -1
        shapes = [shape for shape in (a, b) if shape >= 0]
        kf, mu = (float(np.mean(values[shapes])) for values in (friction, coulomb))
        if kf <= 0.0 or mu <= 0.0 or (body_a < 0 and body_b < 0):  # frictionless: no term
            continue
        relative = point_jacobian(a) - point_jacobian(b)
        if body_a >= 0 and body_b >= 0:  # the direction of least relative mass
            reach = _largest_mobility(relative, inverse)
        else:  # across the ground's normal
            reach = _largest_mobility(relative[tangent], inverse)
        if reach <= 1e-12:
            continue
        mass = 1.0 / reach
        bound = 2.0 * mass / kf
        if worst is None or bound < worst[0]:
            worst = (float(bound), (
                f"contact friction slope {kf:g} (kf of the shapes of body "
                f"'{_body_names(model, body_a, body_b)}', viscous below the Coulomb cap; "
                f"effective mass {mass:.3g} kg across the normal at the shape's centre at the "
                f"model's pose) is {_bound_text(substep, bound)}; above it a sticking contact "
                "chatters and its gradient grows every substep: lower contact_kf, raise "
                "substeps or the armature of the joints that move it"
            ))  # fmt: skip
    return worst


def _shape_edges(model: Any, shape: int, jacobians: tuple) -> list[np.ndarray]:
    """World points of ``shape`` (world 0, the model's pose) where a contact with the
    ground can meet the least mass along the up axis: its centre and, out along each
    horizontal axis, the farthest a contact point can lie from it (a sphere touches under
    its centre; a capsule under an end cap, ``half_height`` out; a box or cylinder at a
    corner or rim, within its half diagonal)."""
    _, _, poses, _ = jacobians
    body = int(model.shape_body.numpy()[shape])
    transform = model.shape_transform.numpy()[shape].astype(np.float64)
    centre = poses[body, :3] + _rotate(poses[body, 3:], transform[:3])
    kind, scale = int(model.shape_type.numpy()[shape]), model.shape_scale.numpy()[shape]
    radius = {
        int(newton.GeoType.SPHERE): 0.0,
        int(newton.GeoType.CAPSULE): float(scale[1]),
        int(newton.GeoType.CYLINDER): float(np.hypot(scale[0], scale[1])),
        int(newton.GeoType.BOX): float(np.linalg.norm(scale)),
    }.get(kind, float(np.max(scale)))
    up = int(model.up_axis)
    points = [centre]
    for axis in (axis for axis in range(3) if axis != up):
        for sign in (-1.0, 1.0):
            points.append(centre + sign * radius * np.eye(3)[axis])
    return points


def _reach_along_up(
    jacobians: tuple, inverse: np.ndarray, up: int, body: int, point: np.ndarray
) -> float:
    """``J M^-1 J^T`` of the up velocity of ``point`` (world) on ``body``: the inverse of
    the effective mass a contact there meets along the ground's normal."""
    linear, angular, _, centres = jacobians
    row = linear[body][up] - np.cross(point - centres[body], angular[body], axis=0)[up]
    return float(row @ inverse @ row)


def _largest_mobility(jacobian: np.ndarray, inverse: np.ndarray) -> float:
    """The largest eigenvalue of ``J M^-1 J^T``: the inverse of the least effective mass."""
    mobility = jacobian @ inverse @ jacobian.T
    return float(np.linalg.eigvalsh(0.5 * (mobility + mobility.T)).max())


def _body_names(model: Any, *bodies: int) -> str:
    return "' and '".join(str(model.body_label[k]).rsplit("/", 1)[-1] for k in bodies if k >= 0)


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


def mass_matrix_at_rest(env: Any) -> np.ndarray | None:
    """World 0's joint-space mass matrix at the model's pose with the solver's armature
    (``[dofs, dofs]``, ``joint_qd``'s coordinates); None where it cannot be computed."""
    return _mass_matrix_at_rest(env, _velocity_jacobians(env)) if int(env.dofs) else None


def contact_masses(env: Any) -> tuple[np.ndarray, list[tuple[int, int, float]]] | None:
    """``(along_up, pairs)`` at the model's pose, from one computation of the Jacobians and
    the inverse mass matrix (one forward kinematics per DOF); None where the mass matrix
    cannot be computed.

    ``along_up``: each body of world 0, the effective mass its centre meets along the up
    axis (the ground's normal), ``1 / (J_up M^-1 J_up^T)`` (kg); for a body that cannot move
    that way (a planar arm), the least over the directions it moves in; ``inf`` for one that
    cannot move. ``pairs``: world 0's pairs of bodies whose shapes can collide, each with the
    least effective mass of their relative motion (their reduced mass, over directions).
    """
    if not int(env.dofs):
        return None
    jacobians = _velocity_jacobians(env)
    matrix = _mass_matrix_at_rest(env, jacobians)
    if matrix is None:
        return None
    inverse = np.linalg.inv(matrix)
    linear = jacobians[0]  # [bodies + 1, 3, dofs], the static world's row 0
    up = linear[:-1, int(env.simulation.model.up_axis)]
    reach = np.einsum("bi,ij,bj->b", up, inverse, up)
    flat = reach <= 1e-12
    reach[flat] = [_largest_mobility(linear[body], inverse) for body in np.flatnonzero(flat)]
    along_up = np.where(reach > 1e-12, 1.0 / np.maximum(reach, 1e-300), np.inf)
    if not env.simulation.uses_contacts:
        return along_up, []
    shape_body = env.simulation.model.shape_body.numpy()
    found: dict[tuple[int, int], float] = {}
    for a, b in _contact_pairs(env):
        bodies = sorted(int(shape_body[shape]) if shape >= 0 else -1 for shape in (a, b))
        if bodies[0] < 0 or bodies[0] == bodies[1]:
            continue
        mobility = _largest_mobility(linear[bodies[0]] - linear[bodies[1]], inverse)
        if mobility > 1e-12:
            found[(bodies[0], bodies[1])] = 1.0 / mobility
    return along_up, [(a, b, mass) for (a, b), mass in found.items()]


def _mass_matrix_at_rest(env: Any, jacobians: tuple) -> np.ndarray | None:
    """World 0's joint-space mass matrix at the model's pose, in ``joint_qd``'s coordinates,
    with the armature the solver adds.

    From the bodies' kinetic energy: ``sum_b m_b J_b^T J_b + W_b^T I_b W_b`` over the
    Jacobians of each body's centre-of-mass velocity ``J_b`` and angular velocity ``W_b``
    (:func:`_velocity_jacobians`), ``I_b`` the body's inertia turned into the world.
    Featherstone's own matrix (``solver.H``) is not this one where a free joint is: it is
    written in spatial velocities (the velocity of the body's point at the world origin),
    so read against ``joint_qd`` it made a free body away from the origin look almost
    weightless (the hand's 0.5 kg cube, 0.6 m up, met as 1 g). Featherstone's solver only
    (its steps are the explicit ones these bounds are for).
    """
    simulation, dofs = env.simulation, int(env.dofs)
    try:
        model = simulation.model
        linear, angular, poses, _ = jacobians
        bodies = poses.shape[0]
        masses = model.body_mass.numpy()[:bodies].astype(np.float64)
        inertias = model.body_inertia.numpy()[:bodies].astype(np.float64)
        matrix = np.zeros((dofs, dofs))
        for body in range(bodies):
            turn = np.stack([_rotate(poses[body, 3:], axis) for axis in np.eye(3)], axis=1)
            inertia = turn @ inertias[body] @ turn.T
            matrix += masses[body] * linear[body].T @ linear[body]
            matrix += angular[body].T @ inertia @ angular[body]
        armature = getattr(simulation.solver, "joint_armature_effective", model.joint_armature)
        matrix += np.diag(armature.numpy()[:dofs].astype(np.float64))  # added at the factoring
    except Exception:  # noqa: BLE001 - a hint is best effort: fall back to the bare bound
        return None
    return matrix if np.all(np.isfinite(matrix)) else None


def _joint_of_dof(model: Any, dof: int) -> str:
    starts = model.joint_qd_start.numpy()
    joint = int(np.searchsorted(starts, dof, side="right") - 1)
    return str(model.joint_label[joint]).rsplit("/", 1)[-1]
