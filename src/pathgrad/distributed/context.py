"""Joining a data-parallel run: the rank from torchrun's environment, the process group.

``torchrun`` (``python -m torch.distributed.run``) sets ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``; a process
without them is a world of one. The backend follows the device: NCCL for
CUDA, gloo otherwise. Every collective is bounded by a timeout, so a rank
that dies or hangs makes the others fail with an error instead of waiting.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import sys

import torch

from pathgrad.core.parent_watch import PARENT_PID_VARIABLE, watch_parent
from pathgrad.distributed.sync import DataParallel, DistributedError

__all__ = ["exit_rank", "join", "leave", "rank_seed", "torchrun_world_size"]

# Seeds of ranks 1, 2, ... are spaced far apart so that neither the seed + 1 of
# the evaluation env nor a neighbouring run's seed lands on another rank's.
RANK_SEED_STRIDE = 1_000_003


def torchrun_world_size() -> int:
    """``WORLD_SIZE`` of the environment (1 when not launched by torchrun)."""
    value = os.environ.get("WORLD_SIZE", "1")
    try:
        return max(1, int(value))
    except ValueError as error:
        raise DistributedError(f"WORLD_SIZE must be an integer, got {value!r}.") from error


def rank_seed(seed: int, rank: int) -> int:
    """Seed of rank ``rank``'s envs and sampling noise (rank 0 keeps ``seed``)."""
    return int(seed) + RANK_SEED_STRIDE * int(rank)


def join(device: str, timeout_seconds: float) -> DataParallel:
    """This process's place in the run: joins the process group under torchrun.

    Args:
        device: The env device of the run config (``cuda`` selects NCCL and
            the GPU ``LOCAL_RANK``).
        timeout_seconds: Bound of every collective and of the rendezvous.

    Raises:
        DistributedError: If the rendezvous fails or the setting is inconsistent.
    """
    world_size = torchrun_world_size()
    if world_size == 1:
        return DataParallel()
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    uses_cuda = torch.device(device).type == "cuda"
    if uses_cuda:
        if not torch.cuda.is_available():
            raise DistributedError("env.device is cuda but CUDA is not available on this host.")
        torch.cuda.set_device(local_rank)
    backend = "nccl" if uses_cuda else "gloo"
    if not dist.is_initialized():
        try:
            dist.init_process_group(
                backend, timeout=datetime.timedelta(seconds=float(timeout_seconds))
            )
        except Exception as error:  # noqa: BLE001 - rendezvous errors vary by backend
            raise DistributedError(
                f"rank {rank}: could not join the {world_size} ranks ({backend}): {error}"
            ) from error
    watch_parent(int(os.environ.get(PARENT_PID_VARIABLE, os.getppid())))  # torchrun's agent
    exchange_device = torch.device("cuda", local_rank) if uses_cuda else torch.device("cpu")
    return DataParallel(rank, world_size, backend, exchange_device)


def leave(data_parallel: DataParallel) -> None:
    """Leave the process group (nothing for a world of one), after a barrier when intact."""
    if not data_parallel.active:
        return
    import torch.distributed as dist

    if not data_parallel.broken:  # all ranks done with their collectives first
        with contextlib.suppress(DistributedError):
            data_parallel.barrier("the shutdown")
    if dist.is_initialized():
        dist.destroy_process_group()
    global _LEFT_A_GROUP
    _LEFT_A_GROUP = True


_LEFT_A_GROUP = False  # this process was a rank of a process group and has left it


def exit_rank(code: int) -> None:
    """After leaving a process group, end the process with ``code`` without teardown.

    torch 2.13's optimizers keep references to the default process group that
    ``destroy_process_group`` does not release, so gloo's threads outlive it and
    the interpreter's teardown destroys them late: the process then aborts
    (SIGABRT, "terminate called without an active exception") in about one
    exit of thirty, after its work is done. A rank that left a group flushes
    its output and logs and exits at once (``os._exit``); for any other
    process this returns, to exit normally.
    """
    if not _LEFT_A_GROUP:
        return
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    logging.shutdown()
    os._exit(code)
