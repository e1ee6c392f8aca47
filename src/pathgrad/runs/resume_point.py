"""Where ``pathgrad resume`` starts: the checkpoint, chosen without changing anything first.

The index names the checkpoints in save order; files it does not name (a kill
or a full disk between a checkpoint's file and its index entry) are read and
taken in. A run with history (a checkpoint file, an index entry, a summary
naming a checkpoint) is never resumed from the start: when none of its
checkpoints can be read, resume refuses and names them. Only a run stopped
before its first save starts again from update 0, which repeats it exactly.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from pathgrad.checkpoint import INDEX_FILENAME, read_checkpoint, read_index
from pathgrad.core.run_index import index_entry, write_index
from pathgrad.runs.config_edits import config_edits, describe_edits
from pathgrad.runs.errors import UsageError

__all__ = ["ResumePoint", "check_config_unedited", "choose_resume_point"]


@dataclasses.dataclass
class ResumePoint:
    """The checkpoint to resume from (``None``: the start) and the index to write first."""

    checkpoint: Path | None
    index_entries: list[dict[str, Any]] | None = None  # None: the index stays as it is
    set_aside: bool = False  # keep the old index as index.json.corrupt-<time>
    notes: list[str] = dataclasses.field(default_factory=list)

    def apply(self, directory: Path) -> None:
        """Write the index this choice relies on (after every check has passed)."""
        if self.index_entries is not None:
            write_index(directory, self.index_entries, set_aside=self.set_aside)


def choose_resume_point(
    run_dir: Path, *, checkpoint: str | None = None, rebuild: bool = False
) -> ResumePoint:
    """Choose where to resume ``run_dir``; reads files only.

    Args:
        checkpoint: A file given with ``--checkpoint``.
        rebuild: ``--rebuild-index``: list the checkpoint files anew.

    Raises:
        UsageError: For a malformed index, or a run with history and no
            readable checkpoint (naming the unreadable files).
    """
    if checkpoint is not None:
        return ResumePoint(Path(checkpoint))
    directory = run_dir / "checkpoints"
    hint = (
        f"rebuild it from the checkpoint files with `pathgrad resume {run_dir} --rebuild-index`, "
        "or choose a file with --checkpoint FILE."
    )
    has_index = (directory / INDEX_FILENAME).is_file()
    try:
        entries = [] if rebuild else read_index(directory)
    except ValueError as error:
        raise UsageError(f"{error} {hint}") from error
    files = sorted(path for path in directory.glob("*.pt") if path.is_file())
    listed = {entry["file"] for entry in entries}
    readable, unreadable = [], []
    for path in files:
        if path.name in listed:
            continue
        try:
            readable.append({"file": path.name, **index_entry(read_checkpoint(path))})
        except (ValueError, OSError) as error:
            unreadable.append((path, error))
    notes = [
        f"'{path}' cannot be read and is left out of {INDEX_FILENAME}: {_reason(error, path)}"
        for path, error in unreadable
    ]
    merged = sorted([*entries, *readable], key=lambda item: float(item.get("time") or 0.0))
    existing = [entry for entry in merged if (directory / entry["file"]).is_file()]
    if existing:
        _check_latest_readable(run_dir, [directory / entry["file"] for entry in existing])
        changed = bool(readable) or rebuild or not has_index
        return ResumePoint(
            directory / existing[-1]["file"], merged if changed else None, rebuild, notes
        )
    if entries:
        raise UsageError(f"No checkpoint listed in '{directory / INDEX_FILENAME}' exists. {hint}")
    if unreadable:
        path, problem = unreadable[-1]
        reason = _reason(problem, path)
        others = f" and {len(unreadable) - 1} more" if len(unreadable) > 1 else ""
        raise UsageError(
            f"'{run_dir}' has checkpoints but none can be read ({path.name}{others}: {reason}); "
            f"nothing was changed. Restore a good copy into {directory}, or start a new run "
            f"with `pathgrad train {run_dir / 'config.yaml'}`."
        )
    named = _checkpoint_named_by_summary(run_dir)
    if named is not None:
        raise UsageError(
            f"'{run_dir}' saved checkpoints ({run_dir / 'summary.json'} names '{named}') but "
            f"{directory} holds none; nothing was changed. Restore them, or start a new run "
            f"with `pathgrad train {run_dir / 'config.yaml'}`."
        )
    return ResumePoint(None, [] if rebuild else None, rebuild)


def _check_latest_readable(run_dir: Path, paths: list[Path]) -> None:
    """The latest checkpoint unreadable: refuse, naming the newest one that reads."""
    try:
        read_checkpoint(paths[-1])
        return
    except (ValueError, OSError) as error:
        problem = str(error)
    for earlier in reversed(paths[:-1]):
        try:
            updates = read_checkpoint(earlier).get("num_updates")
        except (ValueError, OSError):
            continue
        raise UsageError(
            f"{problem} Nothing was changed. The newest readable checkpoint is '{earlier.name}' "
            f"(update {updates}): `pathgrad resume {run_dir} --checkpoint {earlier}` continues "
            "from it, or restore a good copy of the latest."
        )
    raise UsageError(f"{problem} Nothing was changed; no earlier checkpoint reads either.")


def check_config_unedited(run_dir: Path, config: Any, checkpoint: Path) -> None:
    """Refuse a ``config.yaml`` edited since ``checkpoint`` was saved, naming the keys.

    ``config`` is the file's :class:`~pathgrad.runs.config.RunConfig` before
    resume's own options; a checkpoint without a recorded config passes.
    """
    try:
        recorded = read_checkpoint(checkpoint).get("config")
    except (ValueError, OSError):
        return  # the load that follows names the problem
    if not isinstance(recorded, dict):
        return
    current = config.model_dump(mode="python")
    config_file = run_dir / "config.yaml"
    for section in ("env", "algorithm"):
        theirs = recorded.get(section)
        theirs = theirs.get("name") if isinstance(theirs, dict) else None
        ours = current[section]["name"]
        if theirs is not None and theirs != ours:
            raise UsageError(
                f"{checkpoint} was trained with {section}.name {theirs}, but {config_file} has "
                f"{ours}: the checkpoint is another run's, or the file was edited; nothing was "
                "changed. Resume the run the checkpoint belongs to, give one of this run's with "
                "--checkpoint, or undo the edit."
            )
    edits = config_edits(recorded, current)
    if not edits:
        return
    raise UsageError(
        f"{config_file} differs from the config {checkpoint.name} was trained with "
        f"({describe_edits(edits)}); a resume continues the saved run exactly and cannot "
        f"take edits, so nothing was changed. Undo the edit to resume, start a new run with "
        f"`pathgrad train {config_file}`, or change the budget with `pathgrad resume "
        f"{run_dir} --total-updates N`."
    )


def _reason(error: Exception, path: Path) -> str:
    """The error's message without the file name it starts with."""
    return str(error).replace(f"'{path}' ", "", 1)


def _checkpoint_named_by_summary(run_dir: Path) -> str | None:
    try:
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict):
        return None
    named = summary.get("latest_checkpoint_path")
    return named if isinstance(named, str) and named else None
