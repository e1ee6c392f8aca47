"""Gradient faults named by the user's line: an in-place write, a NaN gradient.

Torch's error for an in-place write ("one of the variables needed for gradient
computation has been modified by an inplace operation") is raised in the
backward pass and names no line of the user's, and a NaN gradient of a finite
rollout (``torch.where`` over a branch that is NaN where it is not chosen)
raises nothing at all. Replaying the same computation under anomaly detection
makes torch record the forward traceback of the operation whose backward
failed; its innermost frame in the user's files is the line to name.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from pathgrad.core.crash_report import is_users_file

__all__ = [
    "inplace_write_message",
    "is_inplace_error",
    "locate_inplace_write",
    "locate_nan_gradient",
]

_MARK = "modified by an inplace operation"
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n[ \t]*([^\n]*)')


def is_inplace_error(error: BaseException) -> bool:
    """Whether ``error`` is torch's error for a saved tensor changed in place."""
    return isinstance(error, RuntimeError) and _MARK in str(error)


def locate_inplace_write(replay: Callable[[], Any]) -> str | None:
    """``"e = v.sin()" at my_env.py:10 in _dynamics``: the user's operation whose saved
    tensor was then changed in place, found by running ``replay`` (which must raise the
    same error again) under anomaly detection; ``None`` when it is not in the user's code."""
    return _located(replay, check_nan=False, raised=is_inplace_error)


def locate_nan_gradient(replay: Callable[[], Any]) -> str | None:
    """``"x.sqrt()" at my_env.py:9 in _reward``: the user's operation whose backward gave
    NaN first, found by running ``replay`` (a forward and backward pass) under anomaly
    detection; ``None`` when no backward gave NaN in the user's code."""
    return _located(replay, check_nan=True, raised=lambda error: "nan values" in str(error))


def _located(
    replay: Callable[[], Any], *, check_nan: bool, raised: Callable[[BaseException], bool]
) -> str | None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autograd.detect_anomaly(check_nan=check_nan):
            try:
                replay()
            except Exception as error:  # noqa: BLE001 - another failure: nothing located
                if not raised(error):
                    return None
            else:
                return None
    for warning in caught:
        frames = _FRAME.findall(str(warning.message))
        users = [frame for frame in frames if is_users_file(frame[0])]
        if "Traceback of forward call" in str(warning.message) and users:
            path, line, function, code = users[-1]
            return f"`{code.strip()}` at {Path(path).name}:{line} in {function}"
    return None


def inplace_write_message(where: str | None) -> str:
    """One sentence on the in-place write, with the operation that saved the tensor."""
    saved = f"the tensor saved by {where}" if where else "a tensor autograd saved"
    return (
        f"{saved} was changed afterwards by an in-place write (x.mul_(...), x += ..., "
        "x[i] = ...), so its gradient cannot be computed; compute a new tensor instead "
        "(x = x * 0.99, torch.where(...))"
    )
