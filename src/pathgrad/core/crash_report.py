"""Where an exception came from: the user's own code (an env, a callback) or a library.

A bug in a user's env raised deep inside the trainer shows, by default, only
the frames of the user's files (the ones outside pathgrad, the standard library
and installed packages) and ends with one line naming the exception and the
line that raised it. ``PATHGRAD_TRACEBACK=full`` prints every frame; so does an
exception without a frame of the user's (a bug of pathgrad's or a library's).
"""

from __future__ import annotations

import os
import sys
import sysconfig
import traceback
from pathlib import Path
from typing import TextIO

__all__ = [
    "TRACEBACK_VARIABLE",
    "describe",
    "is_users_file",
    "print_crash",
    "user_frame",
    "user_line",
]

TRACEBACK_VARIABLE = "PATHGRAD_TRACEBACK"
_PACKAGE_DIR = Path(__file__).resolve().parents[1]
_LIBRARY_PATHS = ("stdlib", "platstdlib", "purelib", "platlib", "scripts")
_LIBRARY_DIRS = tuple(
    Path(path).resolve() for path in {sysconfig.get_path(name) for name in _LIBRARY_PATHS} if path
)


def is_users_file(filename: str) -> bool:
    """Whether ``filename`` is a file of the user's (not pathgrad's, a library's or Python's)."""
    if filename.startswith("<"):  # <frozen ...>, <string>: not a file to open
        return False
    path = Path(filename).resolve()
    return not any(path.is_relative_to(root) for root in (_PACKAGE_DIR, *_LIBRARY_DIRS))


def _frames(error: BaseException) -> list[traceback.FrameSummary]:
    return list(traceback.extract_tb(error.__traceback__))


def user_frame(error: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of ``error``'s traceback in a file of the user's, if any."""
    return next(
        (frame for frame in reversed(_frames(error)) if is_users_file(frame.filename)), None
    )


def user_line(error: BaseException) -> str | None:
    """``my_envs.py:12 in _reward``: where the user's code raised ``error``, if it did."""
    frame = user_frame(error)
    return None if frame is None else f"{frame.filename}:{frame.lineno} in {frame.name}"


def describe(error: BaseException) -> str:
    """``KeyError: 'x' at my_envs.py:12 in _reward``: the exception and the user's line."""
    message = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {message[0]}" if message else type(error).__name__
    where = user_line(error)
    return text if where is None else f"{text} at {where}"


def print_crash(error: BaseException, stream: TextIO | None = None) -> None:
    """Print ``error``'s traceback (the user's frames alone where it has some), then one line."""
    stream = sys.stderr if stream is None else stream
    frames = _frames(error)
    own = [frame for frame in frames if is_users_file(frame.filename)]
    if not own or os.environ.get(TRACEBACK_VARIABLE) == "full":
        traceback.print_exception(error, file=stream)
    else:
        left_out = len(frames) - len(own)
        print(
            f"Traceback (the frames in your code; {left_out} of pathgrad and the libraries "
            f"left out, {TRACEBACK_VARIABLE}=full shows them):",
            file=stream,
        )
        print("".join(traceback.format_list(own)), end="", file=stream)
        print("".join(traceback.format_exception_only(error)), end="", file=stream)
    print(f"pathgrad: error: {describe(error)}", file=stream)
