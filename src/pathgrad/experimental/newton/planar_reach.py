"""NewtonPlanarReachEnv: a two-link arm in the plane steps its joints towards random targets.

pathgrad's version of the reference's FK-only Newton task (EmbodiChain,
``embodichain.learning.rl.experimental.newton``), rebuilt from its facts:

- Model: per env a Newton world of two revolute links about z, hanging along -y
  at zero angles (``first_link_length`` 1.0 m, ``second_link_length`` 0.8 m), no
  gravity; only forward kinematics (``newton.eval_fk``) is evaluated, never dynamics.
- Action ``[N, 2]`` in ``[-1, 1]`` (larger actions are clamped): a joint change of
  ``action_scale`` rad per unit; the new angles are clamped to ``±joint_limit``.
- Reward: minus the squared distance of the end link's frame to the target (x, y).
- Observation (8): joint angles, end-link x and y, target x and y, the last
  (clamped) action.
- ``terminated`` when the distance falls below ``success_threshold``;
  ``truncated`` at ``max_episode_steps``; finished rows reset inside ``step`` and
  their observation is the next episode's first.
- Reset: angles uniform in ``±initial_joint_scale * joint_limit``; the target is
  the end-link position of angles uniform in ``±target_joint_scale * joint_limit``
  (so every target is reachable).

Gradients flow through the clamps and through Newton's FK adjoint
(:class:`~pathgrad.envs.newton.engine.kinematics.NewtonBodyPoses`), so reward and
observation are differentiable in the action and in the carried joint angles.
Beyond the reference, ``step`` gives pathgrad's ``info["final_observation"]`` and
``info["metrics"]``, and the env has ``max_episode_steps`` and ``state_dict()``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import newton
import numpy as np
import torch
import warp as wp
from gymnasium.spaces import Box

from pathgrad.envs.newton.engine.kinematics import NewtonBodyPoses, NewtonKinematics
from pathgrad.utils import configclass

__all__ = ["NewtonPlanarReachEnv", "NewtonPlanarReachEnvCfg", "make_newton_planar_reach_env"]

NUM_JOINTS = 2
OBSERVATION_DIM = 8
END_LINK = "planar_end_link"
_STATE_KEYS = ("joint_q", "end_xy", "target_xy", "last_action", "step_count")


@configclass
class NewtonPlanarReachEnvCfg:
    """Settings of :class:`NewtonPlanarReachEnv` (the reference's fields and defaults).

    Attributes:
        num_envs: Rows of the batch, one Newton world each.
        device: Torch device; the Newton model lives on the same one.
        action_scale: Joint change (rad) per unit action.
        joint_limit: Bound (rad) of both joint angles, ``[-joint_limit, joint_limit]``.
        max_episode_steps: Episode length before truncation.
        success_threshold: Distance (m) below which an episode terminates.
        first_link_length: Length (m) of the link at the base.
        second_link_length: Length (m) of the end link.
        initial_joint_scale: Initial angles are uniform in ``±scale * joint_limit``.
        target_joint_scale: Target angles are uniform in ``±scale * joint_limit``.
    """

    num_envs: int = 4
    device: str = "cpu"
    action_scale: float = 0.2
    joint_limit: float = float(np.pi)
    max_episode_steps: int = 32
    success_threshold: float = 0.05
    first_link_length: float = 1.0
    second_link_length: float = 0.8
    initial_joint_scale: float = 0.5
    target_joint_scale: float = 1.0


class NewtonPlanarReachEnv:
    """A batch of planar two-link reaches on Newton's forward kinematics (module docstring).

    Args:
        cfg: The settings (defaults when ``None``).

    Raises:
        ValueError: If ``num_envs`` or ``max_episode_steps`` is not positive, or
            ``joint_limit`` is not positive and finite.
    """

    observation_dim = OBSERVATION_DIM
    action_dim = NUM_JOINTS
    dtype = torch.float32

    def __init__(self, cfg: NewtonPlanarReachEnvCfg | None = None) -> None:
        self.cfg = cfg if cfg is not None else NewtonPlanarReachEnvCfg()
        if self.cfg.num_envs <= 0:
            raise ValueError("num_envs must be positive.")
        if self.cfg.max_episode_steps <= 0:
            raise ValueError("max_episode_steps must be positive.")
        if not 0.0 < self.cfg.joint_limit < math.inf:
            raise ValueError(
                f"joint_limit must be positive and finite, got {self.cfg.joint_limit}."
            )
        self.num_envs = int(self.cfg.num_envs)
        self.device = torch.device(self.cfg.device)
        self.single_observation_space = Box(-np.inf, np.inf, (OBSERVATION_DIM,), np.float32)
        self.single_action_space = Box(-1.0, 1.0, (NUM_JOINTS,), np.float32)
        self._model, self._end_bodies = self._build_model()
        self._kinematics = NewtonKinematics(self._model)
        pairs = (self.num_envs, NUM_JOINTS)
        self._joint_q, self._end_xy, self._target_xy, self._last_action = (
            torch.zeros(pairs, dtype=torch.float32, device=self.device) for _ in range(4)
        )
        self._step_count = torch.zeros(self.num_envs, dtype=torch.int32, device=self.device)
        self._generator = torch.Generator(device=self.device)

    @property
    def max_episode_steps(self) -> int:
        """The episode length (``cfg.max_episode_steps``), as pathgrad's env contract names it."""
        return int(self.cfg.max_episode_steps)

    def reset(
        self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Start a new episode in every row (seeding the env's generator when ``seed`` is given)."""
        del options
        if seed is not None:
            self._generator.manual_seed(int(seed))
        self.detach_state()
        self._reset_rows(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return self._observation(), {}

    def step(
        self, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Move the joints by ``action * action_scale`` and score the new end-link position.

        Raises:
            ValueError: If ``action`` is not ``[num_envs, 2]``.
        """
        action = torch.as_tensor(action)
        expected = (self.num_envs, NUM_JOINTS)
        if tuple(action.shape) != expected:
            raise ValueError(f"Expected action shape {expected}, got {tuple(action.shape)}.")
        action = action.to(device=self.device, dtype=torch.float32).clamp(-1.0, 1.0)
        limit = float(self.cfg.joint_limit)
        joint_q = (self._joint_q + action * self.cfg.action_scale).clamp(-limit, limit)
        end_xy = self._end_link_xy(joint_q)
        offset = end_xy - self._target_xy
        reward = -offset.square().sum(dim=-1)
        distance = torch.linalg.vector_norm(offset.detach(), dim=-1)

        self._joint_q, self._end_xy, self._last_action = joint_q, end_xy, action
        self._step_count += 1
        terminated = distance < self.cfg.success_threshold
        truncated = self._step_count >= self.cfg.max_episode_steps
        observation = self._observation()
        info = {
            "distance": distance,
            "success": terminated,
            "final_observation": observation,
            "metrics": {"final_distance": distance, "success": terminated},
        }
        done = terminated | truncated
        if bool(done.any()):
            self._reset_rows(done)
            observation = torch.where(done.unsqueeze(-1), self._observation(), observation)
        return observation, reward, terminated, truncated, info

    def detach_state(self) -> torch.Tensor:
        """Cut the graph of the carried state; return the current observation (detached)."""
        self._joint_q = self._joint_q.detach()
        self._end_xy = self._end_xy.detach()
        self._last_action = self._last_action.detach()
        return self._observation().detach()

    def state_dict(self) -> dict[str, Any]:
        """The carried state and the generator, for an exact resume."""
        state = {key: getattr(self, f"_{key}").detach().clone() for key in _STATE_KEYS}
        return {**state, "generator": self._generator.get_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved.

        Raises:
            KeyError: Naming the first entry the state lacks.
        """
        for key in (*_STATE_KEYS, "generator"):
            if key not in state:
                raise KeyError(f"NewtonPlanarReachEnv.load_state_dict: the state has no '{key}'.")
        for key in _STATE_KEYS:
            current = getattr(self, f"_{key}")
            setattr(self, f"_{key}", state[key].to(device=self.device, dtype=current.dtype).clone())
        self._generator.set_state(state["generator"].cpu())

    # Internals ---------------------------------------------------------------------------

    def _build_model(self) -> tuple[Any, torch.Tensor]:
        """One world per row of the arm; the end link's body index in each."""
        cfg = self.cfg
        # Newton >= 1.8 takes gravity as a vector only (a scalar raises ValueError).
        no_gravity = (0.0, 0.0, 0.0)
        arm = newton.ModelBuilder(up_axis=newton.Axis.Y, gravity=no_gravity)
        at_origin = wp.transform(wp.vec3(0.0, 0.0, 0.0), wp.quat_identity())
        parent, joints = -1, []
        for label, length in (
            ("planar_first_link", cfg.first_link_length),
            (END_LINK, cfg.second_link_length),
        ):
            link = arm.add_link(label=label)
            arm.add_shape_sphere(link, radius=0.01)
            joints.append(
                arm.add_joint_revolute(
                    parent=parent,
                    child=link,
                    axis=newton.Axis.Z,
                    parent_xform=at_origin,  # the hinge sits at the parent link's frame
                    child_xform=wp.transform(wp.vec3(0.0, float(length), 0.0), wp.quat_identity()),
                    limit_lower=-float(cfg.joint_limit),
                    limit_upper=float(cfg.joint_limit),
                )
            )
            parent = link
        arm.add_articulation(joints)
        builder = newton.ModelBuilder(up_axis=newton.Axis.Y, gravity=no_gravity)
        builder.replicate(arm, self.num_envs)  # positional: `world_count` before 1.8, `copy_count`
        model = builder.finalize(device=str(self.device), requires_grad=True)
        ends = [index for index, label in enumerate(model.body_label) if END_LINK in str(label)]
        if len(ends) != self.num_envs:
            raise RuntimeError(f"Expected {self.num_envs} end links, found {len(ends)}.")
        return model, torch.tensor(ends, dtype=torch.long, device=self.device)

    def _end_link_xy(self, joint_q: torch.Tensor) -> torch.Tensor:
        """End-link ``(x, y)`` ``[N, 2]`` by Newton's FK, differentiable in ``joint_q``."""
        poses = NewtonBodyPoses.apply(self._kinematics, joint_q)
        return poses.reshape(-1, 7)[self._end_bodies, :2]

    def _reset_rows(self, rows: torch.Tensor) -> None:
        """Start new episodes in the rows set in ``rows`` (bool ``[N]``), out of place."""
        count = int(rows.sum())
        if count == 0:
            return
        initial_q = self._sample_joint_positions(count, self.cfg.initial_joint_scale)
        target_q = self._sample_joint_positions(count, self.cfg.target_joint_scale)
        mask = rows.unsqueeze(-1)
        fresh_q = torch.zeros_like(self._joint_q.detach())
        fresh_q[rows] = initial_q
        joint_q = torch.where(mask, fresh_q, self._joint_q)
        targets = self._target_xy.clone()
        targets[rows] = self._analytical_end_xy(target_q)
        with torch.no_grad():
            end_xy = self._kinematics.poses(joint_q).view(-1, 7)[self._end_bodies, :2]
        self._joint_q, self._target_xy = joint_q, targets
        self._end_xy = torch.where(mask, end_xy, self._end_xy)
        self._last_action = torch.where(mask, torch.zeros_like(fresh_q), self._last_action)
        self._step_count = self._step_count.masked_fill(rows, 0)

    def _sample_joint_positions(self, count: int, scale: float) -> torch.Tensor:
        unit = torch.rand((count, NUM_JOINTS), device=self.device, generator=self._generator)
        return (unit * 2.0 - 1.0) * (self.cfg.joint_limit * scale)

    def _analytical_end_xy(self, joint_q: torch.Tensor) -> torch.Tensor:
        """The model's closed-form FK (angles ``a``, ``b``; lengths ``l1``, ``l2``):
        ``x = l1 sin a + l2 sin(a + b)``, ``y = -l1 cos a - l2 cos(a + b)``."""
        first, both = joint_q[:, 0], joint_q[:, 0] + joint_q[:, 1]
        l1, l2 = self.cfg.first_link_length, self.cfg.second_link_length
        x = l1 * torch.sin(first) + l2 * torch.sin(both)
        y = -l1 * torch.cos(first) - l2 * torch.cos(both)
        return torch.stack([x, y], dim=-1)

    def _observation(self) -> torch.Tensor:
        return torch.cat([self._joint_q, self._end_xy, self._target_xy, self._last_action], dim=-1)


_DEFAULTS = NewtonPlanarReachEnvCfg()


def make_newton_planar_reach_env(
    num_envs: int = _DEFAULTS.num_envs,
    device: torch.device | str = _DEFAULTS.device,
    *,
    seed: int | None = None,
    action_scale: float = _DEFAULTS.action_scale,
    joint_limit: float = _DEFAULTS.joint_limit,
    max_episode_steps: int = _DEFAULTS.max_episode_steps,
    success_threshold: float = _DEFAULTS.success_threshold,
    first_link_length: float = _DEFAULTS.first_link_length,
    second_link_length: float = _DEFAULTS.second_link_length,
    initial_joint_scale: float = _DEFAULTS.initial_joint_scale,
    target_joint_scale: float = _DEFAULTS.target_joint_scale,
) -> NewtonPlanarReachEnv:
    """The registered env ``NewtonPlanarReach``: the config's fields as keyword arguments
    (``env.cfg`` of a run config), and ``seed`` for the env's generator."""
    env = NewtonPlanarReachEnv(
        NewtonPlanarReachEnvCfg(
            num_envs=num_envs,
            device=str(device),
            action_scale=action_scale,
            joint_limit=joint_limit,
            max_episode_steps=max_episode_steps,
            success_threshold=success_threshold,
            first_link_length=first_link_length,
            second_link_length=second_link_length,
            initial_joint_scale=initial_joint_scale,
            target_joint_scale=target_joint_scale,
        )
    )
    if seed is not None:
        env._generator.manual_seed(int(seed))
    return env
