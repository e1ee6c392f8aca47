"""Checkpoint files: format, schema versions, atomic save and validated load.

A checkpoint is one file that ``torch.load(weights_only=True)`` reads: tensors,
numbers, strings, lists and dicts only, so loading never runs code from it.
It is written with :func:`~pathgrad.core.atomic_files.atomic_write` (a crash at any
instant leaves the previous checkpoint intact) and recorded in the run index
(:mod:`pathgrad.core.run_index`). Files of an older schema version are
migrated on read.
"""

from __future__ import annotations

import io
import pickle
import time
import warnings
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from pathgrad.core.atomic_files import atomic_write
from pathgrad.core.run_index import (
    INDEX_FILENAME,
    index_entry,
    latest_checkpoint,
    read_index,
    record_in_index,
)
from pathgrad.core.run_index import rebuild_index as _rebuild_index_with
from pathgrad.core.state_checks import check_state_shapes

if TYPE_CHECKING:
    from pathgrad.core.trainer_state import TrainerState

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_SCHEMA_VERSION",
    "INDEX_FILENAME",
    "atomic_write",
    "latest_checkpoint",
    "read_checkpoint",
    "read_index",
    "rebuild_index",
]

CHECKPOINT_FORMAT = "pathgrad.checkpoint"
CHECKPOINT_SCHEMA_VERSION = 2
CHECKPOINT_KINDS = ("periodic", "best", "final")
_MAPPING_ENTRIES = ("policy", "algorithm", "rng")
_COUNTER_ENTRIES = ("global_step", "num_updates")


def _migrate_v1(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """Version 1 lacked the trainer's pending work and last training metrics.

    Its loader recomputed the next evaluation step and assumed the save of
    the saved update was done; the migrated file resumes the same way.
    """
    return {
        **checkpoint,
        "schema_version": 2,
        "next_eval_step": None,
        "saved_update": checkpoint.get("num_updates"),
        "last_train_metrics": {},
    }


# version -> function turning a checkpoint of that version into the next one
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _migrate_v1}


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load, check and migrate a checkpoint file on the CPU without executing code from it.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
        ValueError: If the file is empty, truncated, foreign, malformed or of
            an unknown schema version.
    """
    path = Path(path)
    if path.is_dir():
        raise FileNotFoundError(f"Checkpoint '{path}' is a directory, not a checkpoint file.")
    if not path.is_file():
        raise FileNotFoundError(f"Checkpoint '{path}' does not exist.")
    if path.stat().st_size == 0:
        raise ValueError(f"'{path}' is empty, not a pathgrad checkpoint.")
    try:
        with warnings.catch_warnings():  # torch's warnings about foreign pickles: ours says it
            warnings.simplefilter("ignore")
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        # torch's message advises weights_only=False, which would run the file's code: not ours
        if "Unsupported global" in str(error):
            raise ValueError(
                f"'{path}' is not a pathgrad checkpoint: it holds Python objects beyond "
                "tensors, numbers, strings, lists and dicts (classes or code, which pathgrad "
                "never loads)."
            ) from error
        raise ValueError(
            f"'{path}' is not a readable pathgrad checkpoint (truncated, corrupted or foreign "
            "file): not a file of tensors that torch.load reads safely."
        ) from error
    except Exception as error:  # noqa: BLE001 - any unreadable file gets one message
        detail = (str(error).strip().splitlines() or [""])[0].split(". ")[0]  # first sentence
        reason = f"{type(error).__name__}{': ' + detail if detail else ''}"
        if not zipfile.is_zipfile(path):  # torch's KeyError or IndexError would say nothing
            reason = "not the zip archive torch.save writes."
        raise ValueError(
            f"'{path}' is not a readable pathgrad checkpoint (truncated, corrupted or "
            f"foreign file): {reason}"
        ) from error
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"'{path}' is not a pathgrad checkpoint (no '{CHECKPOINT_FORMAT}' tag).")
    version = checkpoint.get("schema_version")
    while version in MIGRATIONS:
        checkpoint = MIGRATIONS[version](checkpoint)
        version = checkpoint["schema_version"]
    if version != CHECKPOINT_SCHEMA_VERSION:
        raise ValueError(
            f"'{path}' has checkpoint schema version {version!r}; this pathgrad reads "
            f"versions {sorted({*MIGRATIONS, CHECKPOINT_SCHEMA_VERSION})}."
        )
    missing = [key for key in (*_COUNTER_ENTRIES, *_MAPPING_ENTRIES) if key not in checkpoint]
    if missing:
        raise ValueError(f"'{path}' lacks the checkpoint entries {missing}.")
    for key in _COUNTER_ENTRIES:
        value = checkpoint[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"'{path}': entry '{key}' must be a non-negative integer.")
    for key in _MAPPING_ENTRIES:
        if not isinstance(checkpoint[key], Mapping):
            raise ValueError(f"'{path}': entry '{key}' must be a mapping.")
    if not isinstance(checkpoint["rng"].get("torch"), torch.Tensor):
        raise ValueError(f"'{path}': entry 'rng' lacks torch's generator state.")
    return checkpoint


def rebuild_index(directory: str | Path) -> list[dict[str, Any]]:
    """Rewrite ``directory/index.json`` from the readable checkpoint files in it.

    An existing index is kept as ``index.json.corrupt-<time>``; entries are
    ordered by update, then save time.

    Returns:
        The new entries.
    """
    return _rebuild_index_with(directory, read_checkpoint)


def _rng_state(device: torch.device) -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if device.type == "cuda" and torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_cuda_rng_states(states: list[torch.Tensor]) -> None:
    """Restore the saved generator of every CUDA device this machine has.

    A checkpoint written on a machine with more GPUs carries more states than
    there are devices here; the extra ones belong to devices the run cannot
    use and are left out (``torch.cuda.set_rng_state_all`` would fail with an
    invalid device ordinal).
    """
    for index, state in enumerate(states[: torch.cuda.device_count()]):
        torch.cuda.set_rng_state(state, index)


def _optional_state(component: Any) -> dict[str, Any] | None:
    state_dict = getattr(component, "state_dict", None)
    return state_dict() if callable(state_dict) else None


def _save(
    trainer: TrainerState,
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
        # Before the first rollout the envs are not reset yet: a resume resets them too.
        "env_started": trainer.collector.observation is not None,
        "eval_env": _optional_state(trainer.eval_env) if trainer.eval_env is not None else None,
        **extra,
    }
    # Serialized in memory first: torch's zip writer turns a full disk into a RuntimeError
    # of its own, while a plain write raises OSError (ENOSPC) naming the cause.
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    payload = buffer.getbuffer()
    atomic_write(path, lambda handle: handle.write(payload))
    trainer.latest_checkpoint_path = str(path)
    record_in_index(path, index_entry(checkpoint), read_checkpoint)
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
    trainer: TrainerState,
    path: str | Path,
    resume_scheduler: str,
    *,
    restore_env_state: bool = True,
    checkpoint: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Validate a checkpoint fully, then restore it into ``trainer``.

    Nothing is changed when validation fails. With ``restore_env_state``
    false, the envs keep their state and the next update starts from a
    fresh reset (the reference trainer's behaviour). ``checkpoint``: the
    file's contents when the caller has already read them.
    """
    if resume_scheduler not in ("restore", "restart"):
        raise ValueError("resume_scheduler must be 'restore' or 'restart'.")
    if checkpoint is None:
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
    envs = [("env", trainer.env), ("eval_env", trainer.eval_env)] if restore_env_state else []
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
        restore_cuda_rng_states(checkpoint["rng"]["cuda"])
    env_restored = (
        restore_env_state
        and checkpoint.get("env") is not None
        and callable(getattr(trainer.env, "load_state_dict", None))
    )
    if env_restored and checkpoint.get("env_started", True) is False:
        trainer.collector.clear_observation()  # saved before the first reset, as it will be
    elif env_restored:
        trainer.collector.detach_state()
    else:
        trainer.collector.clear_observation()
        trainer.episodes.restart_episodes()  # the next update resets every env
    return checkpoint
