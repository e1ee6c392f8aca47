"""The run index: ``index.json`` beside the checkpoints, listing them in save order.

The index is a summary of the checkpoint files, which hold the truth: every
entry can be rebuilt from its file (:func:`rebuild_index`). It is rewritten
atomically after each save and is always strict JSON (no ``NaN``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pathgrad.core.atomic_files import atomic_write

__all__ = [
    "INDEX_FILENAME",
    "index_entry",
    "json_safe",
    "latest_checkpoint",
    "prune_checkpoints",
    "read_index",
    "rebuild_index",
    "record_in_index",
    "write_index",
]

INDEX_FILENAME = "index.json"


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats replaced by ``None`` (JSON has no NaN), nested too."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def read_index(directory: str | Path) -> list[dict[str, Any]]:
    """Entries of ``directory/index.json`` in save order (empty if there is none).

    Raises:
        ValueError: If the index is unreadable, not JSON, or not a list of
            entries that each name a checkpoint file in the folder.
    """
    path = Path(directory) / INDEX_FILENAME
    if not path.is_file():
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"cannot read '{path}': {error}") from error
    if not text.strip():
        raise ValueError(f"'{path}' is empty.")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"'{path}' is not valid JSON ({error.msg} at line {error.lineno}, "
            f"column {error.colno})."
        ) from error
    entries = data.get("checkpoints") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"'{path}' must hold an object with a 'checkpoints' list.")
    for position, entry in enumerate(entries):
        name = entry.get("file") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name or Path(name).name != name:
            raise ValueError(
                f"'{path}': checkpoints[{position}] must be an object whose 'file' is the "
                "name of a checkpoint in the same folder."
            )
    return entries


def latest_checkpoint(directory: str | Path) -> Path:
    """The most recently saved checkpoint of the index whose file still exists.

    Raises:
        FileNotFoundError: If the index lists no existing checkpoint.
        ValueError: If the index is malformed (see :func:`read_index`).
    """
    directory = Path(directory)
    for entry in reversed(read_index(directory)):
        candidate = directory / entry["file"]
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"No checkpoint is listed in '{directory / INDEX_FILENAME}'.")


def index_entry(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The index fields of a checkpoint (everything but the file name)."""
    return {
        "global_step": int(checkpoint["global_step"]),
        "num_updates": int(checkpoint["num_updates"]),
        "time": float(checkpoint.get("saved_at", 0.0)),
        "kind": checkpoint.get("kind", "periodic"),
        "eval": dict(checkpoint.get("last_eval_metrics", {})),
    }


def record_in_index(
    path: Path, entry: dict[str, Any], read: Callable[[Path], dict[str, Any]]
) -> None:
    """Add (or replace) the entry of ``path`` and rewrite the index atomically.

    A malformed index is moved aside (``index.json.corrupt-<time>``) and
    rebuilt from the checkpoint files first (each read with ``read``, the
    checkpoint format's reader), so a save never fails on it.
    """
    try:
        entries = read_index(path.parent)
    except ValueError:
        entries = _rebuild_entries(path.parent, read, set_aside=True)
    entries = [item for item in entries if item["file"] != path.name]
    entries.append({"file": path.name, **entry})
    _write_index(path.parent, entries)


def prune_checkpoints(directory: str | Path, keep_last: int, keep: set[str]) -> list[str]:
    """Delete all but the newest ``keep_last`` periodic checkpoints, the newest final one
    and the files named in ``keep`` (the current best); returns the deleted names.

    The index is rewritten first, so a crash in between leaves files the index
    does not name (harmless), never an index naming a deleted file.
    """
    directory = Path(directory)
    entries = read_index(directory)
    ordered = sorted(entries, key=lambda item: (item["num_updates"], item["time"]))
    periodic = [item["file"] for item in ordered if item["kind"] == "periodic"]
    finals = [item["file"] for item in ordered if item["kind"] == "final"]
    kept = set(periodic[-keep_last:]) | set(finals[-1:]) | set(keep)
    doomed = [item["file"] for item in entries if item["file"] not in kept]
    if not doomed:
        return []
    _write_index(directory, [item for item in entries if item["file"] in kept])
    for name in doomed:
        (directory / name).unlink(missing_ok=True)
    return doomed


def rebuild_index(
    directory: str | Path, read: Callable[[Path], dict[str, Any]]
) -> list[dict[str, Any]]:
    """Rewrite ``directory/index.json`` from the checkpoint files in it, read with ``read``.

    An existing index is kept as ``index.json.corrupt-<time>``; unreadable
    files are left out. Entries are ordered by update, then save time.
    :func:`pathgrad.checkpoint.rebuild_index` passes the checkpoint reader.

    Returns:
        The new entries.
    """
    directory = Path(directory)
    entries = _rebuild_entries(directory, read, set_aside=True)
    _write_index(directory, entries)
    return entries


def _rebuild_entries(
    directory: Path, read: Callable[[Path], dict[str, Any]], *, set_aside: bool
) -> list[dict[str, Any]]:
    if set_aside:
        _set_aside(directory)
    entries = []
    for candidate in sorted(directory.glob("*.pt")):
        try:
            checkpoint = read(candidate)
        except (ValueError, OSError):
            continue
        entries.append({"file": candidate.name, **index_entry(checkpoint)})
    entries.sort(key=lambda item: (item["num_updates"], item["time"]))
    return entries


def write_index(
    directory: str | Path, entries: list[dict[str, Any]], *, set_aside: bool = False
) -> None:
    """Rewrite ``directory/index.json`` with ``entries`` (the old one kept aside if asked)."""
    directory = Path(directory)
    if set_aside:
        _set_aside(directory)
    _write_index(directory, entries)


def _set_aside(directory: Path) -> None:
    """Keep an existing index as ``index.json.corrupt-<time>``."""
    index_path = directory / INDEX_FILENAME
    if index_path.is_file():
        index_path.replace(index_path.with_name(f"{INDEX_FILENAME}.corrupt-{int(time.time())}"))


def _write_index(directory: Path, entries: list[dict[str, Any]]) -> None:
    payload = json.dumps({"checkpoints": json_safe(entries)}, indent=2, allow_nan=False).encode()
    atomic_write(directory / INDEX_FILENAME, lambda handle: handle.write(payload))
