"""The points where data-parallel ranks meet, and their no-op form for one process.

Every rank runs the single-process data flow on its own env batch. They meet
once per update, in the gradient average after its backward, which also
carries what every update exchanges (:meth:`DataParallel.carry`: the skip
flag and loss terms, interrupt requests, the count of finished episodes, the
observation normalizer's moments); besides, after each critic step (SHAC),
to exchange finished episodes when there are any, for rank 0's evaluation
results and for the per-rank state gathered into a checkpoint.
:class:`DataParallel` with ``world_size == 1`` (the default) returns at once
from each, so a single process takes the same path.

Gradients are averaged with one explicit ``all_reduce`` per optimizer step
rather than ``DistributedDataParallel``: APG backpropagates several segments
(or accumulated rollouts) before one step, calls the policy many times per
backward and may compile the whole update, none of which DDP's per-backward
bucket hooks fit; and a gloo collective costs 1-2 ms on one host whatever its
size, so one flat buffer per update is what keeps small updates fast.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import torch

__all__ = ["DataParallel", "DistributedError", "LostContact"]

T = TypeVar("T")


class DistributedError(RuntimeError):
    """The ranks cannot work together: a failed rendezvous, an inconsistent setting."""


class LostContact(DistributedError):
    """A collective failed: another rank died, stopped or timed out."""


class DataParallel:
    """Collectives of one data-parallel run (``torch.distributed``'s default group).

    Args:
        rank: This process's rank.
        world_size: Number of ranks; 1 makes every method return at once.
        backend: ``gloo`` or ``nccl`` (recorded, for messages).
        device: Device of the tensors exchanged (CUDA for NCCL, else CPU).
        seed: The run's seed (ranks derive theirs from it).
    """

    def __init__(
        self,
        rank: int = 0,
        world_size: int = 1,
        backend: str = "none",
        device: torch.device | str = "cpu",
        seed: int = 0,
    ) -> None:
        self.rank = int(rank)
        self.world_size = int(world_size)
        self.backend = backend
        self.device = torch.device(device)
        self.seed = int(seed)
        self.broken = False  # a collective failed: no further collective is attempted
        self._riders: list[tuple[int, Callable[[], torch.Tensor], Callable[..., None]]] = []
        self.carried = False  # the carried values were exchanged in this update
        self.stop_agreed = False  # a rank's callback asked to stop training (see attach)

    @property
    def is_main(self) -> bool:
        """Whether this is rank 0, the one that evaluates, logs and writes."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        """More than one rank."""
        return self.world_size > 1

    def _collective(self, what: str, operation: Callable[[], T]) -> T:
        """Run a collective; any failure becomes one :class:`DistributedError`."""
        if self.broken:
            raise LostContact(f"rank {self.rank}: the ranks have already lost contact.")
        try:
            return operation()
        except Exception as error:  # noqa: BLE001 - gloo/NCCL raise several types
            self.broken = True
            detail = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise LostContact(
                f"rank {self.rank} of {self.world_size}: lost contact with the other ranks "
                f"during {what} ({detail}); another rank died, stopped or timed out. The "
                "last checkpoint is intact: resume the run from it."
            ) from error

    def carry(
        self, size: int, send: Callable[[], torch.Tensor], receive: Callable[[torch.Tensor], None]
    ) -> None:
        """Add ``size`` values to every update's gradient average, summed over the ranks.

        ``send()`` gives this rank's values (float64, ``[size]``); ``receive``
        gets their sum over the ranks. Collectives are the costly part of a
        small update (about 1-2 ms each over gloo on one host), so what every
        update exchanges travels in the one all-reduce it needs anyway.
        """
        self._riders.append((size, send, receive))

    def forget_riders(self) -> None:
        """Drop every :meth:`carry` registration (a new trainer registers its own)."""
        self._riders.clear()
        self.carried = False

    def average_gradients(
        self, parameters: Iterable[torch.Tensor], extras: torch.Tensor, *, carry: bool = False
    ) -> torch.Tensor:
        """Average the parameters' gradients and ``extras`` (1-D float64) over the ranks.

        A missing gradient counts as zeros and is replaced by the average. One
        ``all_reduce`` of one flat buffer; every rank receives the same bytes,
        so parameters stay bit-identical across ranks. With ``carry`` (once per
        update) the values of :meth:`carry` travel in the same buffer.
        """
        if not self.active:
            return extras
        import torch.distributed as dist

        parameters = [p for p in parameters if p.requires_grad]
        for parameter in parameters:
            if parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
        riders = self._riders if carry else []
        carried = [send().to(self.device, torch.float64).reshape(-1) for _, send, _ in riders]
        flat = torch.cat(
            [extras.to(self.device, torch.float64).reshape(-1), *carried]
            + [p.grad.detach().reshape(-1).to(self.device, torch.float64) for p in parameters]
        )
        self._collective("the gradient average", lambda: dist.all_reduce(flat))
        offset = extras.numel()
        for size, _, receive in riders:
            receive(flat[offset : offset + size])
            offset += size
        self.carried = self.carried or carry
        flat /= self.world_size
        for parameter in parameters:
            count = parameter.numel()
            parameter.grad.copy_(flat[offset : offset + count].view_as(parameter))
            offset += count
        return flat[: extras.numel()].to(extras.device)

    def carry_now(self) -> None:
        """Exchange the :meth:`carry` values alone (an update that averaged no gradient)."""
        self.average_gradients([], torch.zeros(0, dtype=torch.float64), carry=True)

    def sum_across_ranks(self, values: torch.Tensor, what: str) -> torch.Tensor:
        """The sum of ``values`` over the ranks (a copy; the input is left as it is)."""
        if not self.active:
            return values
        import torch.distributed as dist

        total = values.detach().to(self.device, torch.float64).clone()
        self._collective(what, lambda: dist.all_reduce(total))
        return total.to(values.device)

    def all_agree(self, flag: bool) -> bool:
        """Whether ``flag`` is true on every rank."""
        if not self.active:
            return flag
        value = torch.tensor([0.0 if flag else 1.0], dtype=torch.float64)
        return float(self.sum_across_ranks(value, "a consistency check")) == 0.0

    def exchange(self, what: str, payload: Any) -> list[Any]:
        """Every rank's ``payload`` (picklable), in rank order, on every rank."""
        if not self.active:
            return [payload]
        import torch.distributed as dist

        gathered: list[Any] = [None] * self.world_size
        self._collective(what, lambda: dist.all_gather_object(gathered, payload))
        return gathered

    def from_main(self, what: str, compute: Callable[[], T]) -> T:
        """``compute()`` on rank 0, its result (or its failure) on every rank."""
        if not self.active:
            return compute()
        import torch.distributed as dist

        message: list[Any] = [None]
        failure: BaseException | None = None
        if self.is_main:
            try:
                message[0] = ("ok", compute())
            except BaseException as error:  # noqa: BLE001 - told to the others, then raised
                failure = error
                message[0] = ("failed", f"{type(error).__name__}: {error}")
        self._collective(what, lambda: dist.broadcast_object_list(message, src=0))
        if failure is not None:
            raise failure
        status, value = message[0]
        if status != "ok":
            raise DistributedError(f"rank 0 failed during {what}: {value}")
        return value

    def broadcast_modules(self, modules: Sequence[torch.nn.Module]) -> None:
        """Copy rank 0's parameters and buffers into every rank's modules."""
        if not self.active:
            return
        import torch.distributed as dist

        for module in modules:
            for tensor in module.state_dict().values():
                if isinstance(tensor, torch.Tensor):
                    buffer = tensor.detach().to(self.device)
                    self._collective("the initial broadcast", lambda b=buffer: dist.broadcast(b, 0))
                    if buffer.data_ptr() != tensor.data_ptr():
                        tensor.copy_(buffer)

    def barrier(self, what: str) -> None:
        """Wait for every rank."""
        if self.active:
            import torch.distributed as dist

            self._collective(what, dist.barrier)
