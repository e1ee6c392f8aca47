"""The contact signal of Newton envs (AHAC): shapes, values, and no effect on the step."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("newton")

from helpers import assert_same_windows  # noqa: E402
from pathgrad.envs.newton import DiffRLAnt  # noqa: E402


def test_diffrl_ant_reports_per_body_contact_wrenches_and_accelerations():
    env = DiffRLAnt(2, stochastic_init=False, seed=0)
    assert env.provides_contact_signal
    env.reset(seed=0)
    total = 0.0
    for _ in range(60):  # fall and land on the feet
        *_, info = env.step(torch.zeros(2, env.action_dim))
        total = total + info["contact_forces"]
    forces, accelerations = info["contact_forces"], info["accelerations"]
    bodies = len(env.body_labels)
    assert forces.shape == accelerations.shape == (2, bodies, 6)
    assert not forces.requires_grad and not accelerations.requires_grad
    assert bool(torch.isfinite(forces).all() and torch.isfinite(accelerations).all())
    feet = [i for i, label in enumerate(env.body_labels) if label.endswith("_foot")]
    others = [i for i in range(bodies) if i not in feet]
    assert torch.equal(total[:, others], torch.zeros_like(total[:, others]))  # never touch
    assert bool((total[:, feet, 2] > 0.0).all())  # the ground pushes every foot up
    # on average over the second, the ground carries the weight (within the bounce)
    mass = float(env.simulation.model.body_mass.numpy().reshape(2, -1)[0].sum())
    assert total[:, :, 2].sum(1).mean() / 60 == pytest.approx(mass * 9.81, rel=0.5)


def _quat_rotate(quat_xyzw: torch.Tensor, vector: torch.Tensor) -> torch.Tensor:
    axis, w = quat_xyzw[..., :3], quat_xyzw[..., 3:]
    twice = 2.0 * torch.cross(axis, vector, dim=-1)
    return vector + w * twice + torch.cross(axis, twice, dim=-1)


def _motion_cross(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Spatial cross product of motion vectors (linear, angular) about one point."""
    (va, wa), (vb, wb) = (a[..., :3], a[..., 3:]), (b[..., :3], b[..., 3:])
    linear = torch.cross(wa, vb, dim=-1) + torch.cross(va, wb, dim=-1)
    return torch.cat([linear, torch.cross(wa, wb, dim=-1)], dim=-1)


def test_world_origin_frame_is_dflexs_wrench_about_the_origin_and_velocity_product_acceleration():
    """Against an independent torch computation from the bodies' poses and twists:
    the torque about the origin is ``tau_com + x_com x f`` (the body-frame twin's, on
    the same trajectory), and the acceleration is ``sum over the chain of v x v_joint``
    with spatial velocities about the origin, at the last substep's start state."""
    env = DiffRLAnt(2, seed=0)
    twin = DiffRLAnt(2, seed=0, contact_signal_frame="body")  # as env.cfg gives it
    assert env.contact_signal_frame == "world_origin"
    assert twin.simulation.contact_signal.frame == "body"
    env.reset(seed=0)
    twin.reset(seed=0)
    generator = torch.Generator().manual_seed(0)
    for _ in range(40):
        action = torch.rand(2, env.action_dim, generator=generator) * 2.0 - 1.0
        *_, info = env.step(action)
        *_, twin_info = twin.step(action)
    model = env.simulation.model
    state = env.simulation._states[-2]  # the last substep's start state
    pose = torch.as_tensor(state.body_q.numpy(), dtype=torch.float64)
    twist = torch.as_tensor(state.body_qd.numpy(), dtype=torch.float64)  # (v_com, omega)
    com_local = torch.as_tensor(model.body_com.numpy(), dtype=torch.float64)
    com = pose[:, :3] + _quat_rotate(pose[:, 3:], com_local)
    # the final pose's COM for the wrench (the substeps' COMs differ by up to ~1 cm)
    final = torch.as_tensor(env.simulation._states[-1].body_q.numpy(), dtype=torch.float64)
    final_com = (final[:, :3] + _quat_rotate(final[:, 3:], com_local)).reshape(2, -1, 3)

    forces, body_forces = info["contact_forces"].double(), twin_info["contact_forces"].double()
    assert torch.allclose(forces[..., :3], body_forces[..., :3], rtol=1e-5, atol=1e-3)
    moved = body_forces[..., 3:] + torch.cross(final_com, body_forces[..., :3], dim=-1)
    scale = float(forces.abs().max())
    assert scale > 100.0  # the feet carry the Ant's weight
    assert float((forces[..., 3:] - body_forces[..., 3:]).abs().max()) > 0.1 * scale
    assert torch.allclose(forces[..., 3:], moved, atol=1e-2 * scale)

    omega = twist[:, 3:]
    spatial = torch.cat([twist[:, :3] - torch.cross(omega, com, dim=-1), omega], dim=-1)
    expected = torch.zeros_like(spatial)
    parents = model.joint_parent.numpy()
    for joint, child in enumerate(model.joint_child.numpy()):  # parents come first
        parent = int(parents[joint])
        parent_velocity = spatial[parent] if parent >= 0 else torch.zeros(6, dtype=torch.float64)
        parent_bias = expected[parent] if parent >= 0 else torch.zeros(6, dtype=torch.float64)
        joint_velocity = spatial[child] - parent_velocity
        expected[child] = parent_bias + _motion_cross(spatial[child], joint_velocity)
    expected = expected.reshape(2, -1, 6)
    got = info["accelerations"].double()
    torso = env.body_labels.index(next(b for b in env.body_labels if b.endswith("torso")))
    assert torch.equal(got[:, torso], torch.zeros_like(got[:, torso]))  # floating root: 0
    assert float(expected.abs().max()) > 1.0
    assert torch.allclose(got, expected, rtol=1e-3, atol=1e-3 * float(expected.abs().max()))


def test_an_unknown_contact_signal_frame_is_named():
    from pathgrad.envs.newton.engine.contact_signal import ContactSignal

    env = DiffRLAnt(1, seed=0)
    sim = env.simulation
    with pytest.raises(ValueError, match="contact_signal_frame must be one of"):
        ContactSignal(sim.model, sim.solver, sim.substeps, 1.0 / 60.0, frame="com")
    with pytest.raises(ValueError, match=r"contact_signal_frame must be one of .*got 'com'"):
        DiffRLAnt(1, seed=0, contact_signal_frame="com")


def test_the_signal_leaves_observations_rewards_and_gradients_bit_equal():
    env = DiffRLAnt(2, seed=0)
    twin = DiffRLAnt(2, seed=0)
    twin.simulation.contact_signal = None  # before the first step captures the graph
    assert (
        not twin.provides_contact_signal
        and "contact_forces" not in twin.step(torch.zeros(2, twin.action_dim))[-1]
    )
    twin.reset(seed=0)
    assert_same_windows(env, twin, steps=4)


@pytest.mark.parametrize("name", ["DiffRLHopper", "DiffRLHalfCheetah"])
def test_planar_runners_take_the_contact_signal_frame(name):
    """The frame reaches the simulation the planar runner builds last (mass matrix held):
    the same forces, and torques that differ where the foot is off the origin."""
    import pathgrad.envs.newton as newton_envs

    cls = getattr(newton_envs, name)
    env, twin = cls(2, seed=0), cls(2, seed=0, contact_signal_frame="body")
    assert env.simulation.contact_signal.frame == "world_origin"
    assert twin.simulation.contact_signal.frame == "body"
    env.reset(seed=0)
    twin.reset(seed=0)
    for _ in range(30):
        *_, info = env.step(torch.zeros(2, env.action_dim))
        *_, twin_info = twin.step(torch.zeros(2, env.action_dim))
    forces, body_forces = info["contact_forces"], twin_info["contact_forces"]
    assert float(forces[..., :3].abs().max()) > 1.0  # in contact
    assert torch.allclose(forces[..., :3], body_forces[..., :3], rtol=1e-5, atol=1e-3)
    assert not torch.allclose(forces[..., 3:], body_forces[..., 3:], atol=1e-2)
    with pytest.raises(ValueError, match=r"contact_signal_frame must be one of .*got 'com'"):
        cls(1, seed=0, contact_signal_frame="com")


@pytest.mark.parametrize("name", ["DiffRLAnt", "DiffRLHopper", "DiffRLHumanoid"])
def test_the_mass_matrix_holding_simulation_keeps_every_option_of_the_env(name):
    """The simulation a DiffRL env builds last (its mass matrix held per step) gets the
    options of the one it replaces: here a contact frame and a contact capacity."""
    import pathgrad.envs.newton as newton_envs
    from pathgrad.envs.newton.engine.mass_matrix import MassMatrixCachingSimulation

    cls = type(name, (getattr(newton_envs, name),),
               {"contact_signal_frame": "body", "contacts_per_shape_pair": 3})  # fmt: skip
    simulation = cls(1, seed=0).simulation
    assert isinstance(simulation, MassMatrixCachingSimulation)
    assert simulation.contact_signal.frame == "body"
    assert simulation.contact_capacity == 3 * int(simulation.model.shape_contact_pair_count)
