"""HorizonCurriculum: complete rollouts whose length grows during training."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from pathgrad.core.env_protocols import DifferentiableRolloutSpec, DifferentiableVecEnv

__all__ = ["HorizonCurriculum"]

SCHEDULES = ("linear", "geometric")


class HorizonCurriculum:
    """Wrap an env so that complete rollout ``k`` has a scheduled horizon.

    The horizon grows from ``start_horizon`` to ``end_horizon`` over
    ``num_rollouts`` rollouts, linearly or geometrically, rounded to whole
    steps, and stays at ``end_horizon`` afterwards. Short early rollouts give
    well-conditioned gradients; long later ones see the consequences of
    actions further ahead. Use it with ``rollout_mode="complete"``: the
    trainer asks :meth:`prepare_differentiable_rollout` before each rollout.

    Args:
        env: The env to wrap; everything else is passed through to it.
        start_horizon: Steps of the first rollout.
        end_horizon: Steps from rollout ``num_rollouts`` on.
        num_rollouts: Rollouts over which the horizon grows.
        schedule: ``linear`` or ``geometric``.
        normalize_objective: Scale each return by ``1 / horizon`` so losses
            of different horizons are comparable.
    """

    def __init__(
        self,
        env: DifferentiableVecEnv,
        start_horizon: int,
        end_horizon: int,
        num_rollouts: int,
        *,
        schedule: str = "linear",
        normalize_objective: bool = False,
    ) -> None:
        if start_horizon <= 0 or end_horizon <= 0:
            raise ValueError("start_horizon and end_horizon must be positive.")
        if num_rollouts <= 0:
            raise ValueError("num_rollouts must be positive.")
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {list(SCHEDULES)}, got '{schedule}'.")
        self.env = env
        self.start_horizon = int(start_horizon)
        self.end_horizon = int(end_horizon)
        self.num_rollouts = int(num_rollouts)
        self.schedule = schedule
        self.normalize_objective = bool(normalize_objective)
        self.num_envs = env.num_envs
        self.device = env.device
        self.single_observation_space = env.single_observation_space
        self.single_action_space = env.single_action_space

    def horizon(self, rollout_index: int) -> int:
        """Steps of complete rollout ``rollout_index``."""
        progress = min(max(rollout_index, 0) / self.num_rollouts, 1.0)
        start, end = self.start_horizon, self.end_horizon
        if self.schedule == "linear":
            value = start + (end - start) * progress
        else:
            value = start * (end / start) ** progress
        return max(1, round(value))

    def prepare_differentiable_rollout(self, rollout_index: int) -> DifferentiableRolloutSpec:
        """The spec of complete rollout ``rollout_index``: its horizon, scale and metadata."""
        horizon = self.horizon(rollout_index)
        scale = 1.0 / horizon if self.normalize_objective else 1.0
        return DifferentiableRolloutSpec(horizon, scale, {"horizon": float(horizon)})

    def reset(
        self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Reset the wrapped env."""
        return self.env.reset(seed=seed, options=options)

    def step(
        self, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Step the wrapped env."""
        return self.env.step(action)

    def detach_state(self) -> torch.Tensor:
        """Cut the wrapped env's graph."""
        return self.env.detach_state()

    def __getattr__(self, name: str) -> Any:
        # Everything else (state_dict, max_episode_steps, dtype, ...) is the env's.
        if name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)
