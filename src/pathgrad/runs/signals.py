"""Stop signals during a run: raised where training can end cleanly, ignored during final writes."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from pathgrad.core.start_up_signals import exit_now
from pathgrad.core.termination import Terminated

__all__ = ["hold_stop_signals", "signals_exit", "signals_ignored", "signals_raise"]

_stop_signals_held = False  # see hold_stop_signals


def hold_stop_signals() -> None:
    """Ignore SIGINT and SIGTERM from now on, whatever block restores handlers later.

    For a data-parallel rank already ending with an error: the others lose
    contact as it leaves, and the agent then stops every rank still running;
    held, this one still prints its line and exits with its own status.
    """
    global _stop_signals_held
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _stop_signals_held = True


@contextlib.contextmanager
def _handling_signals(handler: Any) -> Iterator[None]:
    """Handle SIGINT and SIGTERM with ``handler`` inside the block, then restore
    (unless :func:`hold_stop_signals` was called meanwhile).

    Outside the main thread (Python can set handlers only there) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread() or _stop_signals_held:
        yield
        return
    previous_int = signal.signal(signal.SIGINT, handler)
    previous_term = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        if not _stop_signals_held:
            signal.signal(signal.SIGINT, previous_int)
            signal.signal(signal.SIGTERM, previous_term)


@contextlib.contextmanager
def signals_exit() -> Iterator[None]:
    """SIGINT/SIGTERM end the process at once inside the block: one line, exit 130 / 143.

    For start-up, while nothing is written. No exception is raised into the
    code that runs: a library being imported can swallow it in C (torch's NumPy
    initialisation does, and then trains on) or be left half-imported.
    """
    with _handling_signals(exit_now):
        yield


@contextlib.contextmanager
def signals_raise(request: Callable[[type[BaseException]], None] | None = None) -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt and SIGTERM :class:`Terminated` inside the block.

    Args:
        request: Where the exception goes, e.g. a trainer's ``request_interrupt``
            (which waits for the unit of work in progress); by default it is
            raised at once.
    """

    def handler(signum: int, frame: Any) -> None:
        exception = KeyboardInterrupt if signum == signal.SIGINT else Terminated
        if request is None:
            raise exception()
        request(exception)

    with _handling_signals(handler):
        yield


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """Let final writes finish: SIGINT/SIGTERM are ignored inside the block."""
    with _handling_signals(signal.SIG_IGN):
        yield
