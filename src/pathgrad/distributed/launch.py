"""``pathgrad train --nproc N``: the same command as N ranks on this machine.

The ranks are started by torch's own elastic agent (the engine behind
``torchrun``), run in this process so that the job reads like one command: the
ranks print their lines, the agent's logs and failure report stay silent, and
the exit status is the failing rank's own (2 for bad input, 130 / 143 after a
signal, 1 when training failed). Each rank ends as ``terminated``, with its
final checkpoint, when this launcher dies, even by ``kill -9``
(:mod:`pathgrad.core.parent_watch`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import uuid
from collections.abc import Sequence

from pathgrad.core.parent_watch import supervised_environment

__all__ = ["LAUNCHED_VARIABLE", "launch_ranks", "rank_command", "torchrun_command"]

# Set in every rank's environment: its errors are reported by rank 0 and the launcher.
LAUNCHED_VARIABLE = "PATHGRAD_LAUNCHED_RANKS"
_EXIT_SIGINT, _EXIT_SIGTERM = 130, 143


def rank_command(argv: Sequence[str]) -> list[str]:
    """``argv`` without ``--nproc N`` / ``--nproc=N``: what each rank runs."""
    rest: list[str] = []
    skip = False
    for item in argv:
        if skip:
            skip = False
        elif item == "--nproc":
            skip = True
        elif not item.startswith("--nproc="):
            rest.append(item)
    return rest


def torchrun_command(nproc: int, argv: Sequence[str]) -> list[str]:
    """The equivalent ``torchrun`` command line (for docs and for running it by hand)."""
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={int(nproc)}", "-m", "pathgrad", *rank_command(argv),
    ]  # fmt: skip


def launch_ranks(nproc: int, argv: Sequence[str]) -> int:
    """Run ``nproc`` ranks of ``pathgrad ARGV`` (without ``--nproc``); their exit status.

    A rank that fails ends the job at once: the agent stops the others, which
    lose contact with it within seconds. A rank killed by a signal that no one
    reported is named in one line.
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    _silence_agent_logs()
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=int(nproc),
        run_id=str(uuid.uuid4()),
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        monitor_interval=0.2,
        signals_to_handle="SIGTERM,SIGINT,SIGHUP,SIGQUIT",
    )
    sys.stdout.flush()
    sys.stderr.flush()
    previous = dict(os.environ)
    os.environ.update(supervised_environment({LAUNCHED_VARIABLE: "1"}))
    try:
        elastic_launch(config, sys.executable)("-m", "pathgrad", *rank_command(argv))
    except ChildFailedError as failure:
        return _failure_status(failure.failures)
    except SignalException as stop:
        return _EXIT_SIGINT if stop.sigval == signal.SIGINT else _EXIT_SIGTERM
    finally:
        os.environ.clear()
        os.environ.update(previous)
    return 0


def _failure_status(failures: dict) -> int:
    """Rank 0's exit status when it failed, else the first failed rank's; signals named."""
    ordered = sorted(failures.items())
    rank, failure = next(((r, f) for r, f in ordered if r == 0), ordered[0])
    code = int(failure.exitcode)
    if code >= 0:
        return code
    name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else -code
    print(
        f"pathgrad: error: rank {rank} of the job was killed ({name}); the last checkpoint "
        "is intact: resume the run from it.",
        file=sys.stderr,
    )
    return 128 - code


def _silence_agent_logs() -> None:
    """The agent's warnings repeat what the ranks say (each logger sets its own level)."""
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
