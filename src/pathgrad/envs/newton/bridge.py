"""The autograd bridge between torch and a Newton simulation.

One env step is one :class:`torch.autograd.Function`: joint positions,
velocities and generalized forces (torch, ``[N, ...]``) go in, the joint
positions and velocities after ``substeps`` solver steps come out, copied out
of Warp's memory. Backward recomputes each substep from its saved input under
its own ``wp.Tape`` and backpropagates it at once, in reverse order: the
solver's shared buffers (Featherstone keeps its mass matrix and Cholesky
factors on the solver object, NVIDIA/warp#260) then always hold the values of
the substep being differentiated, and memory stays flat however long the
window (only each substep's input state is kept). Contacts are detected
outside the tape (collision detection is not differentiable: the contact set
is frozen per substep) and detected again, identically, during the recompute.
"""

from __future__ import annotations

from typing import Any

import newton
import torch
import warp as wp

__all__ = ["SOLVERS", "NewtonSimulation", "NewtonStep"]

# SolverSemiImplicit keeps maximal coordinates (body poses) that joint coordinates do
# not restore exactly, so its recompute would differ from the forward step: not yet.
SOLVERS = ("featherstone",)


class NewtonSimulation:
    """A finalized Newton model with its solver and the buffers one step needs.

    Args:
        model: A ``newton.Model`` finalized with ``requires_grad=True``.
        solver: ``featherstone`` (reduced coordinates; the only one so far).
        substeps: Solver steps per env step.
        dt: Duration of one env step (s); each substep lasts ``dt / substeps``.
        contacts: Detect contacts before every substep (ground, self-collision).
        solver_options: Keyword arguments of the solver's constructor.
    """

    def __init__(
        self,
        model: Any,
        *,
        solver: str = "featherstone",
        substeps: int = 1,
        dt: float,
        contacts: bool = False,
        solver_options: dict[str, Any] | None = None,
    ) -> None:
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {list(SOLVERS)}, got '{solver}'.")
        if int(substeps) <= 0:
            raise ValueError(f"substeps must be positive, got {substeps}.")
        if not dt > 0.0:
            raise ValueError(f"dt must be positive, got {dt}.")
        self.model = model
        self.substeps = int(substeps)
        self.substep_dt = float(dt) / self.substeps
        self.uses_contacts = bool(contacts)
        options = dict(solver_options or {})
        self.solver = newton.solvers.SolverFeatherstone(model, **options)
        self.coordinates = int(model.joint_coord_count)
        self.dofs = int(model.joint_dof_count)
        # Forward: one state per substep boundary. Backward: one reusable pair.
        self._states = [model.state(requires_grad=False) for _ in range(self.substeps + 1)]
        self._control = model.control(requires_grad=False)
        self._backward_in = model.state(requires_grad=True)
        self._backward_out = model.state(requires_grad=True)
        self._backward_control = model.control(requires_grad=True)
        self._collision = None
        self._contacts = None
        if self.uses_contacts:  # Newton's default pipeline (broad phase over explicit pairs)
            self._collision = newton.CollisionPipeline(model, broad_phase="explicit")
            self._contacts = self._collision.contacts()

    def _prepare(self, state: Any, joint_q: torch.Tensor, joint_qd: torch.Tensor) -> None:
        """Load joint coordinates into ``state`` and bring its bodies up to date."""
        wp.copy(state.joint_q, wp.from_torch(joint_q.detach().reshape(-1).contiguous()))
        wp.copy(state.joint_qd, wp.from_torch(joint_qd.detach().reshape(-1).contiguous()))
        state.clear_forces()
        if self.uses_contacts:  # collision detection reads the body poses
            newton.eval_fk(self.model, state.joint_q, state.joint_qd, state)

    def _substep(self, state_in: Any, state_out: Any, control: Any) -> None:
        contacts = None
        if self._contacts is not None:
            self._collision.collide(state_in, self._contacts)
            contacts = self._contacts
        self.solver.step(state_in, state_out, control, contacts, self.substep_dt)

    def forward(
        self, joint_q: torch.Tensor, joint_qd: torch.Tensor, joint_f: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Step without a tape; also return each substep's input, for the backward pass."""
        wp.copy(self._control.joint_f, wp.from_torch(joint_f.detach().reshape(-1).contiguous()))
        self._prepare(self._states[0], joint_q, joint_qd)
        inputs = [(joint_q.detach(), joint_qd.detach())]
        for k in range(self.substeps):
            state_in, state_out = self._states[k], self._states[k + 1]
            if k > 0:
                state_in.clear_forces()
            self._substep(state_in, state_out, self._control)
            q_out = wp.to_torch(state_out.joint_q).clone()
            qd_out = wp.to_torch(state_out.joint_qd).clone()
            inputs.append((q_out, qd_out))
        q_final, qd_final = inputs.pop()
        return q_final, qd_final, inputs

    def backward(
        self,
        inputs: list[tuple[torch.Tensor, torch.Tensor]],
        joint_f: torch.Tensor,
        grad_q: torch.Tensor,
        grad_qd: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Adjoints of the step's inputs from those of its outputs, substep by substep."""
        state_in, state_out, control = self._backward_in, self._backward_out, self._backward_control
        wp.copy(control.joint_f, wp.from_torch(joint_f.detach().reshape(-1).contiguous()))
        grad_f = torch.zeros(self.dofs, dtype=grad_q.dtype, device=grad_q.device)
        grad_q, grad_qd = grad_q.reshape(-1), grad_qd.reshape(-1)
        for q_in, qd_in in reversed(inputs):
            self._prepare(state_in, q_in, qd_in)
            tape = wp.Tape()
            with tape:
                self._substep(state_in, state_out, control)
            tape.backward(
                grads={
                    state_out.joint_q: wp.from_torch(grad_q.contiguous()),
                    state_out.joint_qd: wp.from_torch(grad_qd.contiguous()),
                }
            )
            grad_q = wp.to_torch(state_in.joint_q.grad).clone()
            grad_qd = wp.to_torch(state_in.joint_qd.grad).clone()
            grad_f = grad_f + wp.to_torch(control.joint_f.grad)
            tape.zero()
        return grad_q, grad_qd, grad_f


class NewtonStep(torch.autograd.Function):
    """``(joint_q, joint_qd, joint_f) -> (joint_q', joint_qd')`` through a simulation."""

    @staticmethod
    def forward(
        ctx: Any,
        simulation: NewtonSimulation,
        joint_q: torch.Tensor,
        joint_qd: torch.Tensor,
        joint_f: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        q, qd, inputs = simulation.forward(joint_q, joint_qd, joint_f)
        ctx.simulation = simulation
        ctx.inputs = inputs
        ctx.shapes = (joint_q.shape, joint_qd.shape, joint_f.shape)
        ctx.save_for_backward(joint_f)
        return q.reshape(joint_q.shape), qd.reshape(joint_qd.shape)

    @staticmethod
    def backward(ctx: Any, grad_q: torch.Tensor, grad_qd: torch.Tensor) -> tuple[Any, ...]:
        (joint_f,) = ctx.saved_tensors
        q_shape, qd_shape, f_shape = ctx.shapes
        gq, gqd, gf = ctx.simulation.backward(ctx.inputs, joint_f, grad_q, grad_qd)
        return None, gq.reshape(q_shape), gqd.reshape(qd_shape), gf.reshape(f_shape)
