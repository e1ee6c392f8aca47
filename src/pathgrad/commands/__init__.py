"""The subcommands of ``pathgrad``: argparse adapters over :mod:`pathgrad.runs`, and exit statuses.

Errors and signal handling live with the run (:mod:`pathgrad.runs.errors`,
:mod:`pathgrad.runs.signals`); their names stay importable from here.
"""

from __future__ import annotations

from pathgrad.core.start_up_signals import EXIT_SIGINT, EXIT_SIGTERM
from pathgrad.core.termination import Terminated
from pathgrad.runs.errors import RunFailed, UsageError
from pathgrad.runs.signals import hold_stop_signals, signals_exit, signals_ignored, signals_raise

__all__ = [
    "EXIT_DIVERGED",
    "EXIT_SIGINT",
    "EXIT_SIGTERM",
    "EXIT_USAGE",
    "RunFailed",
    "Terminated",
    "UsageError",
    "hold_stop_signals",
    "signals_exit",
    "signals_ignored",
    "signals_raise",
]

EXIT_USAGE = 2
EXIT_DIVERGED = 3  # training stopped: too many consecutive skipped updates
