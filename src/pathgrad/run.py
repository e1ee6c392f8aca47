"""A training run on disk: building it from a config, its directory, metrics and summary.

Run directory (``runs/<experiment>-<YYYYmmdd-HHMMSS>/``): ``config.yaml``
(resolved; ``pathgrad train <it>`` repeats the run), ``checkpoints/`` (with
``index.json``), ``tb/`` (TensorBoard), ``metrics.jsonl`` (one JSON object per
update and per evaluation), ``summary.json`` and ``learning_curve.png``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import torch

from pathgrad.algo.registry import get_algorithm
from pathgrad.checkpoint import atomic_write
from pathgrad.config import (
    ConfigError,
    RunConfig,
    _env_parameters,
    algorithm_config,
    dump_config,
    env_kwargs,
    trainer_config,
)
from pathgrad.differentiable_trainer import DifferentiableTrainer
from pathgrad.env import build_learning_env, get_learning_env_factory
from pathgrad.policies import GaussianMLPPolicy

__all__ = [
    "MetricsLog",
    "RunObjects",
    "build_env",
    "build_policy",
    "build_run",
    "new_run_dir",
    "write_config",
    "write_summary",
]

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
CURVE_FILE = "learning_curve.png"


@dataclasses.dataclass
class RunObjects:
    """Everything a run trains with."""

    env: Any
    eval_env: Any
    policy: GaussianMLPPolicy
    algorithm: Any
    trainer: DifferentiableTrainer


def new_run_dir(config: RunConfig, now: float | None = None) -> Path:
    """A fresh run directory path (not created): never the path of an existing run."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    base = Path(config.logging.runs_dir) / f"{config.trainer.experiment_name}-{stamp}"
    candidate, suffix = base, 1
    while candidate.exists():
        candidate = base.with_name(f"{base.name}-{suffix}")
        suffix += 1
    return candidate


def build_env(config: RunConfig, num_envs: int, seed: int) -> Any:
    """The configured env with ``num_envs`` rows; dtype and seed where the env takes them."""
    kwargs = env_kwargs(config)
    accepted = _env_parameters(get_learning_env_factory(config.env.name))
    if "dtype" in accepted:
        kwargs["dtype"] = config.env.dtype
    elif config.env.dtype != "float32":
        raise ConfigError(f"env.dtype: env '{config.env.name}' has no dtype argument.")
    if "seed" in accepted:
        kwargs["seed"] = seed
    try:
        return build_learning_env(
            config.env.name, num_envs=num_envs, device=config.env.device, **kwargs
        )
    except (ValueError, TypeError) as error:
        raise ConfigError(f"env.cfg: {error}") from error


def build_policy(config: RunConfig, env: Any) -> GaussianMLPPolicy:
    """The configured policy, sized from the env's spaces, in the env's dtype and device."""
    section = config.policy
    policy = GaussianMLPPolicy.from_spaces(
        env.single_observation_space,
        env.single_action_space,
        hidden_sizes=tuple(section.hidden_sizes),
        activation=section.activation,
        init_log_std=section.init_log_std,
        squash=section.squash,
    )
    dtype = torch.float64 if config.env.dtype == "float64" else torch.float32
    return policy.to(device=torch.device(config.env.device), dtype=dtype)


def build_run(config: RunConfig, run_dir: Path) -> RunObjects:
    """Build env, evaluation env, policy, algorithm and trainer; writes nothing.

    Raises:
        ConfigError: If a component rejects its configuration.
    """
    seed = config.trainer.seed
    torch.manual_seed(seed)
    env = build_env(config, config.env.num_envs, seed)
    eval_env = (
        build_env(config, config.eval.num_envs, seed + 1)
        if config.eval.frequency_steps > 0
        else None
    )
    policy = build_policy(config, env)
    build_algorithm, _ = get_algorithm(config.algorithm.name)
    try:
        algorithm = build_algorithm(algorithm_config(config), policy, env)
        trainer = DifferentiableTrainer(
            trainer_config(config, run_dir / "checkpoints"),
            env,
            policy,
            algorithm,
            eval_env=eval_env,
        )
    except (ValueError, TypeError, RuntimeError) as error:
        if isinstance(error, ConfigError):
            raise
        raise ConfigError(str(error)) from error
    trainer.checkpoint_extra["config"] = config.model_dump(mode="python")
    return RunObjects(env, eval_env, policy, algorithm, trainer)


def write_config(run_dir: Path, config: RunConfig) -> Path:
    """Write the resolved ``config.yaml`` atomically."""
    text = dump_config(config).encode()
    return atomic_write(run_dir / CONFIG_FILE, lambda handle: handle.write(text))


def _json_value(value: Any) -> Any:
    """JSON has no NaN: non-finite floats become ``null`` (in nested values too)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(item) for item in value]
    return value


class MetricsLog:
    """Appends one JSON object per training update or evaluation to ``metrics.jsonl``.

    Each line carries ``kind`` (``train`` or ``eval``), the trainer's metrics
    and ``time``: wall seconds of training since the run began, continued
    across resumes.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.time_offset = 0.0
        self._start = time.time()

    def resume_at(self, global_step: int) -> None:
        """Drop lines after ``global_step`` (work lost since the checkpoint); continue the clock."""
        if not self.path.is_file():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if line.strip() and json.loads(line).get("global_step", 0) <= global_step:
                kept.append(line)
        if kept:
            self.time_offset = float(json.loads(kept[-1]).get("time") or 0.0)
        payload = "".join(line + "\n" for line in kept).encode()
        atomic_write(self.path, lambda handle: handle.write(payload))
        self._start = time.time()

    def __call__(self, kind: str, entry: dict[str, float]) -> None:
        """Trainer callback: append one line."""
        record = {"kind": kind, "time": self.time_offset + time.time() - self._start}
        record.update({key: _json_value(value) for key, value in entry.items()})
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The lines of a run's ``metrics.jsonl`` (empty if there is none)."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def write_summary(run_dir: Path, trainer: DifferentiableTrainer, status: str) -> Path:
    """Write ``summary.json``: status, counters, last metrics and checkpoint paths."""
    summary = trainer.get_summary()
    for key in ("train_history", "eval_history"):
        summary.pop(key)
    summary["status"] = status
    payload = json.dumps(_json_value(summary), indent=2).encode()
    return atomic_write(run_dir / SUMMARY_FILE, lambda handle: handle.write(payload))
