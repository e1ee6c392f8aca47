"""The contacts of every forward substep, kept for the backward pass.

The backward pass differentiates each substep again from its saved input. The
contact set is not differentiated (collision detection is frozen per
substep), so instead of detecting it again, from body poses computed again,
the substep gets back what its forward detection wrote. That is the same
data, bit for bit, at a fraction of the cost: on ``DiffRLAnt`` collision
detection and the forward kinematics it needs were about a third of the
recompute's kernel time.

What is kept: every array of Newton's ``Contacts`` that collision detection
writes (the counts, shapes, points, offsets, normals, margins...), as one
byte row per substep (``[substeps, bytes]``, about 90 bytes per contact slot;
1664 slots on the 64-env ant: 2.3 MB per env step). The solver's own outputs
(``rigid_contact_force`` and the differentiable ``_rigid_contact_diff_*``) are
recomputed under the tape as before.
"""

from __future__ import annotations

from typing import Any

import torch
import warp as wp

__all__ = ["ContactRecord"]

# Arrays of newton.Contacts that the solver writes (not collision detection).
_SOLVER_OUTPUTS = ("rigid_contact_force",)
_ALIGNMENT = 16


class ContactRecord:
    """Saves a ``Contacts``' detection output per substep and puts it back.

    Args:
        contacts: The ``newton.Contacts`` collision detection writes into.
        substeps: Substeps per env step (rows kept).
    """

    def __init__(self, contacts: Any, substeps: int) -> None:
        self._arrays = [
            array
            for name, array in sorted(vars(contacts).items())
            if isinstance(array, wp.array)
            and array.capacity > 0
            and not array.requires_grad
            and name not in _SOLVER_OUTPUTS
        ]
        offsets, size = [], 0
        for array in self._arrays:
            offsets.append(size)
            size += -(-array.capacity // _ALIGNMENT) * _ALIGNMENT
        self.bytes_per_substep = size
        device = wp.device_to_torch(contacts.rigid_contact_count.device)
        self._rows = torch.zeros(substeps, size, dtype=torch.uint8, device=device)
        self._restore_row = torch.zeros(size, dtype=torch.uint8, device=device)
        self._row_views = [self._views(self._rows[k], offsets) for k in range(substeps)]
        self._restore_views = self._views(self._restore_row, offsets)

    def _views(self, row: torch.Tensor, offsets: list[int]) -> list[Any]:
        """Warp arrays shaped as the contact arrays over ``row``'s bytes."""
        base = row.data_ptr()
        return [
            wp.array(ptr=base + offset, dtype=array.dtype, shape=array.shape, device=array.device)
            for array, offset in zip(self._arrays, offsets, strict=True)
        ]

    def save(self, substep: int) -> None:
        """Warp operations: copy the contacts just detected into row ``substep``."""
        for saved, array in zip(self._row_views[substep], self._arrays, strict=True):
            wp.copy(saved, array)

    def rows(self) -> torch.Tensor:
        """A copy of every substep's row of the last forward step, ``[substeps, bytes]``."""
        return self._rows.clone()

    def load(self, row: torch.Tensor) -> None:
        """Stage one saved row (torch) for :meth:`restore`."""
        self._restore_row.copy_(row)

    def restore(self) -> None:
        """Warp operations: write the staged row back into the contact arrays."""
        for array, saved in zip(self._arrays, self._restore_views, strict=True):
            wp.copy(array, saved)
