"""Gymnasium's MuJoCo locomotion tasks (v5) on Newton, from Gymnasium's own files.

The model file is the one the installed ``gymnasium`` package ships
(``gymnasium/envs/mujoco/assets/``), loaded at run time with MuJoCo's meaning
(:mod:`pathgrad.envs.newton.model_files.mujoco_meaning`: ``joint_q`` is MuJoCo's ``qpos``, the
file's gravity, masses, motors, ``ctrlrange`` and floor). On it, each task keeps
v5's definition: the observation (``qpos[1:]`` and ``qvel``, clipped to ±10
where v5 clips it), the reward (forward velocity of ``qpos[0]`` over the env step,
the healthy reward, the control cost of the action), the termination (v5's
healthy ranges), the reset noise and the frame skip (the env step is
``frame_skip`` x the file's timestep, split into ``substeps="auto"``).

Where the dynamics differ from MuJoCo's: Newton's contacts are penalty springs
(the floor's stiffness and damping from Newton's import, ke 2500 and kd 100
N/m, N s/m, with friction) where MuJoCo solves a soft constraint, so feet sink a
little and slide differently; with contacts off, one step's accelerations equal
MuJoCo's within 0.06% (``tests/envs/newton/test_mujoco_meaning.py``).
``benchmarks/gymnasium_side_by_side.py`` measures one rollout of a fixed action
sequence against MuJoCo's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from pathgrad.envs.base import State
from pathgrad.envs.newton.base import NewtonEnv

__all__ = ["GymnasiumHalfCheetah", "GymnasiumHopper", "GymnasiumLocomotion", "GymnasiumWalker2d"]


def gymnasium_asset(name: str) -> str:
    """The path of one of the MJCF files the installed ``gymnasium`` package ships."""
    import gymnasium

    path = Path(gymnasium.__file__).parent / "envs" / "mujoco" / "assets" / name
    if not path.is_file():
        raise FileNotFoundError(f"gymnasium {gymnasium.__version__} ships no '{name}' ({path}).")
    return str(path)


class GymnasiumLocomotion(NewtonEnv):
    """A v5 locomotion task on Newton: forward reward, healthy reward, control cost.

    Args:
        num_envs: Number of worlds.
        device: Torch device.
        forward_reward_weight, ctrl_cost_weight, healthy_reward,
        terminate_when_unhealthy, reset_noise_scale: v5's arguments, v5's defaults.
        **kwargs: NewtonEnv's (``substeps``, ``capture``, ``seed``, ...).
    """

    # Newton's limit constants and explicit damping: what its results were measured with
    joint_limits, implicit_damping, contact_softness = "newton", False, "newton"

    asset = ""
    frame_skip = 4
    observation_dim: int
    forward_reward_weight = 1.0
    ctrl_cost_weight = 1e-3
    healthy_reward = 1.0
    terminate_when_unhealthy = True
    reset_noise_scale = 5e-3
    clip_velocity: float | None = 10.0  # v5 clips qvel in the observation (not HalfCheetah)
    default_substeps: int | str = "auto"  # NewtonEnv's choice from the stiff terms' bounds

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", **kwargs: Any) -> None:
        for name in ("forward_reward_weight", "ctrl_cost_weight", "healthy_reward",
                     "terminate_when_unhealthy", "reset_noise_scale"):  # fmt: skip
            if name in kwargs:
                setattr(self, name, type(getattr(type(self), name))(kwargs.pop(name)))
        path = gymnasium_asset(self.asset)
        kwargs.setdefault("substeps", self.default_substeps)
        dt = self.frame_skip * self._file_timestep(path)
        super().__init__(num_envs, device, model_file=path, contacts=True, dt=dt, **kwargs)

    @property
    def initial_qpos(self) -> torch.Tensor:
        """MuJoCo's ``qpos0`` (the file's pose, every ``ref``)."""
        return self.mujoco_from_joint_state(
            self.default_joint_q[None], self.default_joint_qd[None]
        )[0][0]

    @property
    def initial_qvel(self) -> torch.Tensor:
        return torch.zeros_like(self.default_joint_qd)

    @staticmethod
    def _file_timestep(path: str) -> float:
        from pathgrad.envs.newton.model_files.mjcf_options import read_mjcf_options

        return read_mjcf_options(path).timestep or 0.002  # MuJoCo's default

    # MuJoCo's coordinates of a state ----------------------------------------------------

    def qpos_qvel(self, state: State) -> tuple[torch.Tensor, torch.Tensor]:
        """MuJoCo's ``qpos`` and ``qvel`` of ``state`` (differentiable)."""
        return self.mujoco_from_joint_state(state["joint_q"], state["joint_qd"])

    # Task ----------------------------------------------------------------------------

    def _sample_initial_state(self, num: int) -> State:
        """v5's reset: the file's pose and rest, plus uniform noise of ``reset_noise_scale``."""
        scale = self.reset_noise_scale
        qpos = self.initial_qpos + self._uniform(-scale, scale, num, self.initial_qpos.numel())
        qvel = self.initial_qvel + self._velocity_noise(num)
        joint_q, joint_qd = self.joint_state_from_mujoco(qpos, qvel)
        return {"joint_q": joint_q, "joint_qd": joint_qd}

    def _velocity_noise(self, num: int) -> torch.Tensor:
        scale = self.reset_noise_scale
        return self._uniform(-scale, scale, num, self.initial_qvel.numel())

    def _observe(self, state: State) -> torch.Tensor:
        qpos, qvel = self.qpos_qvel(state)
        if self.clip_velocity is not None:
            qvel = qvel.clamp(-self.clip_velocity, self.clip_velocity)
        return torch.cat([qpos[:, 1:], qvel], dim=-1)

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        before, _ = self.qpos_qvel(state)
        after, _ = self.qpos_qvel(next_state)
        x_velocity = (after[:, 0] - before[:, 0]) / self.dt
        healthy = self._healthy(next_state).to(x_velocity.dtype) * self.healthy_reward
        control = self.ctrl_cost_weight * action.square().sum(-1)
        return self.forward_reward_weight * x_velocity + healthy - control

    @property
    def _has_health(self) -> bool:
        return type(self)._healthy is not GymnasiumLocomotion._healthy

    def _healthy(self, state: State) -> torch.Tensor:
        """Rows in v5's healthy ranges (every row, for a task without any)."""
        return torch.ones(state["joint_q"].shape[0], dtype=torch.bool, device=self.device)

    def _terminated(self, state: State) -> torch.Tensor:
        if not (self.terminate_when_unhealthy and self._has_health):
            return torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return ~self._healthy(state)

    @property
    def _can_terminate(self) -> bool:
        return self._has_health and self.terminate_when_unhealthy

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        qpos, _ = self.qpos_qvel(state)
        return {"x_position": qpos[:, 0].detach()}


class GymnasiumHopper(GymnasiumLocomotion):
    """Hopper-v5 on Newton: hopper.xml, frame skip 4, healthy while the height stays above
    0.7, the torso angle within ±0.2 and every other state entry within ±100."""

    asset = "hopper.xml"
    observation_dim = 11

    def _healthy(self, state: State) -> torch.Tensor:
        qpos, qvel = self.qpos_qvel(state)
        rest = torch.cat([qpos[:, 2:], qvel], dim=-1)
        z, angle = qpos[:, 1], qpos[:, 2]
        return (
            ((rest > -100.0) & (rest < 100.0)).all(-1) & (z > 0.7) & (angle > -0.2) & (angle < 0.2)
        )


class GymnasiumWalker2d(GymnasiumLocomotion):
    """Walker2d-v5 on Newton: walker2d_v5.xml, frame skip 4, healthy while the height is in
    (0.8, 2) and the torso angle in (-1, 1)."""

    asset = "walker2d_v5.xml"
    observation_dim = 17

    def _healthy(self, state: State) -> torch.Tensor:
        qpos, _ = self.qpos_qvel(state)
        z, angle = qpos[:, 1], qpos[:, 2]
        return (z > 0.8) & (z < 2.0) & (angle > -1.0) & (angle < 1.0)


class GymnasiumHalfCheetah(GymnasiumLocomotion):
    """HalfCheetah-v5 on Newton: half_cheetah.xml, frame skip 5, no termination, control
    cost 0.1, reset noise 0.1 (uniform on qpos, normal on qvel), qvel not clipped; 36
    substeps by default (twice auto's: gradients through long windows stay bounded)."""

    asset = "half_cheetah.xml"
    frame_skip = 5
    observation_dim = 17
    ctrl_cost_weight = 0.1
    healthy_reward = 0.0
    terminate_when_unhealthy = False
    reset_noise_scale = 0.1
    clip_velocity = None
    # auto's 18 substeps (half the bound of the foot's limit spring) keep the steps finite,
    # but the gradient through a 32-step window grew to 1e8-1e17 (every SAPO update
    # non-finite); at 36, the window gradient norms are 7-84 (window_gradient_norms, seed 0).
    default_substeps = 36

    def _velocity_noise(self, num: int) -> torch.Tensor:
        normal = torch.randn(num, self.initial_qvel.numel(), generator=self.generator,
                             device=self.device, dtype=self.dtype)  # fmt: skip
        return self.reset_noise_scale * normal
