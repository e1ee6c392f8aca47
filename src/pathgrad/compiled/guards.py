"""Compiled calls that skip guard evaluation while nothing they were specialised on changes.

Before every call of a compiled program, Dynamo evaluates its guards: checks that
the inputs' kinds, shapes and dtypes, the modules' parameters and every Python
value the program was specialised on (the env's constants, the algorithm's
settings) are as when it was compiled. For a chunk of a few steps at 16-64 envs
that costs about as much as its kernels. Within a compiled update those checks
always pass: its programs take the same kinds of inputs at every call (the
carried inputs require grad in every chunk, the draws have fixed shapes), and
the Python values they read change only if someone changes them.

:class:`GuardSkipping` therefore lets the calls of an update skip guard
evaluation (``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``) when the
plain settings of the watched objects (``bool``, ``int``, ``float``, ``str`` and
``None`` attributes of the env, the policy, the algorithm's config and critic) are
the ones of the update before; the first update, and any update after such a
setting changed, evaluates the guards (and recompiles where they fail).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["GuardSkipping"]

_PLAIN = (bool, int, float, str, type(None))


def _settings(value: Any) -> tuple[tuple[str, Any], ...]:
    """The plain attributes of ``value`` (an object's ``vars``), sorted by name."""
    try:
        attributes = vars(value)
    except TypeError:
        return ()
    return tuple(sorted((k, v) for k, v in attributes.items() if isinstance(v, _PLAIN)))


class GuardSkipping:
    """Whether an update's compiled calls may skip guard evaluation.

    Args:
        watched: Objects whose plain attributes compiled programs may read.
    """

    def __init__(self, *watched: Any) -> None:
        self._watched = watched
        self._last: tuple[Any, ...] | None = None
        self.active = False

    def begin_update(self) -> None:
        """Skip guards in this update if the watched settings are the last update's."""
        settings = tuple(_settings(value) for value in self._watched)
        self.active = settings == self._last
        self._last = settings

    def calls(self) -> Any:
        """Context of one compiled call."""
        if not self.active:
            return contextlib.nullcontext()
        return torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)

    def wrap(self, compiled: Callable[..., Any]) -> Callable[..., Any]:
        """``compiled`` called within :meth:`calls`."""

        def call(*args: Any, **kwargs: Any) -> Any:
            with self.calls():
                return compiled(*args, **kwargs)

        return call
