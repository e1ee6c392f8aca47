"""Optimizers by name and closed-form learning-rate schedules with warmup."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from pathgrad.core.configclasses import (
    OPTIMIZER_NAMES,
    LRSchedulerCfg,
    OptimizerCfg,
    bind_scheduler_horizon,
    coerce_lr_scheduler_cfg,
    coerce_optimizer_cfg,
    scheduler_needs_horizon,
)

__all__ = [
    "ClosedFormLR",
    "LearningRateSchedule",
    "ScheduleView",
    "build_lr_scheduler",
    "build_optimizer",
]

_OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "rmsprop": torch.optim.RMSprop,
    "sgd": torch.optim.SGD,
}


def build_optimizer(
    parameters: Iterable[torch.nn.Parameter],
    cfg: OptimizerCfg | Mapping[str, Any] | None = None,
) -> torch.optim.Optimizer:
    """Build the PyTorch optimizer named by ``cfg``.

    Args:
        parameters: Parameters (or parameter groups) to optimize.
        cfg: An :class:`OptimizerCfg`, a mapping of its fields, or ``None``
            for the defaults (Adam, 3e-4).

    Raises:
        ValueError: If the name is unsupported or PyTorch rejects ``cfg.kwargs``.
    """
    cfg = coerce_optimizer_cfg(cfg)
    key = str(cfg.name).lower()
    if key not in _OPTIMIZERS:
        raise ValueError(
            f"Unsupported optimizer '{cfg.name}': optimizer.name must be one of "
            f"{list(OPTIMIZER_NAMES)}."
        )
    optimizer_type = _OPTIMIZERS[key]
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
        if remaining_updates <= 0:
            return
        self.bind_total_updates(self.step_count + remaining_updates)

    def bind_total_updates(self, total_updates: int) -> None:
        """Bind an implicit decay horizon so the curve ends after ``total_updates`` updates.

        Raises:
            ValueError: If the warmup leaves no update for the decay.
        """
        key = self.cfg.horizon_key
        if key is None or key in self.cfg.kwargs:
            return
        decay = total_updates - self.cfg.warmup_updates
        if decay <= 0:
            raise ValueError(
                f"lr_scheduler.warmup_updates ({self.cfg.warmup_updates}) must be smaller "
                f"than the update budget ({total_updates})."
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


class ScheduleView:
    """An algorithm's :class:`LearningRateSchedule` seen as a PyTorch LR scheduler.

    ``algorithm.lr_scheduler`` (the reference's name): ``last_epoch`` is the
    schedule's ``step_count``, ``step()`` advances the algorithm's own curve, and
    the state dicts are the schedule's, so checkpoints (which save
    ``algorithm.lr_schedule``) restore it. It holds no state of its own.

    Args:
        schedule: The algorithm's schedule.
        optimizer: The optimizer whose rates it sets.
    """

    def __init__(self, schedule: LearningRateSchedule, optimizer: torch.optim.Optimizer) -> None:
        self.schedule = schedule
        self.optimizer = optimizer

    @property
    def last_epoch(self) -> int:
        """Updates taken on the curve."""
        return self.schedule.step_count

    @property
    def base_lrs(self) -> list[float]:
        """The base rate of every parameter group."""
        return list(self.schedule.base_learning_rates)

    def get_last_lr(self) -> list[float]:
        """The current rate of every parameter group."""
        return [self.schedule.learning_rate(self.last_epoch, base) for base in self.base_lrs]

    def get_lr(self) -> list[float]:
        """Same as :meth:`get_last_lr` (a closed form)."""
        return self.get_last_lr()

    def step(self) -> None:
        """Advance the algorithm's curve by one update and apply the rate."""
        self.schedule.step(self.optimizer)

    def state_dict(self) -> dict[str, Any]:
        """``last_epoch``, ``base_lrs``, ``_last_lr`` and the bound decay horizon."""
        return {
            "last_epoch": self.last_epoch,
            "base_lrs": self.base_lrs,
            "_last_lr": self.get_last_lr(),
            "bound_horizon": self.schedule.bound_horizon,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` into the algorithm's schedule and apply its rate."""
        bound = state_dict.get("bound_horizon")
        self.schedule.load_state_dict(
            {
                "step_count": state_dict["last_epoch"],
                "bound_horizon": bound,
                "base_learning_rates": state_dict.get("base_lrs", self.base_lrs),
            }
        )
        self.schedule.apply(self.optimizer)


class ClosedFormLR(torch.optim.lr_scheduler.LRScheduler):
    """A PyTorch LR scheduler that follows a :class:`LearningRateSchedule` curve.

    For code written against PyTorch schedulers (``scheduler.step()`` after
    each ``optimizer.step()``): epoch ``e`` gets the closed-form rate of
    update ``e``, the same values pathgrad's algorithms use. Its state dict
    holds plain numbers (``weights_only``-loadable); :meth:`load_state_dict`
    also writes the restored rate into the optimizer, so a scheduler rebuilt
    with the same config resumes exactly.

    Args:
        optimizer: Optimizer whose groups' rates it sets.
        cfg: Schedule config with an explicit horizon for ``linear``/``cosine``.
        last_epoch: PyTorch's resume index (``-1``: start).

    Raises:
        ValueError: If ``linear``/``cosine`` have no horizon.
    """

    def __init__(
        self, optimizer: torch.optim.Optimizer, cfg: LRSchedulerCfg, last_epoch: int = -1
    ) -> None:
        if scheduler_needs_horizon(cfg):
            raise ValueError(
                f"{cfg.schedule_name} scheduler requires kwargs['{cfg.horizon_key}'] "
                "(or build_lr_scheduler(..., total_updates=N))."
            )
        self.schedule = LearningRateSchedule(cfg, [])
        super().__init__(optimizer, last_epoch)

    def _rates(self) -> list[float]:
        return [self.schedule.learning_rate(self.last_epoch, base) for base in self.base_lrs]

    def get_lr(self) -> list[float]:  # type: ignore[override]
        """Rates of the current epoch, one per parameter group."""
        return self._rates()

    def _get_closed_form_lr(self) -> list[float]:
        return self._rates()

    def state_dict(self) -> dict[str, Any]:
        """PyTorch's scheduler state (epoch, base rates, last rates), without the config."""
        return {
            key: value
            for key, value in self.__dict__.items()
            if key not in ("optimizer", "schedule")
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` and apply its rate to the optimizer."""
        self.__dict__.update(state_dict)
        rates = self._rates()
        for group, rate in zip(self.optimizer.param_groups, rates, strict=True):
            group["lr"] = rate
        self._last_lr = list(rates)


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer,
    cfg: LRSchedulerCfg | Mapping[str, Any] | None = None,
    *,
    total_updates: int | None = None,
) -> ClosedFormLR | None:
    """A PyTorch ``LRScheduler`` following ``cfg``'s closed-form curve.

    Args:
        optimizer: Optimizer to schedule; its current rates are the base rates.
        cfg: An :class:`LRSchedulerCfg`, a mapping of its fields, or ``None``.
        total_updates: Binds an omitted ``total_iters``/``T_max`` so the curve
            ends after this many updates (warmup included).

    Returns:
        The scheduler, or ``None`` when ``cfg.name`` is ``None`` and there is no
        warmup (as in the reference).

    Raises:
        ValueError: If ``linear``/``cosine`` have neither a horizon nor
            ``total_updates``.
    """
    cfg = coerce_lr_scheduler_cfg(cfg)
    if total_updates is not None:
        cfg = bind_scheduler_horizon(cfg, total_updates)
    if cfg.name is None and cfg.warmup_updates == 0:
        return None
    return ClosedFormLR(optimizer, cfg)
