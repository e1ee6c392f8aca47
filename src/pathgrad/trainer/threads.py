"""How many intra-op threads torch uses in training: ``trainer.num_threads``.

Small batches cannot use intra-op threads, and threads that share a core with
another process slow a run down several times. Measured on a 2-core CPU with
``python benchmarks/overhead.py --compare-threads 1 2`` (PointMass, MLP 64x64),
two threads against one: 0.99x at 64 and 256 envs, 1.20x at 1024, 1.38x at 4096,
1.48x at 16384 on a quiet machine; 0.27x, 0.27x and 0.44x at 64, 1024 and 16384
envs with one core busy elsewhere. ``auto`` therefore uses one thread below
:data:`THREADED_BATCH_ENVS` envs (a small gain is not worth the risk of a
process that starts later) and, from there, only the cores that are free.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence

import torch

__all__ = [
    "THREADED_BATCH_ENVS",
    "apply_num_threads",
    "check_num_threads",
    "free_cpus",
    "num_threads_argument",
    "per_batch_size",
    "resolve_num_threads",
    "use_num_threads",
]

THREADED_BATCH_ENVS = 4096  # two threads gain 1.38x here, 1.20x at 1024 envs


def free_cpus() -> int:
    """CPUs this process may use, less the load of other processes (at least 1)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = 0.0
    return max(1, cpus - int(load + 0.5))


def check_num_threads(setting: object) -> None:
    """Raise ``ValueError`` unless ``setting`` is ``auto`` or a positive integer."""
    valid_int = isinstance(setting, int) and not isinstance(setting, bool) and setting > 0
    if setting != "auto" and not valid_int:
        raise ValueError(f"num_threads must be 'auto' or a positive integer, got {setting!r}.")


def resolve_num_threads(
    setting: int | str,
    num_envs: int,
    *,
    environ: Mapping[str, str] = os.environ,
    free: int | None = None,
) -> tuple[int, str]:
    """The thread count for ``setting`` (a positive int or ``auto``) and why.

    ``auto``: ``OMP_NUM_THREADS`` when it is set (the user's choice), else 1
    below :data:`THREADED_BATCH_ENVS` envs, else the free CPUs.

    Raises:
        ValueError: If ``setting`` is neither ``auto`` nor a positive integer.
    """
    check_num_threads(setting)
    if setting != "auto":
        return int(setting), "set"
    requested = environ.get("OMP_NUM_THREADS", "").strip()
    if requested.isdigit() and int(requested) > 0:
        return int(requested), "auto: OMP_NUM_THREADS"
    if num_envs < THREADED_BATCH_ENVS:
        return 1, f"auto: {num_envs} envs < {THREADED_BATCH_ENVS}"
    cpus = free_cpus() if free is None else free
    return cpus, f"auto: {num_envs} envs, {cpus} free CPUs"


def apply_num_threads(threads: int) -> None:
    """Set torch's intra-op thread count (only when it changes)."""
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def use_num_threads(setting: int | str, num_envs: int) -> int:
    """Resolve ``setting`` for ``num_envs`` envs, apply it and return the count."""
    threads, _ = resolve_num_threads(setting, num_envs)
    apply_num_threads(threads)
    return threads


def num_threads_argument(text: str) -> int | str:
    """``--num-threads`` of the benchmarks: ``auto`` or a positive integer."""
    setting: int | str = int(text) if text.strip().isdigit() else text.strip()
    try:
        check_num_threads(setting)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error
    return setting


def per_batch_size(setting: int | str, sizes: Sequence[int]) -> str:
    """``threads auto (per batch size: 64 envs 1, ...)``, applying each count once."""
    counts = ", ".join(f"{n} envs {use_num_threads(setting, n)}" for n in sizes)
    return f"threads {setting} (per batch size: {counts})"
