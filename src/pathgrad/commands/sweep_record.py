"""A sweep folder on disk: ``sweep.json``, its cells' names and where each cell stands.

``sweep.json`` (written atomically at the start and at each change) holds the
base config and overrides, the grid, the seeds, a budget given to ``pathgrad
resume SWEEP``, and per cell its grid values, seed, overrides, run directory
name and state: ``pending``, ``running``, then the run's final status
(``completed``, ``stopped early``, ``failed``, ``interrupted``, ``terminated``).
The state is a record; what a cell still needs is decided from its run
directory (:func:`run_dir_state`), since a sweep killed with ``kill -9``
leaves ``running`` behind for runs that ended by themselves afterwards.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any

from pathgrad.commands import UsageError
from pathgrad.core.atomic_files import atomic_write
from pathgrad.runs.run import CONFIG_FILE, LOCK_FILE, SUMMARY_FILE, SWEEP_FILE, RunDirectoryError

__all__ = [
    "FINISHED",
    "VERSION",
    "cell_names",
    "print_table",
    "read_record",
    "read_summary",
    "record_differences",
    "run_dir_state",
    "wait_until_free",
    "write_record",
]

VERSION = 1
FINISHED = ("completed", "stopped early")
ENDED = (*FINISHED, "diverged")  # resuming a diverged run would repeat its divergence
CELL_STATES = ("pending", "running", *ENDED, "failed", "interrupted", "terminated")
_UNSAFE = re.compile(r"[^A-Za-z0-9.+=-]+")
_PART_LIMIT = 48


def _safe(text: str) -> str:
    """``text`` as a piece of a folder name: letters, digits and ``.+=-``, others ``_``."""
    safe = _UNSAFE.sub("_", text).strip("._")
    if len(safe) > _PART_LIMIT or not safe:
        digest = hashlib.sha1(text.encode()).hexdigest()[:6]
        safe = f"{safe[: _PART_LIMIT - 7].rstrip('._')}~{digest}".lstrip("~")
    return safe


def cell_names(cells: list[dict[str, Any]], seeded: bool) -> list[tuple[str, str]]:
    """``(label, run directory name)`` of each cell, from its grid values and seed.

    A grid key is shortened to its last part (``gamma`` for
    ``algorithm.cfg.gamma``) unless two keys share it. Names are unique, also
    on case-insensitive file systems (``-2``, ``-3``... suffixes).
    """
    keys = list(cells[0]["grid"]) if cells else []
    last = [key.rsplit(".", 1)[-1] for key in keys]
    short = {
        key: part if last.count(part) == 1 else key for key, part in zip(keys, last, strict=True)
    }
    names, taken = [], set()
    for cell in cells:
        label = " ".join(f"{short[key]}={value}" for key, value in cell["grid"].items())
        parts = [f"{_safe(short[key])}={_safe(value)}" for key, value in cell["grid"].items()]
        if seeded:
            parts.append(f"seed={cell['seed']}")
        base = "_".join(parts)[:200] or "run"
        name, number = base, 1
        while name.casefold() in taken:
            number += 1
            name = f"{base}-{number}"
        taken.add(name.casefold())
        names.append((label or "(base config)", name))
    return names


def write_record(sweep_dir: Path, record: dict[str, Any]) -> None:
    """Write ``sweep.json`` atomically."""
    record["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    payload = (json.dumps(record, indent=2) + "\n").encode()
    atomic_write(Path(sweep_dir) / SWEEP_FILE, lambda handle: handle.write(payload))


def read_record(sweep_dir: Path) -> dict[str, Any]:
    """The sweep's ``sweep.json``.

    Raises:
        UsageError: If it cannot be read or is not a sweep record.
    """
    path = Path(sweep_dir) / SWEEP_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise UsageError(
            f"cannot read '{path}': {getattr(error, 'strerror', None) or error}"
        ) from error
    problem = _record_problem(record)
    if problem is not None:
        raise UsageError(f"'{path}' is not a pathgrad sweep record (version {VERSION}): {problem}.")
    for key, value in _DEFAULTS.items():
        record.setdefault(key, value)
    return record


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_DEFAULTS = {"seeds": None, "budget": {}, "jobs": 1}  # keys a record may leave out
_RECORD_CHECKS = (
    ("config", lambda v: v is None or isinstance(v, str), "a config file's path or null"),
    ("overrides", _strings, "a list of key=value strings"),
    ("grid", _strings, "a list of KEY=V1,V2 strings"),
    ("seeds", lambda v: v is None or (isinstance(v, list) and all(map(_integer, v))),
     "a list of integers or null"),
    ("budget", lambda v: isinstance(v, dict) and all(
        k in ("total_updates", "total_timesteps") and _integer(n) and n > 0 for k, n in v.items()),
     "an object of total_updates or total_timesteps, a positive integer"),
    ("jobs", lambda v: _integer(v) and v > 0, "a positive integer"),
    ("cells", lambda v: isinstance(v, list) and bool(v), "a list of one object per run"),
)  # fmt: skip


_CELL_CHECKS = (
    ("overrides", _strings, "a list of key=value strings"),
    ("grid", lambda v: isinstance(v, dict), "an object"),
    ("seed", lambda v: v is None or _integer(v), "an integer or null"),
    ("label", lambda v: v is None or isinstance(v, str), "a string"),
    ("run_dir", lambda v: isinstance(v, str) and _plain_name(v),
     "a folder name inside the sweep folder"),
    ("state", lambda v: v in CELL_STATES, "one of " + ", ".join(CELL_STATES)),
)  # fmt: skip


def _record_problem(record: Any) -> str | None:
    """What is wrong in a ``sweep.json``'s content, naming the field; None if nothing."""
    if not isinstance(record, dict):
        return "it is not a JSON object"
    version = record.get("version")
    if not _integer(version) or version != VERSION:
        return f"its version is {_json(version)}"
    for key, valid, expected in _RECORD_CHECKS:
        if key not in record and key not in _DEFAULTS:
            return f"it has no {key}"
        if not valid(record.get(key, _DEFAULTS.get(key))):
            return f"{key} is {_json(record[key])}, expected {expected}"
    seen = set()
    for number, cell in enumerate(record["cells"]):
        problem = _cell_problem(cell)
        if problem is None and cell["run_dir"] in seen:
            problem = f".run_dir {_json(cell['run_dir'])} is another cell's too"
        if problem is not None:
            return f"cells[{number}]{problem}"
        seen.add(cell["run_dir"])
    return None


def _cell_problem(cell: Any) -> str | None:
    if not isinstance(cell, dict):
        return f" is {_json(cell)}, expected an object"
    for key, valid, expected in _CELL_CHECKS:
        if key not in cell:
            return f" has no {key}"
        if not valid(cell[key]):
            return f".{key} is {_json(cell[key])}, expected {expected}"
    return None


def _json(value: Any) -> str:
    return json.dumps(value)[:60]


def _plain_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name


def record_differences(recorded: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """What ``wanted`` (a new command's record) sets otherwise than ``recorded``."""
    differences = []
    for key, what in (("config", "the config"), ("overrides", "the overrides"),
                      ("grid", "--grid"), ("seeds", "--seeds")):  # fmt: skip
        if recorded.get(key) != wanted.get(key):
            differences.append(
                f"{what} {_shown(wanted.get(key))} (recorded: {_shown(recorded.get(key))})"
            )
    return differences


def _shown(value: Any) -> str:
    if value is None or value == []:
        return "none"
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """A run's ``summary.json``, or ``None`` if there is none (or it cannot be read)."""
    with contextlib.suppress(OSError, ValueError, UnicodeDecodeError):
        summary = json.loads((Path(run_dir) / SUMMARY_FILE).read_text(encoding="utf-8"))
        if isinstance(summary, dict):
            return summary
    return None


def run_dir_state(run_dir: Path) -> str:
    """``new`` (train it), ``finished`` (skip it: completed, stopped early, diverged) or ``cut``.

    A cut run (any other status, or none) resumes from its latest checkpoint,
    or from update 0 when it stopped before its first save (which repeats it
    exactly). A folder that a run left without its ``config.yaml`` (killed
    between its creation and the config's write) holds only the lock file and
    temporaries: they are removed and the cell trains anew.

    Raises:
        UsageError: For a folder with other files but no ``config.yaml``.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir() or not any(run_dir.iterdir()):
        return "new"
    summary = read_summary(run_dir)
    if summary is not None and summary.get("status") in ENDED:
        return "finished"
    if (run_dir / CONFIG_FILE).is_file():
        return "cut"
    leftovers = list(run_dir.iterdir())
    if all(path.is_file() and path.name.startswith(".") for path in leftovers):
        for path in leftovers:
            path.unlink(missing_ok=True)
        return "new"
    raise UsageError(
        f"'{run_dir}' holds files but no {CONFIG_FILE}, so it can neither be resumed nor "
        "trained into; move it out of the sweep folder and run the command again."
    )


def wait_until_free(run_dir: Path, seconds: float) -> bool:
    """Wait until no process holds ``run_dir``'s lock; returns whether one held it.

    A run whose sweep was killed ends by itself with a final checkpoint; this
    waits for that. Nothing is created: a folder without a lock file is free.

    Raises:
        RunDirectoryError: If it is still held after ``seconds``.
    """
    path = Path(run_dir) / LOCK_FILE
    try:
        import fcntl
    except ImportError:
        return False
    waited, deadline = False, time.monotonic() + seconds
    while True:
        try:
            with open(path, encoding="utf-8") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return waited
                except OSError:
                    pass
        except FileNotFoundError:
            return waited
        if time.monotonic() > deadline:
            raise RunDirectoryError(f"'{run_dir}' is in use by another pathgrad process.")
        waited = True
        time.sleep(0.2)


def print_table(sweep_dir: Path, record: dict[str, Any]) -> None:
    """The cells' table: grid values, seed, status, updates, final return, run."""
    print()
    print("| cell | seed | status | updates | final evaluation return | run |")
    print("|---|---:|---|---:|---:|---|")
    for cell in record["cells"]:
        summary = read_summary(sweep_dir / cell["run_dir"]) or {}
        value = (summary.get("last_eval_metrics") or {}).get("eval/avg_reward")
        shown = "" if value is None else f"{value:.4g}"
        print(f"| {cell['label']} | {cell['seed']} | {summary.get('status', cell['state'])} | "
              f"{summary.get('num_updates', '')} | {shown} | {cell['run_dir']} |")  # fmt: skip
