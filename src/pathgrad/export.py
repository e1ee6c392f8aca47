"""Export a trained policy as a TorchScript module with its observation normalizer folded in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from pathgrad.checkpoint import atomic_write
from pathgrad.normalization import RunningObservationNormalizer
from pathgrad.policies import Policy

__all__ = ["DeployedPolicy", "export_policy"]


class DeployedPolicy(nn.Module):
    """Deterministic action of raw observations: normalize, the policy's mean action, bound.

    Args:
        policy: The trained policy.
        normalizer: Its observation normalizer, folded in (or ``None``).
        action_bounds: ``(low, high)`` of the action space; actions are clamped
            to them (a no-op for a squashed policy), so the deployed policy
            never leaves the space it was trained for.
    """

    def __init__(
        self,
        policy: Policy,
        normalizer: RunningObservationNormalizer | None,
        action_bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        self.policy = policy
        dtype = next(policy.parameters()).dtype
        if normalizer is None:
            dim = policy.mean_net[0].in_features if hasattr(policy, "mean_net") else 1
            shift, scale = torch.zeros(dim, dtype=dtype), torch.ones(dim, dtype=dtype)
            low = torch.full((dim,), -torch.inf, dtype=dtype)
            high = torch.full((dim,), torch.inf, dtype=dtype)
        else:
            shift, scale, low, high = normalizer.constants(dtype)
        self.register_buffer("shift", shift.detach().clone())
        self.register_buffer("scale", scale.detach().clone())
        self.register_buffer("low", low.detach().clone())
        self.register_buffer("high", high.detach().clone())
        if action_bounds is None:
            action_dim = int(policy.log_std.shape[0]) if hasattr(policy, "log_std") else 1
            action_bounds = (
                torch.full((action_dim,), -torch.inf),
                torch.full((action_dim,), torch.inf),
            )
        self.register_buffer("action_low", action_bounds[0].detach().to(dtype).clone())
        self.register_buffer("action_high", action_bounds[1].detach().to(dtype).clone())

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        normalized = torch.clamp((observation - self.shift) * self.scale, self.low, self.high)
        action = self.policy.get_differentiable_action(normalized, deterministic=True)["action"]
        return torch.clamp(action, self.action_low, self.action_high)


def export_policy(
    policy: Policy,
    normalizer: RunningObservationNormalizer | None,
    example_observation: torch.Tensor,
    output: str | Path,
    action_bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> Path:
    """Trace the deployed policy on ``example_observation`` and save it atomically.

    The file loads with plain ``torch.jit.load`` (no pathgrad needed) and maps
    raw observations ``[B, D]`` to deterministic actions ``[B, A]``, clamped to
    ``action_bounds`` when given.
    """
    module = DeployedPolicy(policy, normalizer, action_bounds).eval()
    for parameter in module.parameters():
        parameter.requires_grad_(False)
    with torch.no_grad():
        traced: Any = torch.jit.trace(module, example_observation, check_trace=True)
    return atomic_write(Path(output), lambda handle: torch.jit.save(traced, handle))
