"""The torch autograd functions of one env step through a :class:`NewtonSimulation`.

``simulation.forward`` steps without a tape and returns each substep's input;
``simulation.backward`` turns the output adjoints into the input adjoints
(:mod:`pathgrad.envs.newton.engine.bridge`).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["NewtonBodyStep", "NewtonStep"]


class NewtonStep(torch.autograd.Function):
    """``(joint_q, joint_qd, joint_f) -> (joint_q', joint_qd')`` through a simulation
    whose carried coordinates are the joint ones (``featherstone``)."""

    @staticmethod
    def forward(
        ctx: Any,
        simulation: Any,
        joint_q: torch.Tensor,
        joint_qd: torch.Tensor,
        joint_f: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        q, qd, inputs = simulation.forward(joint_q, joint_qd, joint_f, any(ctx.needs_input_grad))
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


class NewtonBodyStep(torch.autograd.Function):
    """``(body_q, body_qd, joint_f) -> (body_q', body_qd', joint_q', joint_qd')`` through
    a simulation that carries body coordinates (``semi_implicit``); the joint
    coordinates are Newton's inverse kinematics of the resulting bodies."""

    @staticmethod
    def forward(
        ctx: Any,
        simulation: Any,
        body_q: torch.Tensor,
        body_qd: torch.Tensor,
        joint_f: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        x, v, q, qd, inputs = simulation.forward(
            body_q, body_qd, joint_f, any(ctx.needs_input_grad)
        )
        ctx.simulation = simulation
        ctx.inputs = inputs
        ctx.final = (x, v)
        ctx.shapes = (body_q.shape, body_qd.shape, joint_f.shape)
        ctx.save_for_backward(joint_f)
        rows = body_q.shape[0]
        x, v = x.reshape(body_q.shape), v.reshape(body_qd.shape)
        return x, v, q.view(rows, -1), qd.view(rows, -1)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        (joint_f,) = ctx.saved_tensors
        x_shape, v_shape, f_shape = ctx.shapes
        grad_x, grad_v, grad_q, grad_qd = grads
        gx, gv, gf = ctx.simulation.backward(
            ctx.inputs, joint_f, grad_x, grad_v, (*ctx.final, grad_q, grad_qd)
        )
        return None, gx.reshape(x_shape), gv.reshape(v_shape), gf.reshape(f_shape)
