"""Base class of algorithms: optimizer, learning-rate schedule and their state."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from enum import Enum
from typing import Any, Generic, TypeVar

import torch

from pathgrad.algo.schedules import LearningRateSchedule, ScheduleView, build_optimizer
from pathgrad.core.state_checks import check_optimizer_groups
from pathgrad.utils import AlgorithmCfg, LRSchedulerCfg

__all__ = ["BaseAlgorithm", "RolloutKind"]

RolloutT = TypeVar("RolloutT")

RESUME_SCHEDULER_MODES = ("restore", "restart")


class RolloutKind(str, Enum):
    """Rollout semantics an algorithm needs from its collector."""

    STANDARD = "standard"
    DIFFERENTIABLE = "differentiable"


class BaseAlgorithm(ABC, Generic[RolloutT]):
    """Optimizer and learning-rate schedule shared by the algorithms."""

    device: torch.device
    rollout_kind = RolloutKind.STANDARD
    rollout_modes: tuple[str, ...] = ("segmented", "complete")
    # Set by the trainer: the observation normalizer's ``normalize`` (or None).
    observation_transform: Any = None
    # Set by the trainer: its DataParallel (gradient averages across ranks), or None.
    synchronizer: Any = None
    # Whether the algorithm averages its gradients through ``synchronizer`` (torchrun).
    supports_data_parallel = False
    optimizer: torch.optim.Optimizer
    lr_schedule: LearningRateSchedule
    _lr_scheduler_cfg: LRSchedulerCfg

    @abstractmethod
    def update(self, rollout: RolloutT) -> dict[str, float]:
        """Update the policy from one rollout and return metrics."""

    def _setup_optimization(
        self, cfg: AlgorithmCfg, parameters: Iterable[torch.nn.Parameter]
    ) -> None:
        """Build the optimizer and the learning-rate schedule from ``cfg``."""
        cfg.validate()
        self._lr_scheduler_cfg = cfg.lr_scheduler
        self.optimizer = build_optimizer(parameters, cfg.optimizer)
        base_rates = [float(group["lr"]) for group in self.optimizer.param_groups]
        self.lr_schedule = LearningRateSchedule(cfg.lr_scheduler, base_rates)
        self.lr_schedule.apply(self.optimizer)

    def _prepare_schedule(self, estimated_updates: int, remaining_updates: int) -> None:
        """Bind or check the schedule horizon before a training call.

        Args:
            estimated_updates: Updates of the whole run, counted from zero.
            remaining_updates: Updates this training call will take.

        Raises:
            ValueError: If the budget is inconsistent, if the warmup is not
                shorter than the budget, or if an explicit horizon is shorter
                than the budget.
        """
        if remaining_updates < 0 or estimated_updates < remaining_updates:
            raise ValueError(
                "estimated_updates must be at least remaining_updates >= 0, got "
                f"{estimated_updates} and {remaining_updates}."
            )
        self.lr_schedule.bind_budget(remaining_updates)
        self.lr_schedule.apply(self.optimizer)
        self._check_schedule_horizon(remaining_updates, error=ValueError)

    def bind_schedule(self, *, total_updates: int) -> None:
        """Bind an omitted LR decay horizon so the curve ends after ``total_updates`` updates.

        ``total_updates`` counts from the first update of the run, as in the
        reference. Schedules with an explicit horizon are left as they are.

        Raises:
            ValueError: If ``total_updates`` is not positive, the warmup is not
                shorter, or an explicit horizon ends before ``total_updates``.
        """
        if total_updates <= 0:
            raise ValueError("total_updates must be positive.")
        remaining = max(0, total_updates - self.lr_schedule.step_count)
        self._prepare_schedule(total_updates, remaining)

    def _check_schedule_horizon(
        self, num_updates: int, *, error: type[Exception] = RuntimeError
    ) -> None:
        """Raise if ``num_updates`` more updates would run past the LR horizon."""
        total = self.lr_schedule.total_horizon
        if num_updates <= 0 or self.lr_schedule.cfg.horizon_key is None:
            return
        if total is None:
            raise error(
                "The learning-rate schedule has no horizon: give "
                f"lr_scheduler.kwargs['{self.lr_schedule.cfg.horizon_key}'] or an update budget."
            )
        taken = self.lr_schedule.step_count
        if taken + num_updates > total:
            raise error(
                f"The learning-rate schedule ends after {total} updates, {taken} are taken "
                f"and {num_updates} more were requested; raise "
                f"lr_scheduler.kwargs['{self.lr_schedule.cfg.horizon_key}'] or lower the budget."
            )

    def _average_across_ranks(
        self, parameters: Iterable[torch.Tensor], extras: torch.Tensor, *, carry: bool = False
    ) -> torch.Tensor:
        """Average gradients and ``extras`` over data-parallel ranks (as is alone).

        ``carry``: this is the update's one policy step, which also carries the
        trainer's per-update exchange (:meth:`DataParallel.carry`).
        """
        if self.synchronizer is None:
            return extras
        return self.synchronizer.average_gradients(parameters, extras, carry=carry)

    @property
    def lr_scheduler(self) -> ScheduleView | None:
        """:attr:`lr_schedule` as a PyTorch-style scheduler (the reference's name).

        ``None`` when no schedule is configured (no name, no warmup), as in the
        reference; ``last_epoch``, ``state_dict()`` and ``load_state_dict()``
        are :attr:`lr_schedule`'s, which checkpoints save and restore.
        """
        cfg = self.lr_schedule.cfg
        if cfg.name is None and cfg.warmup_updates == 0:
            return None
        return ScheduleView(self.lr_schedule, self.optimizer)

    def current_learning_rate(self) -> float:
        """Learning rate of the first parameter group."""
        return float(self.optimizer.param_groups[0]["lr"])

    def _step_scheduler(self) -> None:
        """Advance the learning-rate schedule by one applied update."""
        self.lr_schedule.step(self.optimizer)

    def state_dict(self) -> dict[str, Any]:
        """Optimizer and schedule state for checkpoints."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "lr_schedule": self.lr_schedule.state_dict(),
        }

    def validate_state_dict(self, state: dict[str, Any]) -> None:
        """Raise ``ValueError`` if ``state`` does not fit this algorithm (nothing changes)."""
        check_optimizer_groups("algorithm.optimizer", state["optimizer"], self.optimizer)

    def load_state_dict(self, state: dict[str, Any], *, resume_scheduler: str = "restore") -> None:
        """Restore optimizer state; restore or restart the learning-rate curve.

        Raises:
            ValueError: If ``resume_scheduler`` is not 'restore' or 'restart'.
        """
        if resume_scheduler not in RESUME_SCHEDULER_MODES:
            raise ValueError("resume_scheduler must be 'restore' or 'restart'.")
        self.optimizer.load_state_dict(state["optimizer"])
        if resume_scheduler == "restore":
            self.lr_schedule.load_state_dict(state["lr_schedule"])
        else:
            self.lr_schedule.restart()
        self.lr_schedule.apply(self.optimizer)
