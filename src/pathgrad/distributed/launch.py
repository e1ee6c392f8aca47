"""``pathgrad train --nproc N``: the same command as N ranks on this machine.

The ranks are started by torch's own elastic agent (the engine behind
``torchrun``), run in this process so that the job reads like one command: the
ranks print their own errors, the agent's logs and failure report stay
silent, and a job that a rank ended early ends with the launcher's one line
(:mod:`pathgrad.distributed.launch_report`). The exit status is the failing
rank's own (2 for bad input, 130 / 143 after a signal, 128 + N for a rank
killed by signal N, 1 when training failed). Each rank ends as
``terminated``, with its final checkpoint, when this launcher dies, even by
``kill -9`` (:mod:`pathgrad.core.parent_watch`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from pathgrad.core.parent_watch import supervised_environment
from pathgrad.distributed.launch_report import (
    LAUNCHED_VARIABLE,
    RUN_DIR_FILE_VARIABLE,
    announced_run_dir,
    failure_report,
    signal_report,
)

__all__ = ["LAUNCHED_VARIABLE", "launch_ranks", "rank_command", "torchrun_command"]


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

    A rank that fails ends the job at once: the agent stops the others. The
    launcher then says in one line which rank ended it and how, what became
    of the others and where the last checkpoint is (:mod:`.launch_report`);
    the agent's own logs and failure report stay silent.
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

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
    with tempfile.TemporaryDirectory(prefix="pathgrad-launch-") as folder, _agent_silenced():
        note = Path(folder) / "run_dir"
        os.environ.update(
            supervised_environment({LAUNCHED_VARIABLE: "1", RUN_DIR_FILE_VARIABLE: str(note)})
        )
        try:
            elastic_launch(config, sys.executable)("-m", "pathgrad", *rank_command(argv))
        except ChildFailedError as failure:
            codes = {rank: int(f.exitcode) for rank, f in failure.failures.items()}
            line, code = failure_report(codes, int(nproc), announced_run_dir(note))
        except SignalException as stop:
            line, code = signal_report(int(stop.sigval), announced_run_dir(note))
        else:
            line, code = None, 0
        finally:
            os.environ.clear()
            os.environ.update(previous)
    if line is not None:
        print(line, file=sys.stderr)
    return code


@contextlib.contextmanager
def _agent_silenced() -> Iterator[None]:
    """Nothing the agent logs reaches the terminal while it runs.

    Its loggers (``torch.distributed.*``) set their own level when first
    created, some during the launch, so levels cannot silence them; their
    records all pass ``torch.distributed``, whose handler (torch's stderr
    handler) is replaced by a null one meanwhile.
    """
    logger = logging.getLogger("torch.distributed")
    kept = (logger.handlers[:], logger.propagate)
    logger.handlers[:] = [logging.NullHandler()]
    logger.propagate = False
    try:
        yield
    finally:
        logger.handlers[:], logger.propagate = kept
