"""``pathgrad train --nproc N``: the same command as N ranks on this machine, via torchrun."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = ["launch_ranks", "torchrun_command"]


def torchrun_command(nproc: int, argv: Sequence[str]) -> list[str]:
    """``python -m torch.distributed.run --standalone --nproc-per-node N -m pathgrad ARGV``.

    ``--nproc N`` (or ``--nproc=N``) is removed from ``argv``; ``--standalone``
    makes torchrun pick a free local port for the rendezvous.
    """
    rest: list[str] = []
    skip = False
    for item in argv:
        if skip:
            skip = False
        elif item == "--nproc":
            skip = True
        elif not item.startswith("--nproc="):
            rest.append(item)
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={int(nproc)}", "-m", "pathgrad", *rest,
    ]  # fmt: skip


def launch_ranks(nproc: int, argv: Sequence[str]) -> int:
    """Replace this process by torchrun running ``nproc`` ranks of ``pathgrad ARGV``.

    torchrun forwards SIGINT/SIGTERM to every rank, which stop together with
    a final checkpoint; its exit status is non-zero when any rank failed.
    """
    command = torchrun_command(nproc, argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)
    return 1  # not reached
