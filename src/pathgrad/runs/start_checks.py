"""The checks a run makes before its first update, shared by ``train``, ``resume`` and sweeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pathgrad.distributed import DataParallel
from pathgrad.runs.config import RunConfig
from pathgrad.runs.config_sources import ConfigError
from pathgrad.runs.run import build_run
from pathgrad.trainer.budgets import check_budget

__all__ = ["check_budget_fits_schedule", "check_run_can_start", "run_budget"]


def check_run_can_start(config: RunConfig) -> None:
    """Every check a run makes before its first update, without writing anything.

    Raises:
        ConfigError: If a component rejects its configuration or the budget
            does not fit the schedule.
    """
    objects = build_run(config, Path("<run directory>"), DataParallel())
    check_budget_fits_schedule(config, objects.trainer, ConfigError)


def check_budget_fits_schedule(config: RunConfig, trainer: Any, error: type[Exception]) -> None:
    """The schedule checks of ``train``'s start, made before the run's files are written."""
    try:
        check_budget(
            trainer, **{"total_timesteps": None, "total_updates": None, **run_budget(config)}
        )
    except ValueError as problem:
        raise error(f"algorithm.cfg.lr_scheduler: {problem}") from problem


def run_budget(config: RunConfig) -> dict[str, int]:
    """The run's one budget as ``train``'s keyword: ``total_updates`` or ``total_timesteps``."""
    if config.trainer.total_updates is not None:
        return {"total_updates": config.trainer.total_updates}
    return {"total_timesteps": config.trainer.total_timesteps}
