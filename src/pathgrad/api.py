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

import torch

from pathgrad.runs.config import RunConfig, load_config, validate_config
from pathgrad.runs.config_sources import merge_layers

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
    """A config file, a :class:`RunConfig` or the default task, with ``overrides`` applied."""
    if isinstance(config, RunConfig):
        return validate_config(merge_layers({}, config.model_dump(mode="python"), overrides))
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
    from pathgrad.commands.training import start_run

    resolved = resolve_config(config, overrides)
    extra = list(callbacks) + ([_progress_callback(progress_fn)] if progress_fn else [])
    run_dir, trainer, status = start_run(resolved, list(overrides), extra, quiet=quiet)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    return TrainResult(run_dir.resolve(), status, summary, trainer.policy, trainer)


class LoadedPolicy:
    """The deterministic policy of a run or checkpoint: normalizer folded in, actions bounded.

    Attributes:
        config: The run's config.
        module: The :class:`~pathgrad.export.DeployedPolicy` (a ``torch.nn.Module``).
        checkpoint_path: The checkpoint it came from.
        env: A one-env instance of the run's env, to act in.
    """

    def __init__(
        self, config: RunConfig, module: torch.nn.Module, checkpoint_path: Path, env: Any
    ) -> None:
        self.config, self.module, self.checkpoint_path = config, module, checkpoint_path
        self.env = env

    @torch.no_grad()
    def predict(self, observation: Any, deterministic: bool = True) -> Any:
        """Actions for observations ``[D]`` or ``[B, D]`` (tensor or array; same kind back).

        Raises:
            ValueError: For ``deterministic=False`` (the loaded policy is its mean).
        """
        if not deterministic:
            raise ValueError("a loaded policy acts deterministically (its mean action).")
        is_tensor = isinstance(observation, torch.Tensor)
        dtype = self.module.shift.dtype
        batch = torch.as_tensor(observation, dtype=dtype)
        single = batch.ndim == 1
        actions = self.module(batch.unsqueeze(0) if single else batch)
        actions = actions[0] if single else actions
        return actions if is_tensor else actions.numpy()


def load(target: str | Path, device: str = "cpu") -> LoadedPolicy:
    """The policy of a run directory (its latest checkpoint) or of a checkpoint file.

    Raises:
        UsageError: (``pathgrad.UsageError``, a ValueError) For a missing,
            malformed or mismatched file, a folder that is not a run directory,
            or a run whose latest checkpoint has another env or policy sizes.
    """
    from pathgrad.commands.inspection import load_for_evaluation, policy_from_checkpoint
    from pathgrad.core.action_bounds import action_space_bounds
    from pathgrad.export import DeployedPolicy
    from pathgrad.runs.run import build_env

    config, checkpoint, path = load_for_evaluation(Path(target), device)
    env = build_env(config, 1, config.trainer.seed)
    policy, normalizer = policy_from_checkpoint(config, checkpoint, env, path)
    bounds = action_space_bounds(env.single_action_space, config.env.device)
    module = DeployedPolicy(policy, normalizer, bounds).eval()
    return LoadedPolicy(config, module, path, env)
