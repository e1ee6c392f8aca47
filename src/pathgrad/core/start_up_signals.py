"""SIGINT and SIGTERM end the process at once: one line on stderr, exit 130 / 143.

For start-up, while nothing is written. It imports only modules that the
interpreter has loaded before any code runs (``os`` and the C ``_signal``;
``signal.py`` would import ``enum`` first), so that the ``pathgrad`` command
guards the whole import of its libraries, its own package included.
"""

from __future__ import annotations

import _signal
import os

__all__ = ["EXIT_SIGINT", "EXIT_SIGTERM", "LAUNCHED_VARIABLE", "exit_now", "guard", "restore"]

EXIT_SIGINT = 130
EXIT_SIGTERM = 143
# Set in the environment of the ranks that ``pathgrad ... --nproc N`` starts: the
# launcher says how the job ended (pathgrad.distributed.launch_report).
LAUNCHED_VARIABLE = "PATHGRAD_LAUNCHED_RANKS"


def exit_now(signum: int, frame: object) -> None:
    """The handler: one line (the launcher's, for its ranks), then ``os._exit`` (a library
    being imported cannot swallow it)."""
    interrupted = signum == _signal.SIGINT
    if not os.environ.get(LAUNCHED_VARIABLE):
        os.write(2, b"pathgrad: interrupted\n" if interrupted else b"pathgrad: terminated\n")
    os._exit(EXIT_SIGINT if interrupted else EXIT_SIGTERM)


def guard(handler: object = exit_now) -> dict[int, object]:
    """Handle SIGINT and SIGTERM with ``handler``; the handlers it replaced, for :func:`restore`."""
    return {signum: _signal.signal(signum, handler) for signum in (_signal.SIGINT, _signal.SIGTERM)}


def restore(previous: dict[int, object]) -> None:
    """Put back the handlers :func:`guard` replaced."""
    for signum, handler in previous.items():
        _signal.signal(signum, handler)
