"""Entry point of the ``pathgrad`` command.

It imports nothing heavy before it can answer a signal: Ctrl-C or SIGTERM
while torch is still loading ends with one line and exit status 130 / 143,
not a traceback.
"""

from __future__ import annotations

import signal
import sys
from typing import Any


class _Terminated(BaseException):
    pass


def _terminate(signum: int, frame: Any) -> None:
    raise _Terminated()


def main() -> int:
    """Load the command line and run it."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        from pathgrad.cli import main as run
    except KeyboardInterrupt:
        print("pathgrad: interrupted", file=sys.stderr)
        return 130
    except _Terminated:
        print("pathgrad: terminated", file=sys.stderr)
        return 143
    finally:
        signal.signal(signal.SIGTERM, previous)
    return run()


if __name__ == "__main__":
    sys.exit(main())
