"""What a run reports to its caller: a usage problem (exit 2) or a fault it names (exit 1)."""

from __future__ import annotations

__all__ = ["RunFailed", "UsageError"]


class UsageError(ValueError):
    """A problem with the command line or its files: one line, exit status 2.

    A :class:`ValueError`, as Python callers of :func:`pathgrad.load` expect of bad input.
    """


class RunFailed(Exception):
    """Training stopped on a fault it names (a file it cannot write): one line, exit status 1."""
