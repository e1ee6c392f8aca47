"""Warp arrays of the forward pass, kept for the backward pass instead of recomputed.

The backward pass differentiates each substep again from its saved input. Two
things it used to recompute are not differentiated, so they can be put back
from the forward pass instead, bit for bit:

- the contact set (collision detection is frozen per substep): every array of
  Newton's ``Contacts`` that detection writes (counts, shapes, points,
  offsets, normals, margins), about 90 bytes per contact slot per substep
  (1664 slots on the 64-env ant: 2.3 MB per env step). Detecting it again,
  from body poses computed again, was about a third of the recompute's kernel
  time on ``DiffRLAnt``;
- the mass matrix and its Cholesky factor where substeps reuse them
  (:class:`~pathgrad.envs.newton.engine.mass_matrix.MassMatrixCachingSimulation`),
  which the backward pass otherwise evaluates again with a whole substep.

:class:`SavedArrays` keeps a list of arrays as one byte row per slot
(``[slots, bytes]``): Warp copies them in and out inside the captured graphs,
torch copies the rows out once per env step, into a buffer of a pool that no
earlier step's rows still use (a fresh allocation of megabytes per step cost
more than the copy, in page faults).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import warp as wp

__all__ = ["SavedArrays", "contact_detection_arrays"]

# Arrays of newton.Contacts that the solver writes (not collision detection).
_SOLVER_OUTPUTS = ("rigid_contact_force",)
_ALIGNMENT = 16
# Buffers of rows kept for reuse per SavedArrays (more are allocated and not kept).
POOLED_BUFFERS = 64


def _storage_users(tensor: torch.Tensor) -> int | None:
    """References to ``tensor``'s storage (views included), ``None`` where torch cannot say."""
    try:
        return int(torch._C._storage_Use_Count(tensor.untyped_storage()._cdata))
    except (AttributeError, RuntimeError):  # a private torch API: no pool without it
        return None


def contact_detection_arrays(contacts: Any) -> list[Any]:
    """The arrays of a ``newton.Contacts`` that collision detection writes.

    Those without adjoints, but the solver's own output ``rigid_contact_force``
    (the differentiable ``_rigid_contact_diff_*`` are the solver's too).
    """
    return [
        array
        for name, array in sorted(vars(contacts).items())
        if isinstance(array, wp.array)
        and array.capacity > 0
        and not array.requires_grad
        and name not in _SOLVER_OUTPUTS
    ]


class SavedArrays:
    """Copies of ``arrays`` in ``slots`` byte rows, and back.

    Args:
        arrays: Contiguous Warp arrays on one device.
        slots: Rows kept (one per substep, or per mass-matrix block).
    """

    def __init__(self, arrays: Sequence[Any], slots: int) -> None:
        self._arrays = list(arrays)
        offsets, size = [], 0
        for array in self._arrays:
            offsets.append(size)
            size += -(-array.capacity // _ALIGNMENT) * _ALIGNMENT
        self.bytes_per_slot = size
        device = wp.device_to_torch(self._arrays[0].device)
        self._rows = torch.zeros(slots, size, dtype=torch.uint8, device=device)
        self._staged = torch.zeros(size, dtype=torch.uint8, device=device)
        self._row_views = [self._views(self._rows[slot], offsets) for slot in range(slots)]
        self._pool: list[torch.Tensor] = []
        self._unused_users = _storage_users(self._rows)
        self._staged_views = self._views(self._staged, offsets)

    def _views(self, row: torch.Tensor, offsets: list[int]) -> list[Any]:
        """Warp arrays shaped as ``arrays`` over ``row``'s bytes."""
        base = row.data_ptr()
        return [
            wp.array(ptr=base + offset, dtype=array.dtype, shape=array.shape, device=array.device)
            for array, offset in zip(self._arrays, offsets, strict=True)
        ]

    def save(self, slot: int) -> None:
        """Warp operations: copy the arrays into row ``slot``."""
        self.save_from(slot, self._arrays)

    def save_from(self, slot: int, sources: Sequence[Any]) -> None:
        """Warp operations: copy ``sources`` (shaped as the arrays) into row ``slot``."""
        for saved, array in zip(self._row_views[slot], sources, strict=True):
            wp.copy(saved, array)

    def rows(self) -> torch.Tensor:
        """A copy of every row, ``[slots, bytes]`` (in a buffer nothing else uses)."""
        buffer = self._unused_buffer()
        buffer.copy_(self._rows)
        return buffer[...]  # a view: the buffer counts as used while the caller holds it

    def _unused_buffer(self) -> torch.Tensor:
        """A pooled buffer that no tensor or view outside the pool holds, else a new one."""
        if self._unused_users is None:
            return torch.empty_like(self._rows)
        for buffer in self._pool:
            if _storage_users(buffer) == self._unused_users:
                return buffer
        buffer = torch.empty_like(self._rows)
        if len(self._pool) < POOLED_BUFFERS:
            self._pool.append(buffer)
        return buffer

    def load(self, row: torch.Tensor) -> None:
        """Stage one row (torch) for :meth:`restore`."""
        self._staged.copy_(row)

    def restore(self) -> None:
        """Warp operations: write the staged row back into the arrays."""
        for array, saved in zip(self._arrays, self._staged_views, strict=True):
            wp.copy(array, saved)
