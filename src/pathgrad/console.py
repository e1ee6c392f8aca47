"""Entry point of the ``pathgrad`` command.

Its first statement makes SIGINT and SIGTERM end the process at once, with one
line and exit status 130 / 143 rather than a traceback, until the libraries are
loaded (nothing is written before); ``import pathgrad`` itself imports nothing,
so no Ctrl-C meets an unguarded import.
"""

from __future__ import annotations

import sys

from pathgrad.core import start_up_signals


def main() -> int:
    """Load the command line and run it."""
    previous = start_up_signals.guard()
    try:
        from pathgrad.cli import main as run
    finally:
        start_up_signals.restore(previous)
    code = run()
    from pathgrad.distributed import exit_rank

    exit_rank(code)  # a rank of ``torchrun --no-python pathgrad ...`` ends here
    return code


if __name__ == "__main__":
    sys.exit(main())
