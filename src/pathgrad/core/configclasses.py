"""Config classes of algorithms: ``configclass``, optimizer, LR-schedule and shared configs.

:mod:`pathgrad.utils` re-exports them (the reference's module map) with the
builders of :mod:`pathgrad.algo.schedules`, which build on them.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = [
    "AlgorithmCfg",
    "LR_SCHEDULER_NAMES",
    "LRSchedulerCfg",
    "OPTIMIZER_NAMES",
    "OptimizerCfg",
    "bind_scheduler_horizon",
    "coerce_lr_scheduler_cfg",
    "coerce_optimizer_cfg",
    "configclass",
    "scheduler_needs_horizon",
]

T = TypeVar("T")

OPTIMIZER_NAMES = ("adam", "adamw", "rmsprop", "sgd")
LR_SCHEDULER_NAMES = ("constant", "cosine", "exponential", "linear", "step")

# Scheduler kwargs accepted per schedule (PyTorch's names), and the key that
# holds the decay horizon for schedules that need one.
_SCHEDULER_KWARGS: dict[str, frozenset[str]] = {
    "constant": frozenset(),
    "linear": frozenset({"start_factor", "end_factor", "total_iters"}),
    "cosine": frozenset({"T_max", "eta_min"}),
    "exponential": frozenset({"gamma"}),
    "step": frozenset({"step_size", "gamma"}),
}
_HORIZON_KEYS: dict[str, str] = {"linear": "total_iters", "cosine": "T_max"}


def _field_default(value: Any) -> dataclasses.Field:
    """Turn a mutable class-level default into a per-instance copy."""
    if isinstance(value, dataclasses.Field):
        return value
    if isinstance(value, (dict, list, set)) or dataclasses.is_dataclass(value):
        return dataclasses.field(default_factory=lambda v=value: copy.deepcopy(v))
    return dataclasses.field(default=value)


def configclass(cls: type[T]) -> type[T]:
    """Make ``cls`` a dataclass whose defaults may be mutable and which validates.

    Mutable defaults (dicts, lists, nested config instances) are copied per
    instance. If the class defines ``validate()``, it runs after construction
    and raises ``ValueError`` naming the offending field.
    """
    annotations = cls.__dict__.get("__annotations__", {})
    for name in annotations:
        if name in cls.__dict__:
            setattr(cls, name, _field_default(cls.__dict__[name]))
    user_post_init = cls.__dict__.get("__post_init__")

    def __post_init__(self: Any) -> None:
        if user_post_init is not None:
            user_post_init(self)
        validate = getattr(self, "validate", None)
        if callable(validate):
            validate()

    cls.__post_init__ = __post_init__  # type: ignore[attr-defined]

    def to_dict(self: Any) -> dict[str, Any]:
        """Return the config as nested plain dictionaries."""
        return dataclasses.asdict(self)

    def replace(self: Any, **changes: Any) -> Any:
        """Return a validated copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    cls.to_dict = to_dict  # type: ignore[attr-defined]
    cls.replace = replace  # type: ignore[attr-defined]
    return dataclasses.dataclass(cls)


def _coerce(value: Any, cfg_type: type[T], field_name: str) -> T:
    """Accept a config instance, a mapping of its fields, or ``None`` (defaults)."""
    if value is None:
        return cfg_type()
    if isinstance(value, cfg_type):
        return value
    if isinstance(value, Mapping):
        known = {f.name for f in dataclasses.fields(cfg_type)}  # type: ignore[arg-type]
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(
                f"{field_name} has unknown keys {unknown}; expected some of {sorted(known)}."
            )
        return cfg_type(**dict(value))
    raise ValueError(
        f"{field_name} must be a {cfg_type.__name__} or a mapping, got {type(value).__name__}."
    )


@configclass
class OptimizerCfg:
    """Policy optimizer.

    Attributes:
        name: ``adam``, ``adamw``, ``sgd`` or ``rmsprop``.
        learning_rate: Base learning rate (the schedule scales it).
        kwargs: Further arguments of the PyTorch optimizer (``betas``, ``weight_decay``...).
    """

    name: str = "adam"
    learning_rate: float = 3e-4
    kwargs: dict[str, Any] = {}

    def validate(self) -> None:
        """Check the optimizer name, learning rate and kwargs."""
        if str(self.name).lower() not in OPTIMIZER_NAMES:
            raise ValueError(
                f"Unsupported optimizer '{self.name}': optimizer.name must be one of "
                f"{list(OPTIMIZER_NAMES)}."
            )
        if not self.learning_rate > 0.0:
            raise ValueError(f"optimizer.learning_rate must be positive, got {self.learning_rate}.")
        if "lr" in self.kwargs:
            raise ValueError(
                "Pass the learning rate as OptimizerCfg.learning_rate, i.e. "
                "optimizer.learning_rate, not optimizer.kwargs['lr']."
            )


@configclass
class LRSchedulerCfg:
    """Learning-rate schedule over optimizer updates, with optional linear warmup.

    ``name``: ``None``/``constant``, ``linear`` (``start_factor``, ``end_factor``,
    ``total_iters``), ``cosine`` (``T_max``, ``eta_min``), ``exponential``
    (``gamma`` per update) or ``step`` (``step_size``, ``gamma``); ``kwargs``
    use PyTorch's names. The decay horizon of linear and cosine (``total_iters``
    / ``T_max``) may be left out: the trainer then binds it to the update budget.
    During ``warmup_updates`` the factor rises linearly from
    ``warmup_start_factor`` to 1; the decay starts after the warmup.

    Attributes:
        name: ``null``/``constant``, ``linear``, ``cosine``, ``exponential`` or ``step``.
        kwargs: Schedule arguments, PyTorch's names: ``start_factor``, ``end_factor``,
            ``total_iters`` (linear); ``T_max``, ``eta_min`` (cosine); ``gamma``
            (exponential); ``step_size``, ``gamma`` (step).
        warmup_updates: Updates of linear warmup before the schedule starts.
        warmup_start_factor: Learning-rate factor at the first warmup update.
    """

    name: str | None = None
    kwargs: dict[str, Any] = {}
    warmup_updates: int = 0
    warmup_start_factor: float = 0.1

    def validate(self) -> None:
        """Check the schedule name, its kwargs and the warmup."""
        name = self.schedule_name
        if name not in LR_SCHEDULER_NAMES:
            raise ValueError(
                f"lr_scheduler.name must be one of {list(LR_SCHEDULER_NAMES)} or None, "
                f"got '{self.name}'."
            )
        unknown = sorted(set(self.kwargs) - _SCHEDULER_KWARGS[name])
        if unknown:
            raise ValueError(
                f"lr_scheduler.kwargs has unknown keys {unknown} for '{name}'; "
                f"expected some of {sorted(_SCHEDULER_KWARGS[name])}."
            )
        required = {"exponential": ("gamma",), "step": ("step_size",)}.get(name, ())
        for key in required:
            if key not in self.kwargs:
                raise ValueError(f"lr_scheduler.kwargs['{key}'] is required for '{name}'.")
        for key in ("total_iters", "T_max", "step_size"):
            if key in self.kwargs and not int(self.kwargs[key]) > 0:
                raise ValueError(f"lr_scheduler.kwargs['{key}'] must be positive.")
        for key in ("gamma", "start_factor", "end_factor"):
            if key in self.kwargs and not float(self.kwargs[key]) >= 0.0:
                raise ValueError(f"lr_scheduler.kwargs['{key}'] cannot be negative.")
        if self.warmup_updates < 0:
            raise ValueError("lr_scheduler.warmup_updates cannot be negative.")
        if not 0.0 <= self.warmup_start_factor <= 1.0:
            raise ValueError("lr_scheduler.warmup_start_factor must be in [0, 1].")

    @property
    def schedule_name(self) -> str:
        """The lower-case schedule name, ``constant`` when ``name`` is None."""
        return "constant" if self.name is None else str(self.name).lower()

    @property
    def horizon_key(self) -> str | None:
        """The kwargs key holding the decay horizon, if this schedule has one."""
        return _HORIZON_KEYS.get(self.schedule_name)


@configclass
class AlgorithmCfg:
    """Fields shared by algorithm configs.

    Mappings are accepted for ``optimizer`` and ``lr_scheduler`` and turned into
    their config classes.

    Attributes:
        device: Torch device of the policy and the losses (the env's).
        gamma: Per-step discount.
        max_grad_norm: Global gradient-norm clip before each optimizer step.
        optimizer: Optimizer config.
        lr_scheduler: Learning-rate schedule config.
    """

    device: str = "cpu"
    gamma: float = 0.99
    max_grad_norm: float = 1.0
    optimizer: OptimizerCfg = OptimizerCfg()
    lr_scheduler: LRSchedulerCfg = LRSchedulerCfg()

    def validate(self) -> None:
        """Check the shared fields and coerce nested configs."""
        self.optimizer = _coerce(self.optimizer, OptimizerCfg, "optimizer")
        self.lr_scheduler = _coerce(self.lr_scheduler, LRSchedulerCfg, "lr_scheduler")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}.")
        if not self.max_grad_norm > 0.0:
            raise ValueError(f"max_grad_norm must be positive, got {self.max_grad_norm}.")


def scheduler_needs_horizon(cfg: LRSchedulerCfg | Mapping[str, Any] | None) -> bool:
    """Whether ``cfg`` decays over a horizon that must come from the update budget."""
    cfg = _coerce(cfg, LRSchedulerCfg, "lr_scheduler")
    key = cfg.horizon_key
    return key is not None and key not in cfg.kwargs


def coerce_optimizer_cfg(value: OptimizerCfg | Mapping[str, Any] | None) -> OptimizerCfg:
    """An :class:`OptimizerCfg` from itself, a mapping of its fields, or ``None`` (defaults)."""
    return _coerce(value, OptimizerCfg, "optimizer")


def coerce_lr_scheduler_cfg(value: LRSchedulerCfg | Mapping[str, Any] | None) -> LRSchedulerCfg:
    """An :class:`LRSchedulerCfg` from itself, a mapping of its fields, or ``None``."""
    return _coerce(value, LRSchedulerCfg, "lr_scheduler")


def bind_scheduler_horizon(
    cfg: LRSchedulerCfg | Mapping[str, Any] | None, total_updates: int
) -> LRSchedulerCfg:
    """A copy of ``cfg`` whose omitted decay horizon ends after ``total_updates`` updates.

    The horizon (``total_iters``/``T_max``) counts the updates after the
    warmup: ``total_updates - warmup_updates``. Configs with an explicit
    horizon or without one are returned unchanged.

    Raises:
        ValueError: If ``total_updates`` is not positive or the warmup leaves no
            update for the decay.
    """
    cfg = coerce_lr_scheduler_cfg(cfg)
    if total_updates <= 0:
        raise ValueError(f"total_updates must be positive, got {total_updates}.")
    if not scheduler_needs_horizon(cfg):
        return cfg
    decay = total_updates - cfg.warmup_updates
    if decay <= 0:
        raise ValueError(
            f"lr_scheduler.warmup_updates ({cfg.warmup_updates}) must be smaller "
            f"than the update budget ({total_updates})."
        )
    return cfg.replace(kwargs={**cfg.kwargs, cfg.horizon_key: decay})
