"""The length of the next segmented update, which an algorithm may set.

An algorithm with ``sets_window_length`` and a ``window_steps(default)`` method sets each update's
length (AHAC: ``round(H)``); the update is then one window of that many steps,
collected as one segment. Others run ``trainer.update_horizon`` steps in
segments of ``segment_length``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathgrad.core.trainer_state import TrainerState

__all__ = ["next_update_steps", "sets_windows"]


def sets_windows(algorithm: Any) -> bool:
    """Whether ``algorithm`` sets the length of each update (``window_steps``)."""
    return bool(algorithm.sets_window_length)


def next_update_steps(trainer: TrainerState, total_timesteps: int | None) -> tuple[int, int]:
    """Steps of the next segmented update and of its segments.

    An env-step budget shortens the last update to what is left of it.

    Raises:
        ValueError: If the algorithm's window is not a positive integer.
    """
    algorithm = trainer.algorithm
    if sets_windows(algorithm):
        steps = algorithm.window_steps(trainer.update_horizon)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(
                f"{type(algorithm).__name__}.window_steps() must return a positive integer, "
                f"got {steps!r}."
            )
        segment = steps
    else:
        steps, segment = trainer.update_horizon, trainer.cfg.segment_length
    if total_timesteps is not None:
        remaining = math.ceil((total_timesteps - trainer.global_step) / trainer.global_num_envs)
        steps = min(steps, remaining)
    return steps, segment
