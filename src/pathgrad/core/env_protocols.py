"""The environment contract: a batched env whose ``step`` keeps the autograd graph.

A :class:`DifferentiableVecEnv` is a batch of ``num_envs`` environments whose
``step`` keeps the autograd graph: reward and next observation are
differentiable in the action and in the state carried from earlier steps.

Contract of ``step(action[N, A]) -> (obs, reward[N], terminated[N], truncated[N], info)``:

- Rows that finish reset inside ``step``: ``obs`` holds the next episode's
  first observation for them, while reward and done flags are those of the
  finishing step.
- ``info["final_observation"]`` is the observation before any reset, for every
  row and graph-connected (a critic bootstraps truncated episodes from it).
- ``info["metrics"]`` maps names to per-env tensors describing the state the
  step ended in, before any reset (for example ``success`` or ``final_distance``).

``single_action_space`` is the set of actions the env is meant for. What an
env does with an action outside it is its own choice and part of its
documentation: the built-in PointMass, Reacher, Quadrotor and CartPoleSwingUp
apply it unclipped (more force than the bound), Pendulum and
MountainCarContinuous clamp it as Gymnasium does. Policies must stay inside:
a squashed ``GaussianMLPPolicy`` (the command line's default) or the trainer's
``clip_actions_to_space``; evaluation clamps when training does, and exported
policies always clamp to the space.

``detach_state()`` cuts the graph and returns the current observation without
resetting: it is the truncation boundary of truncated backpropagation.
``reset(seed=...)`` makes the run reproducible: each env owns its generator.
Envs that offer ``state_dict()``/``load_state_dict()`` are resumed exactly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import torch
from gymnasium.spaces import Space

__all__ = ["DifferentiableRolloutSpec", "DifferentiableVecEnv", "ScheduledDifferentiableVecEnv"]


@runtime_checkable
class DifferentiableVecEnv(Protocol):
    """Batched environment whose ``step`` preserves the autograd graph."""

    num_envs: int
    device: torch.device
    single_observation_space: Space
    single_action_space: Space

    def reset(
        self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Reset every env and return the first observation ``[N, D]``."""
        ...

    def step(
        self, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Advance every env by one step, auto-resetting rows that finish."""
        ...

    def detach_state(self) -> torch.Tensor:
        """Cut the graph of the carried state; return the current observation."""
        ...


@dataclasses.dataclass(frozen=True)
class DifferentiableRolloutSpec:
    """What a scheduled env asks of the next complete rollout.

    Attributes:
        num_steps: Length of the rollout.
        objective_scale: Scalar or per-env multiplier of the return.
        metadata: Scalars logged as ``train/rollout_<key>_mean``.
    """

    num_steps: int
    objective_scale: float | torch.Tensor = 1.0
    metadata: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if int(self.num_steps) <= 0:
            raise ValueError(f"num_steps must be positive, got {self.num_steps}.")


@runtime_checkable
class ScheduledDifferentiableVecEnv(DifferentiableVecEnv, Protocol):
    """An env that sets the length and scale of each complete rollout."""

    def prepare_differentiable_rollout(self, rollout_index: int) -> DifferentiableRolloutSpec:
        """Return the spec of complete rollout number ``rollout_index``."""
        ...
