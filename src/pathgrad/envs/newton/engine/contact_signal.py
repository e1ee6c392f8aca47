"""Per-body contact wrenches and accelerations of a Featherstone step (AHAC's signal).

Two frames (``frame``):

- ``"world_origin"`` (default; dflex's, which AHAC's threshold ``C`` was set
  in): spatial vectors about the world origin. The wrench's torque is
  ``tau_com + x_com x f``, so it grows with the distance from the origin; the
  acceleration is Featherstone's velocity-product recurrence ``a_s`` (dflex's
  ``body_a_s``: ``a_parent + v x v_joint``, no joint accelerations, 0 for a
  floating root) of the step's last substep, moved from the solver's frame to
  the world origin.
- ``"body"``: each wrench about its body's centre of mass, and the bodies'
  true accelerations (the change of their COM twists over the step / ``dt``).

Newton's ``update_contacts`` is not implemented for Featherstone, so the
contact wrench of each body is taken as dflex does, as the difference of its
external wrench around the contact evaluation: Featherstone adds the contact
wrenches to the wrench it was given (``state.body_f`` plus the wrenches of
free joints' generalized forces), then converts the sum in place
(``eval_rigid_tau``); the conversion is undone here and what was given is
subtracted. The wrench of a step is the mean over its substeps (the mean
force over the step, as its impulse over ``dt``). Both are read from the
forward step's buffers by kernels that write only their own: no gradient
path, no change to the step.
"""

from __future__ import annotations

from typing import Any

import newton
import torch
import warp as wp

__all__ = ["CONTACT_SIGNAL_FRAMES", "ContactSignal"]

CONTACT_SIGNAL_FRAMES = ("world_origin", "body")


@wp.func
def _moment_point(com: wp.vec3, about_origin: int) -> wp.vec3:
    """The point a wrench's torque is taken about: the world origin, or the body's COM."""
    if about_origin != 0:
        return wp.vec3(0.0)
    return com


@wp.kernel(enable_backward=False)
def _add_contact_wrench(
    body_f_converted: wp.array[wp.spatial_vector],
    body_q_com: wp.array[wp.transform],
    body_solve_origin: wp.array[wp.vec3],
    body_f_given: wp.array[wp.spatial_vector],
    scale: float,
    about_origin: int,
    total: wp.array[wp.spatial_vector],
):
    """``total += scale (external wrench after contacts - wrench given)`` per body, its
    torque about :func:`_moment_point` (the converted wrench's is about the solve origin,
    the given one's about the COM)."""
    body = wp.tid()
    converted = body_f_converted[body]
    com = wp.transform_get_translation(body_q_com[body])
    point = _moment_point(com, about_origin)
    force = -wp.spatial_top(converted)
    torque = -wp.spatial_bottom(converted) - wp.cross(point - body_solve_origin[body], force)
    given = body_f_given[body]
    given_force = wp.spatial_top(given)
    given_torque = wp.spatial_bottom(given) + wp.cross(com - point, given_force)
    change = wp.spatial_vector(force - given_force, torque - given_torque)
    total[body] = total[body] + scale * change


@wp.kernel(enable_backward=False)
def _bias_acceleration_at_origin(
    body_a_s: wp.array[wp.spatial_vector],
    body_solve_origin: wp.array[wp.vec3],
    acceleration: wp.array[wp.spatial_vector],
):
    """Featherstone's ``a_s`` (linear, angular; about the solve origin), about the world origin."""
    body = wp.tid()
    a = body_a_s[body]
    angular = wp.spatial_bottom(a)
    origin = body_solve_origin[body]
    acceleration[body] = wp.spatial_vector(wp.spatial_top(a) + wp.cross(origin, angular), angular)


@wp.kernel(enable_backward=False)
def _remove_free_joint_wrench(
    joint_type: wp.array[int],
    joint_child: wp.array[int],
    joint_qd_start: wp.array[int],
    joint_f: wp.array[float],
    body_q_com: wp.array[wp.transform],
    free: int,
    distance: int,
    scale: float,
    about_origin: int,
    total: wp.array[wp.spatial_vector],
):
    """Take the wrench of a free (or distance) joint's generalized force off its child."""
    joint = wp.tid()
    kind = joint_type[joint]
    if kind != free and kind != distance:
        return
    start = joint_qd_start[joint]
    child = joint_child[joint]
    force = wp.vec3(joint_f[start + 0], joint_f[start + 1], joint_f[start + 2])
    torque = wp.vec3(joint_f[start + 3], joint_f[start + 4], joint_f[start + 5])
    com = wp.transform_get_translation(body_q_com[child])
    torque = torque + wp.cross(com - _moment_point(com, about_origin), force)  # COM -> point
    total[child] = total[child] - scale * wp.spatial_vector(force, torque)


class ContactSignal:
    """Accumulates one forward step's contact wrenches; reads them and the accelerations.

    Args:
        model: The finalized Newton model (all worlds).
        solver: Its ``SolverFeatherstone`` (the forward step's buffers live on it).
        substeps: Solver steps per env step.
        dt: Duration of one env step (s).
        frame: ``"world_origin"`` (dflex's) or ``"body"`` (see the module docstring).

    Raises:
        ValueError: For another ``frame``.
    """

    def __init__(
        self, model: Any, solver: Any, substeps: int, dt: float, frame: str = "world_origin"
    ) -> None:
        if frame not in CONTACT_SIGNAL_FRAMES:
            raise ValueError(
                f"contact_signal_frame must be one of {list(CONTACT_SIGNAL_FRAMES)}, got {frame!r}."
            )
        self.model = model
        self.solver = solver
        self.frame = frame
        self.scale = 1.0 / int(substeps)
        self.dt = float(dt)
        self.total = wp.zeros(model.body_count, dtype=wp.spatial_vector, device=model.device)
        self._total = wp.to_torch(self.total, requires_grad=False)
        self.acceleration = wp.zeros(model.body_count, dtype=wp.spatial_vector, device=model.device)
        self._acceleration = wp.to_torch(self.acceleration, requires_grad=False)

    @property
    def _about_origin(self) -> int:
        return int(self.frame == "world_origin")

    def start(self) -> None:
        """Zero the step's sum (a Warp operation: it joins the captured step)."""
        self.total.zero_()

    def add_substep(self, state_in: Any, control: Any) -> None:
        """Add the contact wrenches of the substep that just ran from ``state_in``."""
        model, solver = self.model, self.solver
        wp.launch(
            _add_contact_wrench,
            dim=model.body_count,
            inputs=[
                solver.body_f_ext,
                solver.body_q_com,
                solver.body_solve_origin,
                state_in.body_f,
                self.scale,
                self._about_origin,
            ],
            outputs=[self.total],
            device=model.device,
            record_tape=False,
        )
        if model.joint_count:
            wp.launch(
                _remove_free_joint_wrench,
                dim=model.joint_count,
                inputs=[
                    model.joint_type,
                    model.joint_child,
                    model.joint_qd_start,
                    control.joint_f,
                    solver.body_q_com,
                    int(newton.JointType.FREE),
                    int(newton.JointType.DISTANCE),
                    self.scale,
                    self._about_origin,
                ],
                outputs=[self.total],
                device=model.device,
                record_tape=False,
            )

    def finish(self) -> None:
        """After the step's last substep: keep its velocity-product acceleration (world origin)."""
        if self.frame != "world_origin":
            return
        wp.launch(
            _bias_acceleration_at_origin,
            dim=self.model.body_count,
            inputs=[self.solver.body_a_s, self.solver.body_solve_origin],
            outputs=[self.acceleration],
            device=self.model.device,
            record_tape=False,
        )

    def read(self, first: Any, last: Any, num_envs: int) -> dict[str, torch.Tensor]:
        """``contact_forces`` and ``accelerations`` ``[num_envs, bodies, 6]`` of the last step.

        ``first`` and ``last``: the step's first and last states (their body twists,
        for the ``body`` frame's accelerations).
        """
        if self.frame == "world_origin":
            accelerations = self._acceleration.clone()
        else:
            start = wp.to_torch(first.body_qd, requires_grad=False)
            end = wp.to_torch(last.body_qd, requires_grad=False)
            accelerations = (end - start) / self.dt
        return {
            "contact_forces": self._total.reshape(num_envs, -1, 6).clone(),
            "accelerations": accelerations.reshape(num_envs, -1, 6),
        }
