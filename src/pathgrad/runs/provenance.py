"""Where a run came from: versions, the git state of the working tree, the command line.

Written to ``<run>/provenance.json`` when a run starts, with one more entry
per ``resume``, so a result can be traced to the code and the command that
made it.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from pathgrad.core.atomic_files import atomic_write

__all__ = ["PROVENANCE_FILE", "git_state", "invocation", "record_invocation"]

PROVENANCE_FILE = "provenance.json"


def git_state(directory: str | Path = ".") -> dict[str, Any] | None:
    """Commit and dirty flag of the git working tree holding ``directory`` (``None``: none)."""

    def git(*args: str) -> str | None:
        try:
            result = subprocess.run(
                ["git", *args], cwd=directory, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return result.stdout.strip() if result.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "root": git("rev-parse", "--show-toplevel"),
        "commit": commit,
        "dirty": bool(status) if status is not None else None,
    }


def invocation(command: str, argv: Sequence[str], overrides: Sequence[str]) -> dict[str, Any]:
    """One ``train`` or ``resume``: when, with what, from which code."""
    import pathgrad

    return {
        "command": command,
        "argv": [Path(sys.argv[0]).name, *argv],
        "overrides": list(overrides),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cwd": str(Path.cwd()),
        "pathgrad_version": pathgrad.__version__,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "git": git_state(Path.cwd()),
        "pathgrad_source_git": git_state(Path(pathgrad.__file__).parent),
    }


def record_invocation(run_dir: Path, entry: dict[str, Any], notes: list[str] | None = None) -> Path:
    """Append ``entry`` to the run's ``provenance.json`` (written atomically).

    A file that cannot be read as a record is kept as
    ``provenance.json.corrupt-<time>`` (said in ``notes``) and a new one started,
    rather than stopping the run or losing what it held.
    """
    path = Path(run_dir) / PROVENANCE_FILE
    entries: list[Any] = []
    if path.is_file():
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
            entries = loaded["invocations"]
            if not isinstance(entries, list):
                raise ValueError("invocations is not a list")
        except (OSError, ValueError, KeyError, TypeError) as error:
            aside = path.with_name(f"{PROVENANCE_FILE}.corrupt-{int(time.time())}")
            path.replace(aside)
            entries = []
            if notes is not None:
                notes.append(f"'{path}' could not be read ({type(error).__name__}); it is kept "
                             f"as '{aside.name}' and a new one started")  # fmt: skip
    payload = json.dumps({"invocations": [*entries, entry]}, indent=2).encode()
    return atomic_write(path, lambda handle: handle.write(payload))
