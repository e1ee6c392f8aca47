"""Config classes shared by algorithms: ``configclass``, optimizer and LR-schedule configs.

The classes live in :mod:`pathgrad.core.configclasses`; the builders in
:mod:`pathgrad.algo.schedules`. This module gathers them under the reference's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pathgrad.core.configclasses import (
    LR_SCHEDULER_NAMES,
    OPTIMIZER_NAMES,
    AlgorithmCfg,
    LRSchedulerCfg,
    OptimizerCfg,
    bind_scheduler_horizon,
    coerce_lr_scheduler_cfg,
    coerce_optimizer_cfg,
    configclass,
    scheduler_needs_horizon,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "AlgorithmCfg",
    "LR_SCHEDULER_NAMES",
    "LRSchedulerCfg",
    "OPTIMIZER_NAMES",
    "OptimizerCfg",
    "bind_scheduler_horizon",
    "build_lr_scheduler",
    "build_optimizer",
    "coerce_lr_scheduler_cfg",
    "coerce_optimizer_cfg",
    "configclass",
    "get_registered_lr_scheduler_names",
    "get_registered_optimizer_names",
    "scheduler_needs_horizon",
]


def get_registered_optimizer_names() -> list[str]:
    """Names accepted by ``OptimizerCfg.name``."""
    return sorted(OPTIMIZER_NAMES)


def get_registered_lr_scheduler_names() -> list[str]:
    """Names accepted by ``LRSchedulerCfg.name`` (``None`` also means ``constant``)."""
    return sorted(LR_SCHEDULER_NAMES)


def build_optimizer(
    parameters: Any, cfg: OptimizerCfg | Mapping[str, Any] | None = None
) -> torch.optim.Optimizer:
    """:func:`pathgrad.algo.schedules.build_optimizer`, also importable from here."""
    from pathgrad.algo.schedules import build_optimizer as build

    return build(parameters, cfg)


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer,
    cfg: LRSchedulerCfg | Mapping[str, Any] | None = None,
    *,
    total_updates: int | None = None,
) -> torch.optim.lr_scheduler.LRScheduler | None:
    """:func:`pathgrad.algo.schedules.build_lr_scheduler`, also importable from here."""
    from pathgrad.algo.schedules import build_lr_scheduler as build

    return build(optimizer, cfg, total_updates=total_updates)
