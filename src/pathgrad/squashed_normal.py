"""A tanh-squashed Gaussian policy whose log-std is a function of the observation.

SAPO's authors' actor (mineral's ``Actor`` with ``fixed_sigma: False`` and a
``squashed_normal`` distribution): an MLP trunk, a mean head and a log-std head
side by side, the log-std clamped to ``[log_std_min, log_std_max]``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from pathgrad.policies import (
    ACTIVATIONS,
    Policy,
    PolicyOutput,
    hidden_layers,
    register_action_bounds,
    tanh_log_det,
)

__all__ = ["SquashedNormalPolicy", "orthogonal_init"]

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def orthogonal_init(module: nn.Module, gain: float) -> None:
    """Orthogonal weights of ``gain`` and zero biases for every ``Linear`` in ``module``."""
    with torch.no_grad():
        for layer in module.modules():
            if isinstance(layer, nn.Linear):
                nn.init.orthogonal_(layer.weight, gain=gain)
                nn.init.zeros_(layer.bias)


class SquashedNormalPolicy(Policy):
    """``tanh(u)``, ``u ~ N(mean(s), exp(log_std(s))^2)``, scaled to the action bounds.

    Hidden layers are ``Linear -> LayerNorm -> activation`` (``layer_norm``),
    every ``Linear`` starts orthogonal with gain ``init_gain`` and a zero bias,
    except the log-std head's bias, which starts at ``init_log_std``. The
    log-std is hard-clamped (no gradient outside the range).

    Outputs: ``action`` (reparameterized), ``mean`` (the deterministic action,
    ``tanh`` of the mean, scaled), ``log_prob`` of the action in the action
    units (tanh's and the scale's change of variables included) and
    ``entropy``: a one-sample estimate ``-log p(tanh(u'))`` of the squashed
    distribution's entropy in the normalized box ``[-1, 1]^A``, from a second,
    independent reparameterized sample ``u'`` (zero noise when deterministic).
    Both noises are drawn with the action, so the random stream does not
    depend on which outputs are read.

    Args:
        observation_dim: Size of the observation.
        action_dim: Size of the action.
        hidden_sizes: Widths of the hidden layers.
        activation: Hidden activation (see ``ACTIVATIONS``).
        init_log_std: Initial bias of the log-std head.
        log_std_min: Lower clamp of the log-std.
        log_std_max: Upper clamp of the log-std.
        layer_norm: A ``LayerNorm`` between every hidden ``Linear`` and its activation.
        init_gain: Gain of the orthogonal initialization.
        action_low: Lower action bound (scalar or per dimension).
        action_high: Upper action bound.
    """

    squash = True

    def __init__(
        self,
        observation_dim: int,
        action_dim: int,
        hidden_sizes: Sequence[int] = (128, 64, 32),
        activation: str = "silu",
        init_log_std: float = 0.0,
        log_std_min: float = -5.0,
        log_std_max: float = 2.0,
        layer_norm: bool = True,
        init_gain: float = 1.0,
        action_low: float | Sequence[float] = -1.0,
        action_high: float | Sequence[float] = 1.0,
    ) -> None:
        super().__init__()
        if observation_dim <= 0 or action_dim <= 0:
            raise ValueError("observation_dim and action_dim must be positive.")
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, got '{activation}'."
            )
        if any(int(width) <= 0 for width in hidden_sizes):
            raise ValueError(f"hidden_sizes must be positive, got {list(hidden_sizes)}.")
        if not log_std_min < log_std_max:
            raise ValueError(
                f"log_std_min must be below log_std_max, got [{log_std_min}, {log_std_max}]."
            )
        if not init_gain > 0.0:
            raise ValueError(f"init_gain must be positive, got {init_gain}.")
        self.observation_dim, self.action_dim = int(observation_dim), int(action_dim)
        self.log_std_min, self.log_std_max = float(log_std_min), float(log_std_max)
        layers = hidden_layers(
            observation_dim, hidden_sizes, activation, layer_norm, norm_before_activation=True
        )
        width = int(hidden_sizes[-1]) if len(hidden_sizes) else observation_dim
        self.trunk = nn.Sequential(*layers)
        self.mean_head = nn.Linear(width, action_dim)
        self.log_std_head = nn.Linear(width, action_dim)
        orthogonal_init(self, float(init_gain))
        with torch.no_grad():
            self.log_std_head.bias.fill_(float(init_log_std))
        register_action_bounds(
            self, action_low, action_high, action_dim, squashing="SquashedNormalPolicy"
        )

    @classmethod
    def from_spaces(cls, observation_space, action_space, **kwargs) -> SquashedNormalPolicy:
        """Size the policy and its bounds from gymnasium Box spaces."""
        return cls(
            int(observation_space.shape[-1]),
            int(action_space.shape[-1]),
            action_low=np.asarray(action_space.low, dtype=np.float64),
            action_high=np.asarray(action_space.high, dtype=np.float64),
            **kwargs,
        )

    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and clamped log-std ``[N, A]`` of the Gaussian before squashing."""
        features = self.trunk(obs)
        log_std = self.log_std_head(features).clamp(self.log_std_min, self.log_std_max)
        return self.mean_head(features), log_std

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action."""
        return self.get_differentiable_action(obs, deterministic=True)["action"]

    def get_differentiable_action(
        self, obs: torch.Tensor, deterministic: bool = False
    ) -> Mapping[str, torch.Tensor]:
        """A reparameterized action; ``log_prob`` and ``entropy`` are computed when read."""
        mean, log_std = self.distribution(obs)
        if deterministic:
            noise = entropy_noise = torch.zeros_like(mean)
        else:
            noise = torch.randn_like(mean)
            entropy_noise = torch.randn_like(mean)
        std = log_std.exp()
        pre_squash = mean + std * noise
        action = self.action_center + self.action_half_range * torch.tanh(pre_squash)

        def gaussian_log_prob(standard: torch.Tensor) -> torch.Tensor:
            return -0.5 * standard.pow(2) - log_std - _HALF_LOG_2PI

        def log_prob() -> torch.Tensor:
            change = tanh_log_det(pre_squash) + self.action_half_range.log()
            return (gaussian_log_prob(noise) - change).sum(-1)

        def entropy() -> torch.Tensor:
            other = mean + std * entropy_noise
            return -(gaussian_log_prob(entropy_noise) - tanh_log_det(other)).sum(-1)

        def squashed_mean() -> torch.Tensor:
            return self.action_center + self.action_half_range * torch.tanh(mean)

        return PolicyOutput(
            {"action": action}, {"log_prob": log_prob, "entropy": entropy, "mean": squashed_mean}
        )

    def extra_repr(self) -> str:
        return f"log_std in [{self.log_std_min}, {self.log_std_max}]"
