"""Two independent value networks and AHAC's critic training to convergence."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence

import torch
from torch import nn

from pathgrad.policies import hidden_layers

__all__ = ["TwinCritic", "fit_to_convergence"]


class TwinCritic(nn.Module):
    """Two value MLPs with separate parameters; ``forward`` is their minimum.

    Each is ``Linear -> activation [-> LayerNorm]`` per hidden width, then a
    linear output; every ``Linear`` starts orthogonal with gain ``sqrt(2)`` and
    a zero bias (the AHAC authors' critic). Unlike the authors' double critic,
    whose two heads are built from the same layer objects (one network in
    effect), the two here are independent.
    """

    def __init__(
        self, inputs: int, hidden: Sequence[int], activation: str, layer_norm: bool = True
    ) -> None:
        super().__init__()
        self.heads = nn.ModuleList(
            [_value_mlp(inputs, hidden, activation, layer_norm) for _ in range(2)]
        )

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        """The smaller of the two values ``[..., 1]``."""
        return torch.minimum(self.heads[0](observations), self.heads[1](observations))

    def predict(self, observations: torch.Tensor) -> torch.Tensor:
        """Both values side by side ``[..., 2]``."""
        return torch.cat([head(observations) for head in self.heads], dim=-1)


def _value_mlp(
    inputs: int, hidden: Sequence[int], activation: str, layer_norm: bool
) -> nn.Sequential:
    layers = hidden_layers(inputs, hidden, activation, layer_norm)
    layers.append(nn.Linear(int(hidden[-1]) if len(hidden) else inputs, 1))
    network = nn.Sequential(*layers)
    for layer in network:
        if isinstance(layer, nn.Linear):
            nn.init.orthogonal_(layer.weight, gain=math.sqrt(2.0))
            nn.init.zeros_(layer.bias)
    return network


def fit_to_convergence(
    critic: TwinCritic,
    optimizer: torch.optim.Optimizer,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    *,
    minibatches: int,
    max_passes: int,
    tolerance: float,
    max_grad_norm: float = 0.0,
    average: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> tuple[int, float]:
    """Train both heads on ``targets`` until the pass losses stop moving.

    Each pass goes once over ``inputs`` in order (no shuffling), in
    minibatches of ``len // minibatches`` rows plus any remainder; a
    minibatch's loss is the squared error of both heads averaged. After a pass,
    if the 5 passes before it have pass-mean losses whose successive
    differences average under ``tolerance`` in magnitude, training stops (so
    the earliest stop is after pass 6); otherwise the pass's mean joins them.

    Args:
        average: Called after each minibatch's backward with its loss
            ``[1]``; returns the loss averaged over data-parallel ranks (and
            averages the gradients), so every rank stops at the same pass.

    Returns:
        The passes run and the last pass's mean loss.
    """
    count = targets.shape[0]
    batch = max(1, count // minibatches)
    recent: deque[float] = deque(maxlen=5)
    passes, pass_loss = 0, float("nan")
    for _ in range(max_passes):
        losses = []
        for start in range(0, count, batch):
            rows = slice(start, start + batch)
            predicted = critic.predict(inputs[rows])
            loss = (predicted - targets[rows].unsqueeze(-1)).square().mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            shared = loss.detach().reshape(1)
            if average is not None:
                shared = average(shared)
            if max_grad_norm > 0.0:
                nn.utils.clip_grad_norm_(critic.parameters(), max_grad_norm)
            optimizer.step()
            losses.append(float(shared[0]))
        passes += 1
        pass_loss = sum(losses) / len(losses)
        if len(recent) == recent.maxlen:
            values = list(recent)
            drift = sum(b - a for a, b in zip(values, values[1:], strict=False)) / (len(values) - 1)
            if abs(drift) < tolerance:
                break
        recent.append(pass_loss)
    return passes, pass_loss
