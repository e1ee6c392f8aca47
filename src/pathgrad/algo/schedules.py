"""Optimizers by name and closed-form learning-rate schedules with warmup."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

from pathgrad.utils import LRSchedulerCfg, OptimizerCfg

__all__ = ["LearningRateSchedule", "build_optimizer"]

_OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "rmsprop": torch.optim.RMSprop,
    "sgd": torch.optim.SGD,
}


def build_optimizer(
    parameters: Iterable[torch.nn.Parameter], cfg: OptimizerCfg
) -> torch.optim.Optimizer:
    """Build the PyTorch optimizer named by ``cfg``.

    Raises:
        ValueError: If PyTorch rejects ``cfg.kwargs``.
    """
    optimizer_type = _OPTIMIZERS[cfg.name.lower()]
    try:
        return optimizer_type(parameters, lr=cfg.learning_rate, **cfg.kwargs)
    except (TypeError, ValueError) as error:
        raise ValueError(f"optimizer.kwargs are invalid for '{cfg.name}': {error}") from error


class LearningRateSchedule:
    """Learning rate as a closed-form function of the update count on the curve.

    A closed form (rather than PyTorch's recursive schedulers) makes the rate
    after a resume identical to the uninterrupted run and lets the decay
    horizon be bound late, from the trainer's budget. Past its horizon a
    linear schedule stays at ``end_factor`` and a cosine one at ``eta_min``.

    Args:
        cfg: Schedule configuration.
        base_learning_rates: One base rate per optimizer parameter group.
    """

    def __init__(self, cfg: LRSchedulerCfg, base_learning_rates: list[float]) -> None:
        self.cfg = cfg
        self.base_learning_rates = list(base_learning_rates)
        self.step_count = 0
        self.bound_horizon: int | None = None

    @property
    def decay_horizon(self) -> int | None:
        """Updates of the decay phase (after warmup), explicit or bound."""
        key = self.cfg.horizon_key
        if key is None:
            return None
        if key in self.cfg.kwargs:
            return int(self.cfg.kwargs[key])
        return self.bound_horizon

    @property
    def total_horizon(self) -> int | None:
        """Warmup plus decay updates, or ``None`` for schedules without a horizon."""
        horizon = self.decay_horizon
        return None if horizon is None else self.cfg.warmup_updates + horizon

    def bind_budget(self, remaining_updates: int) -> None:
        """Bind an implicit decay horizon so the curve ends with the update budget.

        Raises:
            ValueError: If the warmup leaves no update for the decay.
        """
        key = self.cfg.horizon_key
        if key is None or key in self.cfg.kwargs or remaining_updates <= 0:
            return
        decay = self.step_count + remaining_updates - self.cfg.warmup_updates
        if decay <= 0:
            raise ValueError(
                f"lr_scheduler.warmup_updates ({self.cfg.warmup_updates}) must be smaller "
                f"than the update budget ({self.step_count + remaining_updates})."
            )
        self.bound_horizon = decay

    def learning_rate(self, step: int, base: float) -> float:
        """Rate after ``step`` updates on the curve for a group with rate ``base``."""
        cfg = self.cfg
        kwargs: dict[str, Any] = cfg.kwargs
        warmup = cfg.warmup_updates
        warm_factor = 1.0
        if step < warmup:
            warm_factor = cfg.warmup_start_factor + (1.0 - cfg.warmup_start_factor) * (
                step / warmup
            )
        decay_step = max(0, step - warmup)
        name = cfg.schedule_name
        if name == "constant":
            rate = base
        elif name == "exponential":
            rate = base * float(kwargs["gamma"]) ** decay_step
        elif name == "step":
            rate = base * float(kwargs.get("gamma", 0.1)) ** (
                decay_step // int(kwargs["step_size"])
            )
        else:
            horizon = self.decay_horizon
            progress = 0.0 if horizon is None else min(decay_step, horizon) / horizon
            if name == "linear":
                start = float(kwargs.get("start_factor", 1.0))
                end = float(kwargs.get("end_factor", 0.0))
                rate = base * (start + (end - start) * progress)
            else:
                eta_min = float(kwargs.get("eta_min", 0.0))
                cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
                rate = eta_min + (base - eta_min) * cosine
        return rate * warm_factor

    def apply(self, optimizer: torch.optim.Optimizer) -> None:
        """Write the current rate into every parameter group."""
        for group, base in zip(optimizer.param_groups, self.base_learning_rates, strict=True):
            group["lr"] = self.learning_rate(self.step_count, base)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """Advance one update and apply the new rate."""
        self.step_count += 1
        self.apply(optimizer)

    def restart(self) -> None:
        """Start the configured curve again from its first update."""
        self.step_count = 0
        self.bound_horizon = None

    def state_dict(self) -> dict[str, Any]:
        """Position on the curve and the bound horizon."""
        return {
            "step_count": self.step_count,
            "bound_horizon": self.bound_horizon,
            "base_learning_rates": list(self.base_learning_rates),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.step_count = int(state["step_count"])
        bound = state["bound_horizon"]
        self.bound_horizon = None if bound is None else int(bound)
        self.base_learning_rates = [float(rate) for rate in state["base_learning_rates"]]
