"""A Featherstone substep's intermediates, kept from the forward pass for its adjoint.

The backward pass used to run each substep again under a ``wp.Tape`` so that
every array its adjoint kernels read held the substep's values, and then
backpropagate it. Those values are the forward pass's own (the same kernels on
the same inputs), so the forward pass can keep them instead: after each forward
substep, every array the taped substep's launches use (Newton's Featherstone
keeps its scratch on the output state when it is taped, on the solver
otherwise) is copied into a byte row, and the backward pass copies the row back
and replays, with no recompute, a tape recorded once on its buffers.

Arrays the kept tape's launches read but that do not change from one substep to
the next (the model's) are not kept; nor are the control (the step's forces
are loaded for every substep), the carried coordinates of the substep's input
(loaded from the saved input), the contact set (kept by the bridge's
``saved_contacts``) or arrays a caller keeps otherwise (the held mass matrix of
:class:`~pathgrad.envs.newton.engine.mass_matrix.MassMatrixCachingSimulation`).
:func:`kept_arrays` returns ``None`` where a tape holds an array it cannot place
(the bridge then recomputes, as before).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import warp as wp

from pathgrad.envs.newton.engine.saved_arrays import SavedArrays

__all__ = ["KeptIntermediates", "keep_intermediates", "kept_arrays"]

# Scratch that only an adjoint writes and reads (Featherstone's dense solve): its forward
# value does not matter, and the untaped step has none.
_ADJOINT_SCRATCH = ("joint_solve_tmp",)

# Where an array of the taped substep is found in the forward pass:
# ("input", name): the substep's input state; ("output", name): its output state;
# ("solver", name): the solver; ("contacts", name): the contact buffers; ("shared",
# address): an array of the solver held elsewhere (a table of groups), the same in both.
Place = tuple[str, str]


def _tape_arrays(tape: Any) -> list[Any] | None:
    """Every distinct Warp array of a tape's kernel launches (``None``: an entry of another kind
    holding arrays)."""
    arrays: dict[int, Any] = {}
    for launch in tape.launches:
        if isinstance(launch, list | tuple):
            arguments = [*launch[3], *launch[4]]
        elif not vars(launch):  # a recorded function (a copy's adjoint): no forward values
            continue
        else:
            return None
        for argument in arguments:
            if isinstance(argument, wp.array):
                arrays.setdefault(id(argument), argument)
    return list(arrays.values())


def _owner_arrays(owner: Any) -> dict[int, tuple[str, Any]]:
    return {id(a): (name, a) for name, a in vars(owner).items() if isinstance(a, wp.array)}


def _base_of(array: Any, candidates: dict[int, tuple[str, Any]]) -> tuple[str, Any] | None:
    """The candidate whose memory holds ``array`` (a view of it), else ``None``."""
    start, end = array.ptr, array.ptr + array.capacity
    for name, base in candidates.values():
        if base.ptr is not None and base.ptr <= start and end <= base.ptr + base.capacity:
            return name, base
    return None


def kept_arrays(
    tape: Any, simulation: Any, skip: Sequence[Any] = ()
) -> list[tuple[Place, Any]] | None:
    """The arrays of ``tape`` (recorded on ``simulation``'s backward buffers) to keep, each
    with where the forward pass holds it; ``None`` where one cannot be placed.

    ``skip``: arrays the caller keeps itself (their views are skipped too).
    """
    arrays = _tape_arrays(tape)
    if arrays is None:
        return None
    model = _owner_arrays(simulation.model)
    control = _owner_arrays(simulation._backward_control)
    state_in = _owner_arrays(simulation._backward_in)
    state_out = _owner_arrays(simulation._backward_out)
    solver = _owner_arrays(simulation.solver)
    contacts = _owner_arrays(simulation._contacts) if simulation._contacts is not None else {}
    detected = simulation.saved_contacts
    detected_ids = {id(a) for a in detected._arrays} if detected is not None else set()
    skipped = {id(a): ("", a) for a in skip}
    carried = {"joint_q", "joint_qd"}
    kept: dict[Place, Any] = {}
    for array in arrays:
        key = id(array)
        if key in model or key in control:
            continue
        if key in state_in:
            name = state_in[key][0]
            if name not in carried:
                kept[("input", name)] = array
        elif key in state_out:
            if state_out[key][0] not in _ADJOINT_SCRATCH:
                kept[("output", state_out[key][0])] = array
        elif key in contacts:
            if key in detected_ids:
                continue
            if detected is None:
                return None  # without kept contacts only a recompute detects them again
            kept[("contacts", contacts[key][0])] = array
        elif key in skipped or _base_of(array, skipped) is not None:
            continue
        elif key in solver:
            kept[("solver", solver[key][0])] = array
        elif (base := _base_of(array, solver)) is not None:  # a view of a solver buffer
            kept[("solver", base[0])] = base[1]
        elif _base_of(array, state_in) or _base_of(array, state_out) or _base_of(array, contacts):
            return None  # a view of a buffer the forward pass does not share
        else:  # the solver's own (e.g. in a table of groups): shared with the forward pass
            kept[("shared", f"{array.ptr:x}")] = array
    return sorted(kept.items(), key=lambda item: item[0])


class KeptIntermediates:
    """The kept arrays of one taped substep, one byte row per substep that uses it.

    Args:
        places: :func:`kept_arrays`'s list (place, backward buffer).
        substeps: The substeps (indices within an env step) that use this tape,
            in order; substep ``substeps[i]`` is kept in row ``i``.
        source: ``source(place, k)``: the forward pass's array at ``place`` for substep ``k``.
    """

    def __init__(
        self,
        places: list[tuple[Place, Any]],
        substeps: Sequence[int],
        source: Callable[[Place, int], Any],
    ) -> None:
        self.places = [place for place, _ in places]
        self._slots = {k: slot for slot, k in enumerate(substeps)}
        self._store = SavedArrays([array for _, array in places], len(self._slots))
        self._sources = {k: [source(place, k) for place in self.places] for k in self._slots}

    @property
    def bytes_per_substep(self) -> int:
        return self._store.bytes_per_slot

    def save(self, k: int) -> None:
        """Warp operations: keep forward substep ``k``'s arrays."""
        self._store.save_from(self._slots[k], self._sources[k])

    def row(self, rows: torch.Tensor, k: int) -> torch.Tensor:
        """Substep ``k``'s row of :meth:`rows`."""
        return rows[self._slots[k]]

    def rows(self) -> torch.Tensor:
        """A copy of every kept row (once per env step)."""
        return self._store.rows()

    def load(self, row: torch.Tensor) -> None:
        """Stage a row (torch) for :meth:`restore`."""
        self._store.load(row)

    def restore(self) -> None:
        """Warp operations: write the staged row into the backward buffers."""
        self._store.restore()


def _forward_array(simulation: Any, place: Place, k: int, array: Any) -> Any:
    """The forward pass's array at ``place`` for substep ``k`` (untaped, Featherstone keeps its
    scratch on the solver, under the names the taped step gives the output state's)."""
    role, name = place
    if role == "shared":
        return array
    if role == "contacts":
        return getattr(simulation._contacts, name)
    if role in ("input", "output"):
        state = simulation._states[k if role == "input" else k + 1]
        array = getattr(state, name, None)
        if isinstance(array, wp.array):
            return array
    return getattr(simulation.solver, name, None)


def keep_intermediates(
    simulation: Any,
) -> tuple[dict[Any, KeptIntermediates], dict[Any, Any]] | None:
    """For each tape variant of ``simulation`` (its ``_variants()``), a tape recorded once on
    its backward buffers and the :class:`KeptIntermediates` of the substeps using it; ``None``
    where a tape holds an array that cannot be placed or a forward array differs in shape.

    Runs an untaped substep on the forward buffers and one taped substep per variant on the
    backward buffers (scratch; called before the first step).
    """
    variants = simulation._variants()
    if variants == [None] and getattr(simulation.solver, "update_mass_matrix_interval", 1) != 1:
        return None  # the solver counts which substeps evaluate the mass matrix: not one tape
    kept, tapes = {}, {}
    # An untaped step first: the solver allocates its scratch at its first one.
    simulation._substep(
        simulation._states[0], simulation._states[1], simulation._control, detect=False
    )
    for key in variants:
        substeps = [k for k in range(simulation.substeps) if simulation._variant_of(k) == key]
        if not substeps:
            continue
        simulation._set_variant(key)
        tape = wp.Tape()
        with tape:
            simulation._substep(
                simulation._backward_in,
                simulation._backward_out,
                simulation._backward_control,
                detect=False,
            )
        places = kept_arrays(tape, simulation, simulation._kept_elsewhere())
        if places is None:
            return None
        for place, array in places:
            forward = _forward_array(simulation, place, substeps[0], array)
            if not isinstance(forward, wp.array) or forward.capacity != array.capacity:
                return None
        buffers = dict(places)
        kept[key] = KeptIntermediates(
            places,
            substeps,
            lambda place, k, buffers=buffers: _forward_array(simulation, place, k, buffers[place]),
        )
        tapes[key] = tape
    return kept, tapes
