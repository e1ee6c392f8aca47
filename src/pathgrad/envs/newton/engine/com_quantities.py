"""MuJoCo's com-based body quantities (``cinert``, ``cvel``, the mass centre) on Newton.

MuJoCo's "com-based" frame of a body is the world's axes moved to the centre of
mass of the body's kinematic tree (``subtree_com`` of its root body). Of each body:

- ``cinert`` (10 numbers): its inertia about that point in world axes
  (``xx, yy, zz, xy, xz, yz``: rotated principal inertia plus the parallel-axis
  term), ``m (com - c)`` and ``m``;
- ``cvel`` (6 numbers): its angular velocity and the linear velocity of its
  material point at ``c``, ``[rot; lin]``, both in world axes.

Here they are computed in torch from Newton's forward kinematics (``newton.eval_fk``
with the joint velocities, differentiated by a ``wp.Tape``) and the model's masses,
centres of mass and inertias, for a world of one kinematic tree (its mass centre is ``c``).
"""

from __future__ import annotations

from typing import Any

import torch
import warp as wp

from pathgrad.envs.newton.engine.kinematics import NewtonKinematics, rotate

__all__ = ["BodyMotion", "NewtonBodyMotion", "NewtonBodyTwists", "cinert", "cvel", "mass_centre"]


class NewtonBodyMotion(NewtonKinematics):
    """Forward kinematics of poses and COM twists (``newton.eval_fk`` with ``joint_qd``).

    Newton's twists are ``(v_com, omega)``, both in world axes.
    """

    def __init__(self, model: Any, capture: bool = True) -> None:
        super().__init__(model, capture)
        state = self._state
        self._joint_qd = state.joint_qd  # differentiated, not zero
        self._qd = wp.to_torch(state.joint_qd, requires_grad=False)
        self._body_qd = wp.to_torch(state.body_qd, requires_grad=False)
        self._grad_qd = wp.to_torch(state.joint_qd.grad, requires_grad=False)
        self._grad_body_qd = wp.to_torch(state.body_qd.grad, requires_grad=False)

    def _zero_adjoint(self) -> None:
        super()._zero_adjoint()
        self._state.joint_qd.grad.zero_()

    def motion(
        self, joint_q: torch.Tensor, joint_qd: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Body poses ``[bodies, 7]`` and twists ``[bodies, 6]`` of all worlds (flat, detached)."""
        self._q.copy_(joint_q.detach().reshape(-1))
        self._qd.copy_(joint_qd.detach().reshape(-1))
        self._run("fk", self._fk)
        return self._body_q.clone(), self._body_qd.clone()

    def motion_adjoint(
        self,
        joint_q: torch.Tensor,
        joint_qd: torch.Tensor,
        grad_body_q: torch.Tensor,
        grad_body_qd: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Adjoints of ``joint_q`` and ``joint_qd`` (flat) from those of the poses and twists."""
        self._q.copy_(joint_q.detach().reshape(-1))
        self._qd.copy_(joint_qd.detach().reshape(-1))
        self._grad_body_q.copy_(grad_body_q.reshape(self._grad_body_q.shape))
        self._grad_body_qd.copy_(grad_body_qd.reshape(self._grad_body_qd.shape))
        self._run("fk_adjoint", self._adjoint)
        grads = self._grad_q.clone(), self._grad_qd.clone()
        self._run("zero_fk_adjoint", self._zero_adjoint)
        return grads


class NewtonBodyTwists(torch.autograd.Function):
    """``(joint_q, joint_qd) -> (body_q [worlds, bodies, 7], body_qd [worlds, bodies, 6])``;
    one row per world of the model."""

    @staticmethod
    def forward(
        ctx: Any, motion: NewtonBodyMotion, joint_q: torch.Tensor, joint_qd: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.motion = motion
        ctx.save_for_backward(joint_q, joint_qd)
        body_q, body_qd = motion.motion(joint_q, joint_qd)
        worlds = joint_q.shape[0]
        return body_q.view(worlds, -1, 7), body_qd.view(worlds, -1, 6)

    @staticmethod
    def backward(ctx: Any, grad_q: torch.Tensor, grad_qd: torch.Tensor) -> tuple[Any, ...]:
        joint_q, joint_qd = ctx.saved_tensors
        grad_q = torch.zeros_like(ctx.motion._body_q) if grad_q is None else grad_q
        grad_qd = torch.zeros_like(ctx.motion._body_qd) if grad_qd is None else grad_qd
        dq, dqd = ctx.motion.motion_adjoint(
            joint_q, joint_qd, grad_q.contiguous(), grad_qd.contiguous()
        )
        return None, dq.view(joint_q.shape), dqd.view(joint_qd.shape)


class BodyMotion:
    """Body poses, COM positions and twists of up to ``num_envs`` states of a NewtonEnv.

    Args:
        env: A :class:`~pathgrad.envs.newton.base.NewtonEnv` (Featherstone).
    """

    def __init__(self, env: Any) -> None:
        model = env.simulation.model
        bodies = len(env.body_labels)
        self.env = env
        self.motion = NewtonBodyMotion(model, env.simulation.capture)
        device = env.device

        def first_world(array: Any) -> torch.Tensor:
            return torch.as_tensor(array.numpy()[:bodies], dtype=torch.float32, device=device)

        self.mass = first_world(model.body_mass)  # [B]
        self.com = first_world(model.body_com)  # [B, 3] in the body frame
        self.inertia = first_world(model.body_inertia)  # [B, 3, 3] about the COM, body axes

    def __call__(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``position``, ``quaternion`` (xyzw) of the body frames, ``com`` ``[n, B, 3]``,
        ``velocity`` (of the COM), ``angular`` ``[n, B, 3]``, world axes; differentiable."""
        env, joint_q, joint_qd = self.env, state["joint_q"], state["joint_qd"]
        num = joint_q.shape[0]
        if num > env.num_envs:
            raise ValueError(f"at most num_envs={env.num_envs} rows, got {num}.")
        pad = env.num_envs - num
        rows_q = torch.cat([joint_q, env.default_joint_q.expand(pad, -1)])
        rows_qd = torch.cat([joint_qd, env.default_joint_qd.expand(pad, -1)])
        poses, twists = NewtonBodyTwists.apply(self.motion, rows_q, rows_qd)
        poses, twists = poses[:num], twists[:num]
        position, quaternion = poses[..., :3], poses[..., 3:]
        return {
            "position": position,
            "quaternion": quaternion,
            "com": position + rotate(quaternion, self.com),
            "velocity": twists[..., :3],
            "angular": twists[..., 3:],
        }


def mass_centre(com: torch.Tensor, mass: torch.Tensor) -> torch.Tensor:
    """The mass-weighted mean ``[n, 3]`` of the bodies' centres of mass ``com [n, B, 3]``."""
    return (com * mass[:, None]).sum(-2) / mass.sum()


def _rotation_matrix(quaternion: torch.Tensor) -> torch.Tensor:
    """Rotation matrices ``[..., 3, 3]`` of unit quaternions ``[..., 4]`` (x, y, z, w)."""
    x, y, z, w = quaternion.unbind(-1)
    rows = (
        (1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)),
        (2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)),
        (2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)),
    )
    return torch.stack([torch.stack(row, -1) for row in rows], -2)


def cinert(motion: dict[str, torch.Tensor], inertia: torch.Tensor, mass: torch.Tensor,
           centre: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """MuJoCo's ``cinert`` ``[n, B, 10]`` about ``centre`` ``[n, 3]``: inertia
    (xx, yy, zz, xy, xz, yz) in world axes, ``m (com - centre)``, ``m``."""
    rotation = _rotation_matrix(motion["quaternion"])
    world = rotation @ inertia @ rotation.transpose(-1, -2)  # about the COM
    offset = motion["com"] - centre[:, None]
    m = mass.expand(offset.shape[:-1])
    eye = torch.eye(3, dtype=offset.dtype, device=offset.device)
    parallel = (
        offset.square().sum(-1)[..., None, None] * eye - offset[..., :, None] * offset[..., None, :]
    )
    about = world + m[..., None, None] * parallel
    six = torch.stack(
        [about[..., 0, 0], about[..., 1, 1], about[..., 2, 2],
         about[..., 0, 1], about[..., 0, 2], about[..., 1, 2]], -1,
    )  # fmt: skip
    return torch.cat([six, m[..., None] * offset, m[..., None]], -1)


def cvel(motion: dict[str, torch.Tensor], centre: torch.Tensor) -> torch.Tensor:
    """MuJoCo's ``cvel`` ``[n, B, 6]``: angular velocity and the linear velocity of each
    body's point at ``centre`` ``[n, 3]``, world axes."""
    angular = motion["angular"]
    lever = centre[:, None] - motion["com"]
    return torch.cat([angular, motion["velocity"] + torch.cross(angular, lever, dim=-1)], -1)
