"""Body poses of joint coordinates in torch, by Newton's forward kinematics.

:class:`NewtonKinematics` evaluates ``newton.eval_fk`` on buffers allocated
once and backpropagates it under a ``wp.Tape`` (both captured as Warp graphs,
as the step's bridge does); :class:`NewtonBodyPoses` is the autograd function
``joint_q [N, coordinates] -> body_q [N, bodies, 7]``.

Conventions (Newton's): a pose is the world transform of the body's frame
(not its centre of mass), position then quaternion ``(x, y, z, w)``; a hinge
angle ``q`` rotates the child about the joint axis by ``q`` (right hand).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import newton
import torch
import warp as wp

from pathgrad.envs.base import State
from pathgrad.envs.newton.engine.bridge import run_captured, torch_ordered_stream

__all__ = [
    "BodyPoses",
    "NewtonBodyPoses",
    "NewtonKinematics",
    "quat_conjugate",
    "quat_multiply",
    "rotate",
]


class NewtonKinematics:
    """Forward kinematics of every world of a model (``requires_grad=True``) and its adjoint.

    Args:
        model: A finalized ``newton.Model``.
        capture: Replay the Warp operations as captured graphs.
    """

    def __init__(self, model: Any, capture: bool = True) -> None:
        self.model, self.capture = model, bool(capture)
        self.stream = torch_ordered_stream(model.device)
        self._state = state = model.state(requires_grad=True)
        self._joint_qd = wp.zeros_like(state.joint_qd)  # poses do not depend on velocities
        self._q = wp.to_torch(state.joint_q, requires_grad=False)
        self._body_q = wp.to_torch(state.body_q, requires_grad=False)
        self._grad_q = wp.to_torch(state.joint_q.grad, requires_grad=False)
        self._grad_body_q = wp.to_torch(state.body_q.grad, requires_grad=False)
        self._graphs: dict[str, Any] = {}
        self._tape: Any = None

    def _run(self, name: str, operations: Any) -> None:
        run_captured(self._graphs, name, operations, self.model.device, self.stream, self.capture)

    def _fk(self) -> None:
        newton.eval_fk(self.model, self._state.joint_q, self._joint_qd, self._state)

    def _adjoint(self) -> None:
        self._tape = wp.Tape()
        with self._tape:
            self._fk()
        self._tape.backward()

    def _zero_adjoint(self) -> None:
        self._tape.zero()
        for array in (self._state.joint_q, self._state.body_q, self._state.body_qd):
            array.grad.zero_()

    def poses(self, joint_q: torch.Tensor) -> torch.Tensor:
        """Body poses ``[bodies, 7]`` of all worlds' joint coordinates (flat, detached)."""
        self._q.copy_(joint_q.detach().reshape(-1))
        self._run("fk", self._fk)
        return self._body_q.clone()

    def joint_adjoint(self, joint_q: torch.Tensor, grad_body_q: torch.Tensor) -> torch.Tensor:
        """The adjoint of ``joint_q`` (flat) from that of the poses at ``joint_q``."""
        self._q.copy_(joint_q.detach().reshape(-1))
        self._grad_body_q.copy_(grad_body_q.reshape(self._grad_body_q.shape))
        self._run("fk_adjoint", self._adjoint)
        grad = self._grad_q.clone()
        self._run("zero_fk_adjoint", self._zero_adjoint)
        return grad


class NewtonBodyPoses(torch.autograd.Function):
    """``joint_q [worlds, coordinates] -> body_q [worlds, bodies, 7]`` by ``newton.eval_fk``;
    ``joint_q`` must hold one row per world of the model."""

    @staticmethod
    def forward(ctx: Any, kinematics: NewtonKinematics, joint_q: torch.Tensor) -> torch.Tensor:
        ctx.kinematics = kinematics
        ctx.save_for_backward(joint_q)
        return kinematics.poses(joint_q).view(joint_q.shape[0], -1, 7)

    @staticmethod
    def backward(ctx: Any, grad_poses: torch.Tensor) -> tuple[Any, ...]:
        (joint_q,) = ctx.saved_tensors
        grad = ctx.kinematics.joint_adjoint(joint_q, grad_poses.contiguous())
        return None, grad.view(joint_q.shape)


def rotate(quaternion: torch.Tensor, vector: torch.Tensor) -> torch.Tensor:
    """``vector`` ``[..., 3]`` rotated by unit quaternions ``[..., 4]`` (x, y, z, w)."""
    axis, w = quaternion[..., :3], quaternion[..., 3:]
    twice = 2.0 * torch.linalg.cross(axis, vector.expand_as(axis), dim=-1)
    return vector + w * twice + torch.linalg.cross(axis, twice, dim=-1)


def quat_multiply(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton products of x y z w quaternions ``[..., 4]``."""
    ax, ay, az, aw = a.unbind(-1)
    bx, by, bz, bw = b.unbind(-1)
    return torch.stack([aw * bx + ax * bw + ay * bz - az * by,
                        aw * by - ax * bz + ay * bw + az * bx,
                        aw * bz + ax * by - ay * bx + az * bw,
                        aw * bw - ax * bx - ay * by - az * bz], -1)  # fmt: skip


def quat_conjugate(quaternion: torch.Tensor) -> torch.Tensor:
    """The inverse rotations of unit x y z w quaternions ``[..., 4]``."""
    return torch.cat([-quaternion[..., :3], quaternion[..., 3:]], -1)


class BodyPoses:
    """A NewtonEnv's body poses and points of its state (differentiable)."""

    num_envs: int
    body_labels: list[str]
    default_joint_q: torch.Tensor
    simulation: Any
    _kinematics: NewtonKinematics | None

    def body_poses(self, state: State) -> tuple[torch.Tensor, torch.Tensor]:
        """World positions ``[n, bodies, 3]`` (m) and quaternions ``[n, bodies, 4]`` (xyzw)
        of every body's frame, differentiable with respect to ``state["joint_q"]``.

        Computed by ``newton.eval_fk`` (its adjoint by Warp's tape) for ``n`` up
        to ``num_envs`` rows; with ``solver="semi_implicit"`` the state's own
        ``body_q`` is returned. Bodies are in ``body_labels`` order.
        """
        if "body_q" in state:
            poses = state["body_q"].view(state["body_q"].shape[0], -1, 7)
            return poses[..., :3], poses[..., 3:]
        joint_q = state["joint_q"]
        num = joint_q.shape[0]
        if num > self.num_envs:
            raise ValueError(f"body_poses: at most num_envs={self.num_envs} rows, got {num}.")
        if self._kinematics is None:
            self._kinematics = NewtonKinematics(self.simulation.model, self.simulation.capture)
        pad = self.default_joint_q.to(joint_q.dtype).expand(self.num_envs - num, -1)
        poses = NewtonBodyPoses.apply(self._kinematics, torch.cat([joint_q, pad]))[:num]
        return poses[..., :3], poses[..., 3:]

    def body_point(self, state: State, body: str, offset: Sequence[float]) -> torch.Tensor:
        """World positions ``[n, 3]`` of the point at ``offset`` (m, in ``body``'s frame).

        ``body`` is a body label or its last ``/`` component (``"forearm"``).
        """
        index = self.body_index(body)
        positions, quaternions = self.body_poses(state)
        local = torch.as_tensor(offset, dtype=positions.dtype, device=positions.device)
        return positions[:, index] + rotate(quaternions[:, index], local)

    def body_index(self, body: str) -> int:
        """The index of the body labelled ``body`` (or with that last ``/`` component)."""
        matches = [
            i
            for i, label in enumerate(self.body_labels)
            if names_match(label, body)
        ]
        if len(matches) != 1:
            known = ", ".join(label.rsplit("/", 1)[-1] for label in self.body_labels)
            problem = "is ambiguous" if matches else "does not exist"
            raise ValueError(f"body '{body}' {problem}; bodies: {known}.")
        return matches[0]


def newton_label(name: str) -> str:
    """The label Newton's importers give a model file's ``name``: ``-`` becomes ``_``
    (``leg-0`` -> ``leg_0``), so a file's names are compared through this."""
    return name.replace("-", "_")


def names_match(label: str, name: str) -> bool:
    """Whether Newton's ``label`` (a path, ``.../forearm``) is what a user or a file calls
    ``name``: the whole label or its last ``/`` component, ``-`` read as ``_``."""
    return label in (name, newton_label(name)) or label.rsplit("/", 1)[-1] == newton_label(name)
