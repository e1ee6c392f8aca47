"""Training budgets: how many updates an env-step or update budget means."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pathgrad.env import ScheduledDifferentiableVecEnv
from pathgrad.trainer.windows import sets_windows
from pathgrad.utils import scheduler_needs_horizon

if TYPE_CHECKING:
    from pathgrad.core.trainer_state import TrainerState

__all__ = ["check_budget", "planned_updates"]


def planned_updates(
    trainer: TrainerState, total_timesteps: int | None, total_updates: int | None
) -> tuple[int, int]:
    """Updates of the whole run and of this ``train`` call, for the LR schedule.

    Raises:
        ValueError: If a variable-horizon run has an env-step budget and an LR
            schedule whose horizon must come from the budget.
    """
    if total_updates is not None:
        return total_updates, max(0, total_updates - trainer.num_updates)
    assert total_timesteps is not None
    pending = trainer.global_step < total_timesteps
    if trainer.cfg.rollout_mode == "complete" and isinstance(
        trainer.env, ScheduledDifferentiableVecEnv
    ):
        if pending and any(map(scheduler_needs_horizon, trainer.algorithm.lr_scheduler_cfgs)):
            raise ValueError(
                "Variable-horizon APG requires total_updates or an explicit scheduler horizon."
            )
        # Env-provided horizons are known only when collecting: the explicit
        # LR horizon is checked before each update instead.
        return int(pending), int(pending)
    if trainer.cfg.rollout_mode == "segmented" and sets_windows(trainer.algorithm):
        algorithm = trainer.algorithm
        if pending and any(map(scheduler_needs_horizon, algorithm.lr_scheduler_cfgs)):
            raise ValueError(
                f"{type(algorithm).__name__} sets each update's length, so an env-step budget "
                "does not say how many updates a run takes: give total_updates, or explicit "
                "horizons (total_iters/T_max) to every learning-rate schedule."
            )
        return int(pending), int(pending)
    steps_per_update = trainer.update_horizon * trainer.global_num_envs
    if trainer.cfg.rollout_mode == "complete":
        steps_per_update *= trainer.cfg.gradient_accumulation_steps
    estimated = math.ceil(total_timesteps / steps_per_update)
    remaining = math.ceil(max(0, total_timesteps - trainer.global_step) / steps_per_update)
    return estimated, remaining


def check_budget(
    trainer: TrainerState, total_timesteps: int | None, total_updates: int | None
) -> None:
    """Check, before anything is written, that the budget fits the LR schedule.

    Training binds the same schedule again, so this changes nothing a run sees.

    Raises:
        ValueError: What :meth:`DifferentiableTrainer.train` would raise at its start
            (an explicit schedule horizon shorter than the budget, a warmup not
            shorter than it, a variable-horizon budget the schedule cannot use).
    """
    trainer.algorithm.prepare_schedule(*planned_updates(trainer, total_timesteps, total_updates))
