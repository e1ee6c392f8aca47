"""The algorithm contract the trainer drives, with the optimizer and learning-rate schedule.

An update is ``begin_update()``, one or more ``accumulate_segment()`` (TBPTT
windows) or ``accumulate_complete_rollout()`` / ``accumulate_complete_returns()``
calls, then ``finish_update()``; ``cancel_update()`` abandons it. Every
algorithm implements these phases; the trainer calls nothing else of an
update. An algorithm builds itself from its config (:meth:`BaseAlgorithm.from_config`)
and declares what :mod:`pathgrad.compiled` can compile (``compiled_update``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from enum import Enum
from typing import Any, ClassVar, Generic, TypeVar

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
    """The update phases the trainer calls, and the optimizer and schedule they step."""

    # The name it is registered under (messages name it; else the class's name).
    algorithm_name: ClassVar[str] = ""
    device: torch.device
    cfg: Any
    policy: torch.nn.Module
    rollout_kind = RolloutKind.STANDARD
    rollout_modes: tuple[str, ...] = ("segmented", "complete")
    # Set by the trainer: the observation normalizer's ``normalize`` (or None).
    observation_transform: Any = None
    # Set by the trainer: its DataParallel (gradient averages across ranks), or None.
    synchronizer: Any = None
    # Whether the algorithm averages its gradients through ``synchronizer`` (torchrun).
    supports_data_parallel = False
    # Whether the collector must keep each step's pre-reset observation (a bootstrap reads it).
    needs_final_observation = False
    # Whether ``window_steps`` sets each update's length (else the trainer's segments do).
    sets_window_length: ClassVar[bool] = False
    # Keys of a step's ``info`` the algorithm reads (compiled rollout chunks must keep them).
    step_info_keys: ClassVar[tuple[str, ...]] = ()
    # What pathgrad.compiled compiles whole: "apg" (actor only), "critic" (actor and
    # critics), or None. Declared by each class itself, never inherited (a subclass
    # changes the update); ``compile_blocker`` says why not where it is None.
    compiled_update: ClassVar[str | None] = None
    compile_blocker: ClassVar[str | None] = None
    # Mean entropy per sampled action in the last finished update (None: none sampled).
    last_policy_entropy: float | None = None
    optimizer: torch.optim.Optimizer
    lr_schedule: LearningRateSchedule
    _lr_scheduler_cfg: LRSchedulerCfg

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for declared_per_class in ("algorithm_name", "compiled_update", "compile_blocker"):
            if declared_per_class not in cls.__dict__:
                setattr(cls, declared_per_class, BaseAlgorithm.__dict__[declared_per_class])

    @classmethod
    def from_config(cls, cfg: AlgorithmCfg, policy: torch.nn.Module, env: Any = None) -> Any:
        """Build the algorithm from its config, ``policy`` and (where it sizes a network) ``env``.

        The registry (:func:`pathgrad.algo.registry.register_algo`) calls this.
        """
        return cls(cfg, policy)

    @classmethod
    def env_sizes(
        cls, env: Any, needs: str = "its critic (env.single_observation_space)"
    ) -> tuple[int, int]:
        """``env``'s observation and action sizes, or an error naming what needs them.

        Raises:
            ValueError: If ``env`` is None.
        """
        if env is None:
            name = cls.algorithm_name or cls.__name__
            raise ValueError(f"Algorithm '{name}' needs env= to size {needs}.")
        return (
            int(env.single_observation_space.shape[-1]),
            int(env.single_action_space.shape[-1]),
        )

    @abstractmethod
    def begin_update(self) -> None:
        """Start accumulating an update (zero the gradients)."""

    @abstractmethod
    def accumulate_segment(self, rollout: RolloutT) -> None:
        """Backpropagate one TBPTT window; what it carries goes on to the next one."""

    @abstractmethod
    def accumulate_complete_rollout(self, rollout: RolloutT, **kwargs: Any) -> None:
        """Backpropagate one complete rollout from a reset (``objective_scale``,
        ``accumulation_scale`` keywords)."""

    @abstractmethod
    def accumulate_complete_returns(
        self, returns: torch.Tensor, entropy_returns: torch.Tensor, **kwargs: Any
    ) -> None:
        """Backpropagate a complete rollout's returns ``[N]`` (gradient checkpointing's path)."""

    @abstractmethod
    def finish_update(self) -> dict[str, float]:
        """Clip, skip a non-finite update or step; return the update's metrics."""

    @abstractmethod
    def cancel_update(self) -> None:
        """Abandon the active update (its gradients are dropped)."""

    def update(self, rollout: RolloutT) -> dict[str, float]:
        """Apply one update from a single rollout segment (the reference's entry point)."""
        self.begin_update()
        try:
            self.accumulate_segment(rollout)
            return self.finish_update()
        except Exception:
            self.cancel_update()
            raise

    def window_steps(self, default: int) -> int | None:
        """Env steps of the next update where ``sets_window_length`` (AHAC: ``round(H)``)."""
        return None

    def record_policy_entropy(self, entropies: torch.Tensor) -> None:
        """Take sampled action-distribution entropies into :attr:`last_policy_entropy`."""

    @property
    def differentiates_entropy(self) -> bool:
        """Whether the loss differentiates the policy's entropy (a bonus in it)."""
        return float(getattr(self.cfg, "ent_coef", 0.0)) != 0.0

    def compiled_optimizers(self) -> list[tuple[Any, str]]:
        """The optimizers a compiled update steps, each with what a message calls it."""
        return [(getattr(self, "optimizer", None), "the optimizer")]

    @property
    def lr_scheduler_cfgs(self) -> tuple[LRSchedulerCfg, ...]:
        """Every learning-rate curve that an update budget binds."""
        return (self._lr_scheduler_cfg,)

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

    def prepare_schedule(self, estimated_updates: int, remaining_updates: int) -> None:
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
        self.check_schedule_horizon(remaining_updates, error=ValueError)

    def _prepare_schedule(self, estimated_updates: int, remaining_updates: int) -> None:
        """The reference trainer's name of :meth:`prepare_schedule`."""
        self.prepare_schedule(estimated_updates, remaining_updates)

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
        self.prepare_schedule(total_updates, remaining)

    def check_schedule_horizon(
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

    def _check_schedule_horizon(
        self, num_updates: int, *, error: type[Exception] = RuntimeError
    ) -> None:
        """The reference trainer's name of :meth:`check_schedule_horizon`."""
        self.check_schedule_horizon(num_updates, error=error)

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
