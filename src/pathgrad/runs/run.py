"""A training run on disk: building it from a config, its directory, metrics and summary.

Run directory (``runs/<experiment>-<YYYYmmdd-HHMMSS>/``): ``config.yaml``
(resolved; ``pathgrad train <it>`` repeats the run), ``checkpoints/`` (with
``index.json``), ``tb/`` (TensorBoard), ``metrics.jsonl`` (one JSON object per
update and per evaluation), ``summary.json`` and ``learning_curve.png``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import torch

from pathgrad.core.atomic_files import atomic_write
from pathgrad.core.crash_report import user_line
from pathgrad.core.env_contract import EnvContractError
from pathgrad.core.run_index import json_safe
from pathgrad.distributed.context import rank_seed
from pathgrad.distributed.sync import DataParallel
from pathgrad.policies import GaussianMLPPolicy, Policy
from pathgrad.runs.config import ConfigError, RunConfig, dump_config, resolution, trainer_config
from pathgrad.squashed_normal import SquashedNormalPolicy
from pathgrad.trainer.trainer import DifferentiableTrainer

__all__ = [
    "CONFIG_FILE",
    "LOCK_FILE",
    "METRICS_FILE",
    "SUMMARY_FILE",
    "SWEEP_FILE",
    "MetricsLog",
    "RunDirectoryError",
    "RunLock",
    "RunObjects",
    "build_env",
    "build_policy",
    "build_run",
    "create_given_run_dir",
    "create_run_dir",
    "read_metrics",
    "write_config",
    "write_summary",
    "best_evaluation",
]

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
CURVE_FILE = "learning_curve.png"
LOCK_FILE = ".lock"
SWEEP_FILE = "sweep.json"  # a sweep folder's record of its runs (pathgrad.commands.sweep)


class RunDirectoryError(Exception):
    """A run directory cannot be used (taken by another process, unreadable files)."""


@dataclasses.dataclass
class RunObjects:
    """Everything a run trains with."""

    env: Any
    eval_env: Any
    policy: Policy
    algorithm: Any
    trainer: DifferentiableTrainer


def create_run_dir(config: RunConfig, now: float | None = None) -> Path:
    """Create a new, empty run directory ``<runs_dir>/<experiment>-<time>[-k]``.

    ``mkdir`` either creates the folder or fails, so runs started in the same
    second by several processes each get their own (``-1``, ``-2``... suffixes).

    Raises:
        RunDirectoryError: If ``logging.runs_dir`` cannot be written.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    runs_dir = Path(config.logging.runs_dir)
    base = runs_dir / f"{config.trainer.experiment_name}-{stamp}"
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
        for suffix in range(10_000):
            candidate = base if suffix == 0 else base.with_name(f"{base.name}-{suffix}")
            with contextlib.suppress(FileExistsError):
                candidate.mkdir()
                return candidate
    except OSError as error:
        raise RunDirectoryError(
            f"logging.runs_dir: cannot create a run directory in '{runs_dir}': "
            f"{error.strerror or error}"
        ) from error
    raise RunDirectoryError(f"logging.runs_dir: no free run directory name for '{base}'.")


def create_given_run_dir(path: Path) -> Path:
    """Create the run directory ``path`` (``train --run-dir``); an empty one is taken.

    Raises:
        RunDirectoryError: If ``path`` exists and is not empty, or cannot be created.
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        if any(path.iterdir()):
            raise RunDirectoryError(
                f"--run-dir: '{path}' already holds files; resume it with "
                f"`pathgrad resume {path}` or choose a new folder."
            )
    except OSError as error:
        raise RunDirectoryError(
            f"--run-dir: cannot create '{path}': {error.strerror or error}"
        ) from error
    return path


class RunLock:
    """Exclusive use of a run directory by one process (``fcntl.flock`` on ``<run>/.lock``).

    The operating system releases the lock when the process ends, however it
    ends, so a killed run never leaves its directory locked.
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._handle: Any = None

    def __enter__(self) -> RunLock:
        try:
            import fcntl
        except ImportError:  # no flock on this platform: nothing to hold
            return self
        try:
            handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 - held until exit
        except OSError as error:
            raise RunDirectoryError(
                f"cannot lock '{self.path.parent}': {error.strerror or error}"
            ) from error
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            handle.seek(0)
            owner = handle.read().strip() or "unknown"
            handle.close()
            raise RunDirectoryError(
                f"'{self.path.parent}' is in use by another pathgrad process (pid {owner})."
            ) from error
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._handle = handle
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def build_env(config: RunConfig, num_envs: int, seed: int, *, training: bool = False) -> Any:
    """The configured env with ``num_envs`` rows; dtype and seed where the env takes them.

    ``training``: the training envs, built with ``env.train_cfg`` over ``env.cfg``.
    """
    resolved = resolution(config)
    kwargs = {**config.env.cfg, **(config.env.train_cfg if training else {})}
    accepted = resolved.env_arguments
    if "dtype" in accepted:
        kwargs["dtype"] = config.env.dtype
    elif config.env.dtype != "float32":
        raise ConfigError(f"env.dtype: env '{config.env.name}' has no dtype argument.")
    if "seed" in accepted:
        kwargs["seed"] = seed
    try:
        return resolved.env_factory(
            num_envs=num_envs, device=torch.device(config.env.device), **kwargs
        )
    except EnvContractError:  # the env's own code, not its configuration: said as it is
        raise
    except (ValueError, TypeError, FileNotFoundError) as error:
        label = "env.train_cfg / env.cfg" if training and config.env.train_cfg else "env.cfg"
        where = user_line(error)  # raised by the user's own env: say where
        raise ConfigError(f"{label}: {error}{'' if where is None else f' (at {where})'}") from error


def build_policy(config: RunConfig, env: Any) -> Policy:
    """The configured policy, sized from the env's spaces, in the env's dtype and device.

    Raises:
        ConfigError: For an env without observations or actions (a passive model).
    """
    spaces = {"observations": env.single_observation_space, "actions": env.single_action_space}
    for what, space in spaces.items():
        if math.prod(space.shape) == 0:
            raise ConfigError(
                f"env.name: {config.env.name} has no {what} (a space of shape {space.shape}); "
                "a policy needs at least one of each (a Newton env: name its actuated_joints)."
            )
    section = config.policy
    if section.name == "actor_only":
        from pathgrad.models import build_policy as build_reference_policy

        block = {
            "name": "actor_only",
            "actor": section.actor,
            "initial_log_std": section.init_log_std,
        }
        policy = build_reference_policy(
            block, env.single_observation_space, env.single_action_space, config.env.device
        )
    elif section.name == "squashed_normal":
        low, high = section.log_std_range
        policy = SquashedNormalPolicy.from_spaces(
            env.single_observation_space,
            env.single_action_space,
            hidden_sizes=tuple(section.hidden_sizes),
            activation=section.activation,
            init_log_std=section.init_log_std,
            log_std_min=low,
            log_std_max=high,
            layer_norm=section.layer_norm,
        )
    else:
        policy = GaussianMLPPolicy.from_spaces(
            env.single_observation_space,
            env.single_action_space,
            hidden_sizes=tuple(section.hidden_sizes),
            activation=section.activation,
            init_log_std=section.init_log_std,
            squash=section.squash,
            layer_norm=section.layer_norm,
        )
    dtype = torch.float64 if config.env.dtype == "float64" else torch.float32
    return policy.to(device=torch.device(config.env.device), dtype=dtype)


def build_run(
    config: RunConfig, run_dir: Path, data_parallel: DataParallel | None = None
) -> RunObjects:
    """Build env, evaluation env, policy, algorithm and trainer; writes nothing.

    Checkpoints go to ``run_dir/checkpoints`` (``trainer.cfg.checkpoint_dir``,
    which may be set later, once the directory exists). With several ranks,
    each one's envs and sampling noise are seeded with
    :func:`~pathgrad.distributed.rank_seed` (rank 0 keeps ``trainer.seed``),
    networks are initialised from ``trainer.seed`` on every rank, and only
    rank 0 logs to Weights & Biases.

    Raises:
        ConfigError: If a component rejects its configuration.
    """
    data_parallel = data_parallel or DataParallel()
    data_parallel.seed = seed = config.trainer.seed
    own_seed = rank_seed(seed, data_parallel.rank)
    torch.manual_seed(seed)
    env = build_env(config, config.env.num_envs, own_seed, training=True)
    evaluates = config.eval.frequency_steps > 0 or config.eval.final  # final: the reference's
    eval_env = build_env(config, config.eval.num_envs, seed + 1) if evaluates else None
    policy = build_policy(config, env)
    resolved = resolution(config)
    try:
        algorithm_cfg = resolved.algorithm_cfg_type(
            **{"device": config.env.device, **config.algorithm.cfg}
        )
        algorithm = resolved.algorithm_factory(algorithm_cfg, policy, env)
        trainer_cfg = trainer_config(config, run_dir / "checkpoints")
        trainer_cfg.use_wandb = trainer_cfg.use_wandb and data_parallel.is_main
        if data_parallel.rank > 0:
            torch.manual_seed(own_seed)  # this rank's own sampling noise
        trainer = DifferentiableTrainer(
            trainer_cfg,
            env,
            policy,
            algorithm,
            eval_env=eval_env,
            data_parallel=data_parallel,
        )
    except (ValueError, TypeError, RuntimeError) as error:
        if isinstance(error, ConfigError):
            raise
        raise ConfigError(str(error)) from error
    config.trainer.num_threads = trainer.num_threads  # the run records the effective count
    trainer.checkpoint_extra["config"] = config.model_dump(mode="python")
    return RunObjects(env, eval_env, policy, algorithm, trainer)


def write_config(run_dir: Path, config: RunConfig) -> Path:
    """Write the resolved ``config.yaml`` atomically."""
    text = dump_config(config).encode()
    return atomic_write(run_dir / CONFIG_FILE, lambda handle: handle.write(text))


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

    def resume_at(
        self,
        num_updates: int,
        last_train: dict[str, Any] | None = None,
        last_eval: dict[str, Any] | None = None,
    ) -> list[str]:
        """Keep the lines of the work a checkpoint holds; continue the clock.

        Training lines up to update ``num_updates`` and evaluation lines up to
        the checkpoint's last evaluation (``last_eval``'s ``global_step``) stay;
        lines written after the checkpoint, a line cut by a crash and malformed
        lines are dropped, since the resumed run writes them again. The
        checkpoint's own last lines (``last_train``, ``last_eval``: its
        metrics), when the file lost them, are written again from it: the
        resumed run will not.

        Returns:
            One warning per malformed line dropped (naming the line) and per
            line written again.
        """
        last_eval_step = (last_eval or {}).get("global_step")
        records, problems = (
            _parse_lines(self.path, strict=False) if self.path.is_file() else ([], [])
        )
        kept = [
            record
            for record in records
            if (
                record.get("num_updates", 0) <= num_updates
                if record.get("kind") == "train"
                else last_eval_step is not None and record.get("global_step", 0) <= last_eval_step
            )
        ]
        notes = [f"{problem}; the line is dropped" for problem in problems]
        clock = float(kept[-1].get("time") or 0.0) if kept else 0.0
        for kind, metrics, counter, value in (
            ("train", last_train, "num_updates", num_updates),
            ("eval", last_eval, "global_step", last_eval_step),
        ):
            lost = (
                metrics
                and value
                and metrics.get(counter) == value
                and not any(r.get("kind") == kind and r.get(counter) == value for r in kept)
            )
            if lost:
                kept.append({"kind": kind, "time": clock, **json_safe(metrics)})
                notes.append(f"'{self.path}' had no {kind} line for {counter} {value:g}, the "
                             "checkpoint's; it is written again from the checkpoint")  # fmt: skip
        if kept:
            self.time_offset = float(kept[-1].get("time") or 0.0)
        payload = "".join(json.dumps(record) + "\n" for record in kept).encode()
        atomic_write(self.path, lambda handle: handle.write(payload))
        self._start = time.time()
        return notes

    def __call__(self, kind: str, entry: dict[str, float]) -> None:
        """Trainer callback: append one line."""
        record = {"kind": kind, "time": self.time_offset + time.time() - self._start}
        record.update(json_safe(entry))
        line = json.dumps(record, allow_nan=False) + "\n"
        try:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(line)
        except OSError as error:  # a failed write names no file
            if error.errno is None:
                raise
            raise type(error)(error.errno, error.strerror, str(self.path)) from error


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The records of a run's ``metrics.jsonl`` (empty if there is none).

    A last line cut short by a crash is skipped.

    Raises:
        ValueError: If another line is not a JSON object or has a counter
            (``num_updates``, ``global_step``, ``time``) that is not a number.
    """
    path = Path(run_dir) / METRICS_FILE
    return _parse_lines(path, strict=True)[0] if path.is_file() else []


_NUMBER_FIELDS = ("num_updates", "global_step", "time")


def _parse_lines(path: Path, *, strict: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """JSON objects of ``path``, one per line, and a note per malformed line left out.

    A line is malformed when it is not a JSON object or its ``num_updates``,
    ``global_step`` or ``time`` is not a number. With ``strict`` the first
    malformed line raises, except a last line cut short (a crash mid-write
    leaves one), which is dropped (with a note unless ``strict``).
    """
    lines = path.read_bytes().splitlines()
    records, problems = [], []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        record, problem = _parse_line(line)
        if problem is None:
            records.append(record)
            continue
        if record is None and number == len(lines):  # cut short by a crash mid-write
            if not strict:  # resume: said once, as it rewrites the file without it
                problems.append(f"'{path}' line {number} is cut short (a write stopped midway)")
            continue
        message = f"'{path}' line {number} {problem}"
        if strict:
            raise ValueError(f"{message}.")
        problems.append(message)
    return records, problems


def _parse_line(line: bytes) -> tuple[Any, str | None]:
    """The JSON value of one line (None where it is not JSON) and what is wrong with it."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        byte = line[error.start]
        return None, f"is not UTF-8 text (byte 0x{byte:02x} at column {error.start + 1})"
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        record = None
    return record, _record_problem(record)


def _record_problem(record: Any) -> str | None:
    if not isinstance(record, dict):
        return "is not a JSON object"
    for field in _NUMBER_FIELDS:
        value = record.get(field)
        if field in record and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"has a {field} that is not a number ({json.dumps(value)[:40]})"
    return None


def write_summary(
    run_dir: Path, trainer: DifferentiableTrainer, status: str, error: str | None = None
) -> Path:
    """Write ``summary.json``: status, counters, last metrics, checkpoint paths, the best
    evaluation (:func:`best_evaluation`), error."""
    summary = trainer.get_summary()
    for key in ("train_history", "eval_history"):
        summary.pop(key)
    summary["status"] = status
    summary["best_evaluation"] = best_evaluation(
        run_dir, trainer.cfg.best_eval_metric, trainer.cfg.best_eval_mode
    )
    if error is not None:
        summary["error"] = error
    payload = json.dumps(json_safe(summary), indent=2, allow_nan=False).encode()
    return atomic_write(run_dir / SUMMARY_FILE, lambda handle: handle.write(payload))


def best_evaluation(run_dir: Path, metric: str, mode: str) -> dict[str, float] | None:
    """The evaluation of ``metrics.jsonl`` with the best ``metric`` (``mode`` ``max`` or
    ``min``; the first of equals): its value, ``global_step`` and ``time`` (wall seconds
    since the run began, resumes included); ``None`` before any evaluation."""
    path = Path(run_dir) / METRICS_FILE
    records = _parse_lines(path, strict=False)[0] if path.is_file() else []
    best = None
    for record in records:
        value = record.get(metric)
        if record.get("kind") != "eval" or not isinstance(value, (int, float)):
            continue
        if not math.isfinite(value) or (best is not None and not (
            value > best[metric] if mode == "max" else value < best[metric]
        )):  # fmt: skip
            continue
        best = record
    if best is None:
        return None
    return {"metric": metric, "value": best[metric], "global_step": best.get("global_step"),
            "time": best.get("time")}  # fmt: skip
