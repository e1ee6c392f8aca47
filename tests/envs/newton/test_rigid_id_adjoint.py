"""Inverse dynamics differentiated from the lighter kernel: Warp's adjoint of Newton's,
within float32 rounding, and both against central differences."""

from __future__ import annotations

import numpy as np
import pytest
import torch

newton = pytest.importorskip("newton", reason="the Newton backend needs pathgrad[newton]")

import warp as wp  # noqa: E402

from helpers import window_with_gradients  # noqa: E402
from pathgrad.envs.newton import (  # noqa: E402
    DiffRLAnt,
    DiffRLHopper,
    DiffRLHumanoid,
    NewtonAnt,
)
from pathgrad.envs.newton.engine import rigid_id_adjoint  # noqa: E402
from pathgrad.envs.newton.engine.bridge import NewtonSimulation, NewtonStep  # noqa: E402

_OUTPUT_NAMES = (
    "body_qd",
    "joint_S_s",
    "body_solve_origin",
    "body_I_s",
    "body_v_s",
    "body_f_s",
    "body_a_s",
)
_DIFFERENTIABLE_INPUTS = {8: "joint_q", 9: "joint_qd", 14: "body_q", 15: "body_q_com"}


def _reusing_substep(env):
    """A window's taped substep that reuses the mass matrix, its values put back, and its
    recorded ``eval_rigid_id`` launch (the tape kept as Warp recorded it)."""
    env.simulation.light_rigid_id_adjoint = False
    window_with_gradients(env, 2)
    env.simulation.kept[False].restore()
    tape = env.simulation._kept_tapes[False]
    ((_, launch),) = rigid_id_adjoint.recorded_rigid_id_launches(tape)
    return tape, launch


def _adjoints(kernel, tape, launch, cotangents):
    """The differentiable inputs' adjoints for the outputs' ``cotangents``."""
    for x in [*launch[3], *launch[4]]:
        if isinstance(x, wp.array) and tape.get_adjoint(x) is not None:
            tape.get_adjoint(x).zero_()
    for output, cotangent in zip(launch[4], cotangents, strict=True):
        tape.get_adjoint(output).assign(cotangent.astype(np.float32))
    rigid_id_adjoint.launch_on_recorded(kernel, tape, launch, adjoint=True)
    return {
        name: tape.get_adjoint(launch[3][index]).numpy().astype(np.float64).copy()
        for index, name in _DIFFERENTIABLE_INPUTS.items()
        if tape.get_adjoint(launch[3][index]) is not None
    }


def _cotangents(launch, seed=0):
    rng = np.random.default_rng(seed)
    cotangents = [rng.standard_normal(output.numpy().shape) for output in launch[4]]
    cotangents[_OUTPUT_NAMES.index("body_I_s")][:] = 0.0  # read by no launch of the substep
    return cotangents


@pytest.mark.parametrize("cls", [DiffRLAnt, DiffRLHopper, DiffRLHumanoid])
def test_the_light_kernel_computes_newton_s_outputs(cls):
    env = cls(4, seed=0)
    assert rigid_id_adjoint.covers_joint_types(env.simulation.model)
    tape, launch = _reusing_substep(env)
    rigid_id_adjoint.launch_on_recorded(launch[0], tape, launch, adjoint=False)
    want = [output.numpy().copy() for output in launch[4]]
    body_I_s = launch[4][_OUTPUT_NAMES.index("body_I_s")]
    body_I_s.zero_()
    rigid_id_adjoint.launch_on_recorded(
        rigid_id_adjoint.light_rigid_id, tape, launch, adjoint=False
    )
    for name, output, expected in zip(_OUTPUT_NAMES, launch[4], want, strict=True):
        if name == "body_I_s":
            assert not output.numpy().any()  # left as it was
            continue
        scale = max(np.abs(expected).max(), 1.0)
        np.testing.assert_allclose(
            output.numpy(), expected, rtol=0, atol=1e-6 * scale, err_msg=name
        )


@pytest.mark.parametrize("cls", [DiffRLAnt, DiffRLHopper])
def test_the_light_adjoint_equals_warp_s_and_central_differences(cls):
    """Random output adjoints (``body_I_s``'s zero): every differentiable input's adjoint
    equals Warp's adjoint of Newton's kernel, and its projection on a random direction
    matches central differences of Newton's forward (in float32, eps 1e-3)."""
    env = cls(4, seed=0)
    tape, launch = _reusing_substep(env)
    cotangents = _cotangents(launch)
    warp_s = _adjoints(launch[0], tape, launch, cotangents)
    light = _adjoints(rigid_id_adjoint.light_rigid_id, tape, launch, cotangents)
    assert set(warp_s) == set(light) == set(_DIFFERENTIABLE_INPUTS.values())
    for name, want in warp_s.items():
        # joint_q enters only through the planar roots' D6 joints
        assert np.abs(want).max() > 0.1 or (name == "joint_q" and cls is DiffRLAnt), name
        np.testing.assert_allclose(
            light[name], want, rtol=0, atol=2e-5 * np.abs(want).max(), err_msg=name
        )

    def objective():
        rigid_id_adjoint.launch_on_recorded(launch[0], tape, launch, adjoint=False)
        return sum(
            (output.numpy().astype(np.float64) * cotangent).sum()
            for output, cotangent in zip(launch[4], cotangents, strict=True)
        )

    rng = np.random.default_rng(1)
    for index, name in _DIFFERENTIABLE_INPUTS.items():
        if name not in light:
            continue
        array = launch[3][index]
        base = array.numpy().copy()
        direction = rng.standard_normal(base.shape)
        values = []
        for sign in (1.0, -1.0):
            array.assign((base + sign * 1e-3 * direction).astype(np.float32))
            values.append(objective())
        array.assign(base)
        central = (values[0] - values[1]) / 2e-3
        projected = (light[name] * direction).sum()
        assert abs(projected - central) <= 2e-3 * abs(central) + 1e-2, (name, projected, central)


def test_the_light_adjoint_misses_body_I_s_s_adjoint():
    """Where ``body_I_s``'s adjoint is not zero (a substep evaluating the mass matrix) the
    light kernel's adjoint is wrong: why the tape keeps Warp's there, and that the
    comparison above can fail."""
    env = DiffRLAnt(4, seed=0)
    tape, launch = _reusing_substep(env)
    cotangents = _cotangents(launch)
    cotangents[_OUTPUT_NAMES.index("body_I_s")] = np.random.default_rng(2).standard_normal(
        cotangents[_OUTPUT_NAMES.index("body_I_s")].shape
    )
    want = _adjoints(launch[0], tape, launch, cotangents)["body_q_com"]
    got = _adjoints(rigid_id_adjoint.light_rigid_id, tape, launch, cotangents)["body_q_com"]
    assert np.abs(got - want).max() > 0.1 * np.abs(want).max()


@pytest.mark.parametrize("cls", [DiffRLAnt, DiffRLHopper])
def test_a_window_s_gradients_are_those_of_warp_s_adjoint(cls, monkeypatch):
    """Over a window through contacts: the substeps that reuse the mass matrix take the
    light adjoint, the one that evaluates it keeps Warp's; same gradients within float32."""
    replaced = []
    original = rigid_id_adjoint.replace_rigid_id_adjoints
    monkeypatch.setattr(
        "pathgrad.envs.newton.engine.bridge.replace_rigid_id_adjoints",
        lambda tape: replaced.append(original(tape)) or replaced[-1],
    )
    windows = []
    for light in (False, True):
        env = cls(4, seed=0)
        env.simulation.light_rigid_id_adjoint = light
        windows.append(window_with_gradients(env, 6))
    assert 1 in replaced and 0 in replaced  # reusing substeps replaced, evaluating ones kept
    (observations, rewards, gradients), (observations_2, rewards_2, gradients_2) = windows
    assert torch.equal(observations, observations_2) and torch.equal(rewards, rewards_2)
    assert gradients.abs().max() > 0
    torch.testing.assert_close(gradients_2, gradients, rtol=1e-4, atol=1e-5 * gradients.abs().max())


def test_a_tape_whose_mass_matrix_reads_body_I_s_keeps_warp_s_adjoint():
    """NewtonAnt evaluates the mass matrix every substep: no launch is replaced."""
    env = NewtonAnt(2, seed=0)
    assert env.simulation.light_rigid_id_adjoint
    window_with_gradients(env, 1)
    for tape in env.simulation._kept_tapes.values():
        kinds = [type(entry).__name__ for entry in tape.launches]
        assert "RigidIdAdjoint" not in kinds
        assert rigid_id_adjoint.replace_rigid_id_adjoints(tape) == 0


def test_an_entry_it_cannot_inspect_keeps_warp_s_adjoint():
    env = DiffRLAnt(2, seed=0)
    tape, launch = _reusing_substep(env)
    tape.launches.append(lambda: None)  # may read anything
    assert rigid_id_adjoint.replace_rigid_id_adjoints(tape) == 0
    tape.launches.pop()
    assert rigid_id_adjoint.replace_rigid_id_adjoints(tape) == 1


def test_uncovered_joint_types_are_named():
    builder = newton.ModelBuilder()
    body = builder.add_link()
    builder.add_shape_sphere(body, radius=0.1)
    builder.add_joint_d6(
        -1,
        body,
        angular_axes=[
            newton.ModelBuilder.JointDofConfig(axis=axis) for axis in ((1, 0, 0), (0, 1, 0))
        ],
    )
    model = builder.finalize(device="cpu")
    assert not rigid_id_adjoint.covers_joint_types(model)


def _chain_of_every_covered_joint_type(root: str):
    """One articulation: a free (or fixed-to-world) root, then ball, prismatic, fixed,
    revolute and a planar D6 (two slides, one hinge), boxes with off-centre masses."""
    builder = newton.ModelBuilder()
    offset = wp.transform((0.0, 0.0, 0.3), wp.quat_rpy(0.2, -0.1, 0.3))
    links = [builder.add_link() for _ in range(6)]
    for link in links:
        builder.add_shape_box(link, xform=wp.transform((0.05, 0.02, 0.0), wp.quat_identity()),
                              hx=0.1, hy=0.05, hz=0.03)  # fmt: skip
    slide_hinge = [newton.ModelBuilder.JointDofConfig(axis=a) for a in ((1, 0, 0), (0, 0, 1))]
    joints = [
        builder.add_joint_free(links[0])
        if root == "free"
        else builder.add_joint_fixed(-1, links[0], parent_xform=offset),
        builder.add_joint_ball(links[0], links[1], parent_xform=offset),
        builder.add_joint_prismatic(links[1], links[2], parent_xform=offset, axis=(0, 1, 0)),
        builder.add_joint_fixed(links[2], links[3], parent_xform=offset),
        builder.add_joint_revolute(links[3], links[4], parent_xform=offset, axis=(0, 1, 1)),
        builder.add_joint_d6(
            links[4],
            links[5],
            parent_xform=offset,
            linear_axes=slide_hinge,
            angular_axes=[newton.ModelBuilder.JointDofConfig(axis=(0, 1, 0))],
        ),
    ]
    builder.add_articulation(joints)
    return builder.finalize(device="cpu", requires_grad=True)


@pytest.mark.parametrize("root", ["free", "fixed"])
def test_every_covered_joint_type_gets_warp_s_adjoint(root):
    """At the kernel, on a recorded substep of a chain of every covered type, moving: the
    light kernel's outputs and input adjoints are Newton's and Warp's."""
    model = _chain_of_every_covered_joint_type(root)
    assert sorted(set(model.joint_type.numpy().tolist())) == sorted(
        {1, 2, 3, 6} | ({4} if root == "free" else set()) | {0}
    )
    assert rigid_id_adjoint.covers_joint_types(model)
    simulation = NewtonSimulation(model, substeps=1, dt=0.01, keep_intermediates=True)
    generator = torch.Generator().manual_seed(3)
    q = torch.tensor(model.joint_q.numpy()) + 0.3 * torch.randn(
        simulation.coordinates, generator=generator
    )
    qd = torch.randn(simulation.dofs, generator=generator).requires_grad_()
    f = torch.randn(simulation.dofs, generator=generator)
    x, v = NewtonStep.apply(simulation, q.requires_grad_(), qd, f)
    (x.sum() + v.sum()).backward()
    (tape,) = simulation._kept_tapes.values()
    (kept,) = simulation.kept.values()
    kept.restore()
    ((_, launch),) = rigid_id_adjoint.recorded_rigid_id_launches(tape)
    rigid_id_adjoint.launch_on_recorded(launch[0], tape, launch, adjoint=False)
    want = [output.numpy().copy() for output in launch[4]]
    rigid_id_adjoint.launch_on_recorded(
        rigid_id_adjoint.light_rigid_id, tape, launch, adjoint=False
    )
    for name, output, expected in zip(_OUTPUT_NAMES, launch[4], want, strict=True):
        scale = max(np.abs(expected).max(), 1.0)
        np.testing.assert_allclose(
            output.numpy(), expected, rtol=0, atol=1e-5 * scale, err_msg=name
        )
    cotangents = _cotangents(launch)
    warp_s = _adjoints(launch[0], tape, launch, cotangents)
    light = _adjoints(rigid_id_adjoint.light_rigid_id, tape, launch, cotangents)
    for name in ("joint_q", "joint_qd", "body_q", "body_q_com"):
        want = warp_s[name]
        assert np.abs(want).max() > 0.1, name
        np.testing.assert_allclose(
            light[name], want, rtol=0, atol=2e-5 * np.abs(want).max(), err_msg=name
        )
