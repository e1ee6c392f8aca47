"""Training and loading in one call, from Python: ``pathgrad.train`` and ``pathgrad.load``.

``train`` does what ``pathgrad train`` does (config validation, a run
directory with config, checkpoints, TensorBoard, ``metrics.jsonl``, summary,
plot and provenance; a final checkpoint on Ctrl-C) and returns the result
instead of an exit status. ``load`` gives the deterministic policy of a run or
checkpoint, ready to act on raw observations.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pathgrad.runs.builtin_configs import resolve_config as builtin_config_file
from pathgrad.runs.config import RunConfig, load_config, validate_config
from pathgrad.runs.config_sources import merge_layers
from pathgrad.runs.lifecycle import start_run
from pathgrad.runs.loading import LoadedPolicy, load

__all__ = ["EarlyStopping", "LoadedPolicy", "TrainResult", "load", "train"]


@dataclasses.dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        run_dir: The run directory.
        status: ``completed``, ``stopped early``, ``diverged``, ``interrupted`` or
            ``terminated``.
        summary: The run's ``summary.json``.
        policy: The trained policy (in the state of the final checkpoint).
        trainer: The trainer, for anything else.
    """

    run_dir: Path
    status: str
    summary: dict[str, Any]
    policy: Any
    trainer: Any


class EarlyStopping:
    """A trainer callback that ends training when a metric stops improving or reaches a target.

    Training then ends as at its budget: final evaluation, final checkpoint.
    Under torchrun rank 0's callbacks see the metrics; their request travels
    with the next update's gradient average, so every rank stops after the
    same update, one later than a single process would.

    Args:
        metric: Key of a training or evaluation record (``eval/avg_reward``,
            ``charts/episode_reward_avg_100``, ``train/loss``...).
        mode: ``max`` or ``min``: which way is better.
        patience: Records of ``metric`` without an improvement of more than
            ``min_delta`` before stopping (``None``: never for that reason).
        min_delta: The smallest change that counts as an improvement.
        target: Stop as soon as the metric reaches it (``None``: no target).
    """

    def __init__(
        self,
        metric: str = "eval/avg_reward",
        *,
        mode: str = "max",
        patience: int | None = 5,
        min_delta: float = 0.0,
        target: float | None = None,
    ) -> None:
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}.")
        if patience is not None and patience < 1:
            raise ValueError(f"patience must be at least 1 (or None), got {patience}.")
        if patience is None and target is None:
            raise ValueError("give a patience, a target or both.")
        self.metric, self.mode, self.patience = metric, mode, patience
        self.min_delta, self.target = float(min_delta), target
        self.best: float | None = None
        self.since_best = 0
        self.stop_training = False  # read by the trainer after every update
        self.reason: str | None = None

    def __call__(self, kind: str, entry: dict[str, float]) -> None:
        value = entry.get(self.metric)
        if value is None or not math.isfinite(value):
            return
        sign = 1.0 if self.mode == "max" else -1.0
        if self.target is not None and sign * (value - self.target) >= 0:
            self.stop_training = True
            self.reason = f"{self.metric} reached {value:.6g} (target {self.target:g})"
            return
        if self.best is None or sign * (value - self.best) > self.min_delta:
            self.best, self.since_best = value, 0
            return
        self.since_best += 1
        if self.patience is not None and self.since_best >= self.patience:
            self.stop_training = True
            self.reason = f"{self.metric} did not improve on {self.best:.6g} for {self.patience}"


def _progress_callback(progress_fn: Callable[[int, dict[str, float]], Any]) -> Callable:
    """A Brax-style ``progress_fn(num_steps, metrics)`` as a trainer callback."""

    def callback(kind: str, entry: dict[str, float]) -> None:
        progress_fn(int(entry["global_step"]), {"kind": kind, **entry})

    return callback


def resolve_config(config: str | Path | RunConfig | None, overrides: Sequence[str]) -> RunConfig:
    """A config file (or a shipped config's name, as ``pathgrad train`` takes it), a
    :class:`RunConfig` or the default task, with ``overrides`` applied."""
    if isinstance(config, RunConfig):
        return validate_config(merge_layers({}, config.model_dump(mode="python"), overrides))
    if config is not None:
        config = builtin_config_file(str(config)) or config
    return load_config(config, list(overrides))


def train(
    config: str | Path | RunConfig | None = None,
    overrides: Sequence[str] = (),
    *,
    callbacks: Sequence[Callable[[str, dict[str, float]], Any]] = (),
    progress_fn: Callable[[int, dict[str, float]], Any] | None = None,
    quiet: bool = True,
) -> TrainResult:
    """Train as ``pathgrad train`` does and return the result.

    Args:
        config: A YAML file, a :class:`RunConfig`, or ``None`` for the default task.
        overrides: Dotted overrides, e.g. ``["trainer.total_updates=100"]``.
        callbacks: ``callback(kind, entry)`` per training update (``kind``
            ``train``) and evaluation (``eval``); one with a true
            ``stop_training`` attribute (:class:`EarlyStopping`) ends training.
        progress_fn: Brax-style ``progress_fn(num_steps, metrics)``, called
            with the same records (``metrics["kind"]`` tells which).
        quiet: No progress bar or summary lines.

    Raises:
        ConfigError: For an invalid config (nothing is written then).
    """
    resolved = resolve_config(config, overrides)
    extra = list(callbacks) + ([_progress_callback(progress_fn)] if progress_fn else [])
    run_dir, trainer, status = start_run(resolved, list(overrides), extra, quiet=quiet)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    return TrainResult(run_dir.resolve(), status, summary, trainer.policy, trainer)
