"""The reference's ``differentiable_trainer`` module: :class:`DifferentiableTrainer` and its config.

The trainer lives in :mod:`pathgrad.trainer` (the loop in ``trainer/trainer.py``, its config,
evaluation schedule, saving, budgets and the rest beside it); this module keeps the
reference's import path.
"""

from __future__ import annotations

from pathgrad.trainer.config import DifferentiableTrainerCfg
from pathgrad.trainer.trainer import DifferentiableTrainer

__all__ = ["DifferentiableTrainer", "DifferentiableTrainerCfg"]
