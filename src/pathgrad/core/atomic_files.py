"""Files that appear whole or not at all, with the permissions users expect.

:func:`atomic_write` writes to a temporary file in the target's folder,
flushes and fsyncs it, and moves it into place with ``os.replace``: a crash at
any instant leaves either the old file or the new one. A kill before the move
can leave the temporary file behind; :func:`remove_stale_temporaries` removes
such leftovers when a run is resumed.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_write", "remove_stale_temporaries"]

_TEMPORARY_PREFIX = "."
_TEMPORARY_SUFFIX = ".tmp"


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None]) -> Path:
    """Write a file through ``write(fileobj)`` so that it appears whole or not at all.

    A new file gets the permissions of the process umask (like ``open``); a
    replaced file keeps its own.

    Raises:
        IsADirectoryError: If ``path`` is an existing directory.
        OSError: If the folder cannot be created or written (a full disk, say),
            naming ``path``; nothing is left behind.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"'{path}' is a directory, not a file name.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(
            prefix=f"{_TEMPORARY_PREFIX}{path.name}.", suffix=_TEMPORARY_SUFFIX, dir=path.parent
        )
    except OSError as error:
        raise _naming(error, path) from error
    try:
        with os.fdopen(descriptor, "wb") as handle:
            os.fchmod(handle.fileno(), _file_mode(path))
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise _naming(error, path) from error
        raise
    _fsync_directory(path.parent)
    return path


def _naming(error: OSError, path: Path) -> OSError:
    """``error`` naming the file being written (a failed write names none, or a temporary)."""
    if error.errno is None:
        return error
    return type(error)(error.errno, error.strerror, str(path))


def remove_stale_temporaries(directory: str | Path) -> list[Path]:
    """Delete temporary files that an interrupted :func:`atomic_write` left in ``directory``.

    Only call this for a folder no other process is writing to (the run lock
    guarantees it for a run directory).

    Returns:
        The removed paths.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = []
    for candidate in directory.glob(f"{_TEMPORARY_PREFIX}*{_TEMPORARY_SUFFIX}"):
        if candidate.is_file():
            with contextlib.suppress(FileNotFoundError):
                candidate.unlink()
                removed.append(candidate)
    return removed


def _file_mode(path: Path) -> int:
    """The existing file's permission bits, or ``0o666`` less the umask for a new one."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """The process umask, read without changing it where Linux allows."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    current = os.umask(0o022)
    os.umask(current)
    return current


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
