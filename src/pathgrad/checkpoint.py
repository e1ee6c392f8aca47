"""Atomic checkpoint files and the run index beside them.

A checkpoint is one file that ``torch.load(weights_only=True)`` reads: tensors,
numbers, strings, lists and dicts only, so loading never runs code from it.
Files are written to a temporary file in the same folder, flushed, fsynced and
moved into place with ``os.replace``: a crash at any instant leaves the
previous checkpoint intact. ``index.json`` lists every checkpoint of the
folder and is rewritten the same way after each save.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import torch

from pathgrad.state_checks import check_state_shapes

if TYPE_CHECKING:
    from pathgrad.differentiable_trainer import DifferentiableTrainer

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_SCHEMA_VERSION",
    "INDEX_FILENAME",
    "atomic_write",
    "latest_checkpoint",
    "read_checkpoint",
    "read_index",
]

CHECKPOINT_FORMAT = "pathgrad.checkpoint"
CHECKPOINT_SCHEMA_VERSION = 1
INDEX_FILENAME = "index.json"
CHECKPOINT_KINDS = ("periodic", "best", "final")
_REQUIRED_ENTRIES = ("global_step", "num_updates", "policy", "algorithm", "rng")


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None]) -> Path:
    """Write a file through ``write(fileobj)`` so that it appears whole or not at all."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=".tmp", dir=path.parent
    )
    try:
        with os.fdopen(descriptor, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    _fsync_directory(path.parent)
    return path


def _fsync_directory(directory: Path) -> None:
    """Make a rename durable (no-op where directories cannot be opened)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load and check a checkpoint file on the CPU without executing code from it.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If the file is truncated, foreign, or of another schema.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Checkpoint '{path}' does not exist.")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any unreadable file gets one message
        raise ValueError(
            f"'{path}' is not a readable pathgrad checkpoint (truncated, corrupted or "
            f"foreign file): {type(error).__name__}: {str(error).splitlines()[0]}"
        ) from error
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"'{path}' is not a pathgrad checkpoint (no '{CHECKPOINT_FORMAT}' tag).")
    version = checkpoint.get("schema_version")
    if version != CHECKPOINT_SCHEMA_VERSION:
        raise ValueError(
            f"'{path}' has checkpoint schema version {version}; this pathgrad reads "
            f"version {CHECKPOINT_SCHEMA_VERSION}."
        )
    missing = [key for key in _REQUIRED_ENTRIES if key not in checkpoint]
    if missing:
        raise ValueError(f"'{path}' lacks the checkpoint entries {missing}.")
    return checkpoint


def read_index(directory: str | Path) -> list[dict[str, Any]]:
    """Entries of ``directory/index.json`` in save order (empty if there is none)."""
    index_path = Path(directory) / INDEX_FILENAME
    if not index_path.is_file():
        return []
    with open(index_path, encoding="utf-8") as handle:
        return list(json.load(handle)["checkpoints"])


def latest_checkpoint(directory: str | Path) -> Path:
    """The most recently saved checkpoint of the index whose file still exists.

    Raises:
        FileNotFoundError: If the index lists no existing checkpoint.
    """
    directory = Path(directory)
    for entry in reversed(read_index(directory)):
        candidate = directory / entry["file"]
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"No checkpoint is listed in '{directory / INDEX_FILENAME}'.")


def _record_in_index(path: Path, entry: dict[str, Any]) -> None:
    """Add (or replace) the entry of ``path`` and rewrite the index atomically."""
    entries = [item for item in read_index(path.parent) if item["file"] != path.name]
    entries.append({"file": path.name, **entry})
    payload = json.dumps({"checkpoints": entries}, indent=2, allow_nan=True).encode()
    atomic_write(path.parent / INDEX_FILENAME, lambda handle: handle.write(payload))


def _rng_state(device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if device.type == "cuda" and torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _optional_state(component: Any) -> dict[str, Any] | None:
    state_dict = getattr(component, "state_dict", None)
    return state_dict() if callable(state_dict) else None


def _save(
    trainer: DifferentiableTrainer,
    path: str | Path,
    extra: Mapping[str, Any],
    kind: str = "periodic",
) -> str:
    """Write the trainer's learning state to ``path`` and record it in the index."""
    if kind not in CHECKPOINT_KINDS:
        raise ValueError(f"kind must be one of {list(CHECKPOINT_KINDS)}, got '{kind}'.")
    path = Path(path)
    checkpoint = {
        "format": CHECKPOINT_FORMAT,
        "schema_version": CHECKPOINT_SCHEMA_VERSION,
        "kind": kind,
        "saved_at": time.time(),
        "global_step": trainer.global_step,
        "num_updates": trainer.num_updates,
        "policy": trainer.policy.state_dict(),
        "algorithm": trainer.algorithm.state_dict(),
        "best_eval_value": trainer.best_eval_value,
        "best_checkpoint_path": trainer.best_checkpoint_path,
        "last_eval_metrics": dict(trainer.last_eval_metrics),
        "episode_statistics": trainer.episodes.state_dict(),
        "rng": _rng_state(trainer.algorithm.device),
        "env": _optional_state(trainer.env),
        "eval_env": _optional_state(trainer.eval_env) if trainer.eval_env is not None else None,
        **extra,
    }
    atomic_write(path, lambda handle: torch.save(checkpoint, handle))
    trainer.latest_checkpoint_path = str(path)
    _record_in_index(
        path,
        {
            "global_step": trainer.global_step,
            "num_updates": trainer.num_updates,
            "time": checkpoint["saved_at"],
            "kind": kind,
            "eval": dict(trainer.last_eval_metrics),
        },
    )
    return str(path)


def _check_component(
    entry: str, saved: Mapping[str, Any] | None, component: Any, setting: str
) -> None:
    """A saved component state and the trainer's component must both exist or neither."""
    if saved is not None and component is None:
        raise ValueError(f"Checkpoint has '{entry}' state but the trainer has no {setting}.")
    if saved is None and component is not None:
        raise ValueError(f"The trainer has a {setting} but the checkpoint has no '{entry}'.")


def _load(
    trainer: DifferentiableTrainer, path: str | Path, resume_scheduler: str
) -> dict[str, Any]:
    """Validate a checkpoint fully, then restore it into ``trainer``.

    Nothing is changed when validation fails.
    """
    if resume_scheduler not in ("restore", "restart"):
        raise ValueError("resume_scheduler must be 'restore' or 'restart'.")
    checkpoint = read_checkpoint(path)
    check_state_shapes("policy", checkpoint["policy"], trainer.policy.state_dict())
    trainer.algorithm.validate_state_dict(checkpoint["algorithm"])
    saved_normalizer = checkpoint.get("observation_normalizer")
    normalizer = trainer.observation_normalizer
    _check_component(
        "observation_normalizer", saved_normalizer, normalizer, "observation normalizer"
    )
    if saved_normalizer is not None:
        check_state_shapes("observation_normalizer", saved_normalizer, normalizer.state_dict())
    envs = [("env", trainer.env), ("eval_env", trainer.eval_env)]
    backups = {name: _optional_state(env) for name, env in envs if env is not None}
    try:
        for name, env in envs:
            saved_env = checkpoint.get(name)
            if env is not None and saved_env is not None and backups[name] is not None:
                env.load_state_dict(saved_env)
    except Exception:
        for name, env in envs:
            if env is not None and backups[name] is not None:
                env.load_state_dict(backups[name])
        raise
    trainer.policy.load_state_dict(checkpoint["policy"])
    trainer.algorithm.load_state_dict(checkpoint["algorithm"], resume_scheduler=resume_scheduler)
    if saved_normalizer is not None:
        normalizer.load_state_dict(saved_normalizer)
    trainer.global_step = int(checkpoint["global_step"])
    trainer.num_updates = int(checkpoint["num_updates"])
    trainer.best_eval_value = checkpoint.get("best_eval_value")
    trainer.best_checkpoint_path = checkpoint.get("best_checkpoint_path")
    trainer.last_eval_metrics = dict(checkpoint.get("last_eval_metrics", {}))
    trainer.latest_checkpoint_path = str(path)
    if "episode_statistics" in checkpoint:
        trainer.episodes.load_state_dict(checkpoint["episode_statistics"])
    torch.set_rng_state(checkpoint["rng"]["torch"])
    if "cuda" in checkpoint["rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(checkpoint["rng"]["cuda"])
    if checkpoint.get("env") is not None and callable(
        getattr(trainer.env, "load_state_dict", None)
    ):
        trainer.collector.detach_state()
    else:
        trainer.collector.clear_observation()
    return checkpoint
