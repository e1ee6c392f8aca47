"""The mass matrix's adjoint written out: Warp's tile adjoint, within float32 rounding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

newton = pytest.importorskip("newton", reason="the Newton backend needs pathgrad[newton]")

import warp as wp  # noqa: E402

from helpers import window_with_gradients  # noqa: E402
from pathgrad.envs.newton import DiffRLAnt, NewtonAnt  # noqa: E402
from pathgrad.envs.newton.engine import inertia_adjoint  # noqa: E402
from pathgrad.envs.newton.engine.bridge import NewtonSimulation, NewtonStep  # noqa: E402
from pathgrad.envs.newton.robots import reacher  # noqa: E402


def _tile_launch(env):
    """The first step's taped mass-matrix substep and its recorded tile-kernel launch."""
    tape = env.simulation._kept_tapes[True]
    launches = [
        launch
        for launch in tape.launches
        if isinstance(launch, list | tuple) and launch[0].key.endswith("cholesky_tile")
    ]
    assert len(launches) == 1
    return tape, launches[0]


def _warp_adjoint(tape, launch):
    """Warp's own adjoint of the recorded launch (as ``wp.Tape.backward`` runs it)."""
    from warp._src.context import _ResolvedBlockDim

    kernel, dim, max_blocks, inputs, outputs, device, block_dim = launch[:7]
    wp.launch(
        kernel,
        dim=dim,
        inputs=inputs,
        outputs=outputs,
        adj_inputs=[tape.get_adjoint(x) for x in inputs],
        adj_outputs=[tape.get_adjoint(x) for x in outputs],
        device=device,
        adjoint=True,
        max_blocks=max_blocks,
        block_dim=_ResolvedBlockDim(block_dim),
        record_tape=False,
    )


@pytest.mark.parametrize("with_factor_adjoint", [False, True])
def test_the_written_out_adjoint_equals_warp_s_tile_adjoint(with_factor_adjoint):
    """Random adjoints of H (and of L, which both must ignore: Newton's solve writes the
    solved matrix's adjoint into H's and L's alike) give the same J and M adjoints."""
    env = DiffRLAnt(4, seed=0)
    env.simulation.written_out_inertia_adjoint = False  # the tape keeps Warp's launch
    window_with_gradients(env, 3)
    env.simulation.kept[True].restore()  # a forward substep's values in the taped buffers
    tape, launch = _tile_launch(env)
    J, M = launch[3][:2]
    H, L = launch[4]
    results = []
    for adjoint in (
        lambda: _warp_adjoint(tape, launch),
        inertia_adjoint.TileInertiaAdjoint(tape, launch),
    ):
        rng = np.random.default_rng(0)
        for array in (J, M, H, L):
            array.grad.zero_()
        H.grad.assign(rng.standard_normal(H.shape).astype(np.float32))
        if with_factor_adjoint:
            L.grad.assign(rng.standard_normal(L.shape).astype(np.float32))
        adjoint()
        results.append([J.grad.numpy().copy(), M.grad.numpy().copy()])
    for warp_s, written_out in zip(*results, strict=True):
        assert np.abs(warp_s).max() > 1.0  # not both zero
        np.testing.assert_allclose(written_out, warp_s, rtol=0, atol=1e-5 * np.abs(warp_s).max())


@pytest.mark.parametrize("cls", [DiffRLAnt, NewtonAnt])
def test_a_window_s_gradients_are_those_of_warp_s_tile_adjoint(cls, monkeypatch):
    """Over a window through contacts, with the mass matrix once per step (DiffRLAnt) or
    every substep (NewtonAnt): within float32 rounding of Warp's adjoint."""
    replaced = []
    original = inertia_adjoint.replace_tile_adjoints

    def counting(tape):
        replaced.append(original(tape))
        return replaced[-1]

    monkeypatch.setattr("pathgrad.envs.newton.engine.bridge.replace_tile_adjoints", counting)
    windows = []
    for written_out in (False, True):
        env = cls(4, seed=0)
        env.simulation.written_out_inertia_adjoint = written_out
        windows.append(window_with_gradients(env, 6))
    assert sum(replaced) > 0
    (observations, rewards, gradients), (observations_2, rewards_2, gradients_2) = windows
    assert torch.equal(observations, observations_2) and torch.equal(rewards, rewards_2)
    assert gradients.abs().max() > 0
    torch.testing.assert_close(gradients_2, gradients, rtol=1e-4, atol=1e-5 * gradients.abs().max())


def test_the_cpu_bridge_uses_the_written_out_adjoint():
    assert DiffRLAnt(1, seed=0).simulation.written_out_inertia_adjoint


def _scene_of_two_sizes():
    """Two planar arms (2 hinges) around a hopper (4 joints, 6 DOFs): one tile launch
    per articulation size, each over its own views of the solver's J, M, H and L."""
    assets = Path(reacher.__file__).parent / "assets"
    builder = newton.ModelBuilder()
    for name in ("planar_arm.xml", "diffrl_hopper.xml", "planar_arm.xml"):
        builder.add_mjcf(str(assets / name))
    return builder.finalize(device="cpu", requires_grad=True)


@pytest.mark.parametrize("keep_intermediates", [False, True])
def test_articulations_of_several_sizes_get_warp_s_gradients(keep_intermediates, monkeypatch):
    replaced = []
    original = inertia_adjoint.replace_tile_adjoints
    monkeypatch.setattr(
        "pathgrad.envs.newton.engine.bridge.replace_tile_adjoints",
        lambda tape: replaced.append(original(tape)) or replaced[-1],
    )
    gradients = []
    for written_out in (False, True):
        simulation = NewtonSimulation(
            _scene_of_two_sizes(), substeps=2, dt=0.01, keep_intermediates=keep_intermediates
        )
        assert len(simulation.solver._tile_kernels_by_size) == 2
        simulation.written_out_inertia_adjoint = written_out
        generator = torch.Generator().manual_seed(0)
        q = (0.2 * torch.randn(simulation.coordinates, generator=generator)).requires_grad_()
        qd = (0.5 * torch.randn(simulation.dofs, generator=generator)).requires_grad_()
        f = torch.randn(simulation.dofs, generator=generator).requires_grad_()
        weights = torch.randn(simulation.coordinates, generator=generator)
        x, v = q, qd
        for _ in range(3):
            x, v = NewtonStep.apply(simulation, x, v, f)
        ((x * weights).sum() + v.square().sum()).backward()
        gradients.append(torch.cat([q.grad, qd.grad, f.grad]))
    assert 2 in replaced  # both sizes' launches on one tape
    want, got = gradients
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5 * want.abs().max())
