"""The exception SIGTERM becomes (kept free of heavy imports: the command line loads it first)."""

from __future__ import annotations

__all__ = ["Terminated"]


class Terminated(BaseException):
    """Raised in the main thread when SIGTERM arrives (the command line's signal handler)."""
