"""Entry point of the ``pathgrad`` command.

It imports nothing heavy before it can answer a signal: Ctrl-C or SIGTERM
while the libraries are still loading ends the process at once with one line
and exit status 130 / 143, not a traceback (nothing is written yet).
"""

from __future__ import annotations

import sys


def main() -> int:
    """Load the command line and run it."""
    from pathgrad.commands import signals_exit

    with signals_exit():
        from pathgrad.cli import main as run
    code = run()
    from pathgrad.distributed import exit_rank

    exit_rank(code)  # a rank of ``torchrun --no-python pathgrad ...`` ends here
    return code


if __name__ == "__main__":
    sys.exit(main())
