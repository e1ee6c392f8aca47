"""A substep's intermediates kept from the forward pass: the same gradients, no recompute."""

from __future__ import annotations

import pytest
import torch

newton = pytest.importorskip("newton", reason="the Newton backend needs pathgrad[newton]")

import pathgrad.envs.newton as backend  # noqa: E402
from helpers import assert_same_windows, window_with_gradients  # noqa: E402
from pathgrad.envs.newton.engine import kept_intermediates  # noqa: E402
from pathgrad.envs.newton.engine.saved_arrays import SavedArrays  # noqa: E402


def _recomputing(cls):
    return type(cls.__name__, (cls,), {"keep_intermediates": False})


@pytest.mark.parametrize(
    "name, options",
    [
        ("DiffRLAnt", {}),  # a mass matrix per step: two tapes (evaluating, reusing)
        ("DiffRLAnt", {"mass_matrix_interval": 4}),
        ("DiffRLHopper", {}),
        ("NewtonAnt", {}),  # a mass matrix every substep: one tape
    ],
)
def test_kept_intermediates_give_the_gradients_of_a_recompute_bit_for_bit(name, options):
    cls = getattr(backend, name)
    kept, recomputing = cls(2, seed=0, **options), _recomputing(cls)(2, seed=0, **options)
    assert_same_windows(kept, recomputing, 24)
    assert kept.simulation.kept is not None and recomputing.simulation.kept is None
    # The adjoint replays the tapes recorded once: no substep ran under a new tape.
    tapes = kept.simulation._kept_tapes.values()
    assert any(kept.simulation._tape is tape for tape in tapes)


def test_the_backward_pass_reads_the_intermediates_it_kept(monkeypatch):
    """Staging zeros instead of the kept rows changes the gradients: the rows are used."""
    env = backend.DiffRLAnt(2, seed=0)
    _, _, right = window_with_gradients(env, 12)
    original = SavedArrays.load
    stores = {id(store._store) for store in env.simulation.kept.values()}

    def zero_kept(self, row):
        if id(self) in stores:
            self._staged.zero_()
        else:
            original(self, row)

    monkeypatch.setattr(SavedArrays, "load", zero_kept)
    _, _, without = window_with_gradients(env, 12)
    assert torch.isfinite(right).all() and not torch.equal(right, without)


def test_a_tape_that_cannot_be_placed_falls_back_to_the_recompute(monkeypatch):
    monkeypatch.setattr(kept_intermediates, "kept_arrays", lambda *args: None)
    env = backend.DiffRLAnt(2, seed=0)
    twin = _recomputing(backend.DiffRLAnt)(2, seed=0)
    assert_same_windows(env, twin, 6)
    assert env.simulation.kept is None


def test_an_array_of_a_state_that_no_owner_holds_cannot_be_placed():
    """A view into a backward state's buffer (the forward pass has its own) is refused, and a
    recorded entry holding arrays of its own is too."""
    import warp as wp

    env = backend.DiffRLAnt(1, seed=0)
    simulation = env.simulation
    state_view = wp.array(
        ptr=simulation._backward_out.joint_qd.ptr, dtype=wp.float32, shape=(2,), device="cpu"
    )

    class Tape:
        launches = [[None, 1, 0, [state_view], []]]

    assert kept_intermediates.kept_arrays(Tape(), simulation) is None

    class Entry:
        def __init__(self):
            self.arrays = [simulation._backward_out.joint_qd]

    Tape.launches = [Entry()]
    assert kept_intermediates.kept_arrays(Tape(), simulation) is None


def test_rows_handed_out_are_never_overwritten_and_released_buffers_are_reused(monkeypatch):
    """The per-step copies come from a pool: a buffer is reused only once nothing holds it
    (the returned tensor or any view of it), and the pool is bounded."""
    import warp as wp

    from pathgrad.envs.newton.engine import saved_arrays

    array = wp.zeros(8, dtype=wp.float32, device="cpu")
    saved = SavedArrays([array], 2)
    values = wp.to_torch(array)
    held = []
    for step in range(5):
        values.fill_(float(step))
        saved.save(0)
        rows = saved.rows()
        held.append(rows if step % 2 else rows[0])  # the whole copy, or a view of a row
    for step, kept in enumerate(held):
        row = kept if kept.ndim == 1 else kept[0]
        assert torch.equal(row[:32].view(torch.float32), torch.full((8,), float(step)))
    pooled = len(saved._pool)
    del held, rows, kept, row
    for _ in range(3):
        saved.rows()
    assert len(saved._pool) == pooled == 5  # released buffers reused, none added
    monkeypatch.setattr(saved_arrays, "POOLED_BUFFERS", 5)
    extra = [saved.rows() for _ in range(7)]
    assert len(saved._pool) == 5 and len({t.data_ptr() for t in extra}) == 7


def test_a_solver_counting_its_own_mass_matrix_updates_is_recomputed():
    """Newton's ``update_mass_matrix_interval`` picks the substeps by its own count: one
    recorded tape cannot stand for both kinds, so nothing is kept."""
    env = backend.NewtonAnt(1, seed=0, solver_options={"update_mass_matrix_interval": 2})
    env.reset(seed=0)
    action = torch.zeros(1, env.action_dim, requires_grad=True)
    env.step(action)[1].sum().backward()
    assert env.simulation.kept is None and torch.isfinite(action.grad).all()
