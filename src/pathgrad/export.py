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
    """Deterministic action of raw observations: normalize, then the policy's mean action."""

    def __init__(self, policy: Policy, normalizer: RunningObservationNormalizer | None) -> None:
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

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        normalized = torch.clamp((observation - self.shift) * self.scale, self.low, self.high)
        return self.policy.get_differentiable_action(normalized, deterministic=True)["action"]


def export_policy(
    policy: Policy,
    normalizer: RunningObservationNormalizer | None,
    example_observation: torch.Tensor,
    output: str | Path,
) -> Path:
    """Trace the deployed policy on ``example_observation`` and save it atomically.

    The file loads with plain ``torch.jit.load`` (no pathgrad needed) and maps
    raw observations ``[B, D]`` to deterministic actions ``[B, A]``.
    """
    module = DeployedPolicy(policy, normalizer).eval()
    for parameter in module.parameters():
        parameter.requires_grad_(False)
    with torch.no_grad():
        traced: Any = torch.jit.trace(module, example_observation, check_trace=True)
    return atomic_write(Path(output), lambda handle: torch.jit.save(traced, handle))
