"""Per-body contact wrenches and accelerations of a Featherstone step (AHAC's signal).

Newton's ``update_contacts`` is not implemented for Featherstone, so the
contact wrench of each body is taken as dflex does, as the difference of its
external wrench around the contact evaluation: Featherstone adds the contact
wrenches to the wrench it was given (``state.body_f`` plus the wrenches of
free joints' generalized forces), then converts the sum in place
(``eval_rigid_tau``); the conversion is undone here and what was given is
subtracted. The wrench of a step is the mean over its substeps (the mean
force over the step, as its impulse over ``dt``); the acceleration is the
change of the body twists (COM linear velocity, angular velocity, world frame)
over the step divided by ``dt``. Both are read from the forward step's buffers
by kernels that write only their own: no gradient path, no change to the step.
"""

from __future__ import annotations

from typing import Any

import newton
import torch
import warp as wp

__all__ = ["ContactSignal"]


@wp.kernel(enable_backward=False)
def _add_contact_wrench(
    body_f_converted: wp.array[wp.spatial_vector],
    body_q_com: wp.array[wp.transform],
    body_solve_origin: wp.array[wp.vec3],
    body_f_given: wp.array[wp.spatial_vector],
    scale: float,
    total: wp.array[wp.spatial_vector],
):
    """``total += scale (external wrench after contacts - wrench given)`` per body."""
    body = wp.tid()
    converted = body_f_converted[body]
    force = -wp.spatial_top(converted)
    arm = wp.transform_get_translation(body_q_com[body]) - body_solve_origin[body]
    torque = -wp.spatial_bottom(converted) - wp.cross(arm, force)
    total[body] = total[body] + scale * (wp.spatial_vector(force, torque) - body_f_given[body])


@wp.kernel(enable_backward=False)
def _remove_free_joint_wrench(
    joint_type: wp.array[int],
    joint_child: wp.array[int],
    joint_qd_start: wp.array[int],
    joint_f: wp.array[float],
    free: int,
    distance: int,
    scale: float,
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
    total[child] = total[child] - scale * wp.spatial_vector(force, torque)


class ContactSignal:
    """Accumulates one forward step's contact wrenches; reads them and the accelerations.

    Args:
        model: The finalized Newton model (all worlds).
        solver: Its ``SolverFeatherstone`` (the forward step's buffers live on it).
        substeps: Solver steps per env step.
        dt: Duration of one env step (s).
    """

    def __init__(self, model: Any, solver: Any, substeps: int, dt: float) -> None:
        self.model = model
        self.solver = solver
        self.scale = 1.0 / int(substeps)
        self.dt = float(dt)
        self.total = wp.zeros(model.body_count, dtype=wp.spatial_vector, device=model.device)
        self._total = wp.to_torch(self.total, requires_grad=False)

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
                    int(newton.JointType.FREE),
                    int(newton.JointType.DISTANCE),
                    self.scale,
                ],
                outputs=[self.total],
                device=model.device,
                record_tape=False,
            )

    def read(self, first: Any, last: Any, num_envs: int) -> dict[str, torch.Tensor]:
        """``contact_forces`` and ``accelerations`` ``[num_envs, bodies, 6]`` of the last step.

        ``first`` and ``last``: the step's first and last states (their body twists).
        """
        start = wp.to_torch(first.body_qd, requires_grad=False)
        end = wp.to_torch(last.body_qd, requires_grad=False)
        return {
            "contact_forces": self._total.reshape(num_envs, -1, 6).clone(),
            "accelerations": ((end - start) / self.dt).reshape(num_envs, -1, 6),
        }
