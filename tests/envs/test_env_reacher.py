"""Reacher: seeding, kinematics, rigid-body dynamics, gradients, auto-reset, exact state."""

from __future__ import annotations

import math

import pytest
import torch

from pathgrad.env import build_learning_env
from pathgrad.envs.reacher import Reacher
from pathgrad.testing import check_env_gradients

F64 = torch.float64


def _kinetic_energy(env: Reacher, state) -> torch.Tensor:
    qd = state["qd"]
    return 0.5 * torch.einsum("ni,nij,nj->n", qd, env.mass_matrix(state["q"]), qd)


def test_initial_states_and_targets_lie_in_the_documented_ranges():
    env = Reacher(4000, dtype="float64", seed=0)
    radius = env.state["target"].norm(dim=-1)
    assert radius.min() >= 0.05 - 1e-12 and radius.max() <= 0.2 + 1e-12
    # Inside the arm's reachable annulus [|l1 - l2|, l1 + l2] = [0.01, 0.21] m.
    assert radius.min() > 0.01 and radius.max() < 0.21
    # Uniform by area: the median radius is sqrt((0.05^2 + 0.2^2) / 2) = 0.1458 m.
    assert abs(radius.median().item() - 0.1458) < 0.01
    angle = torch.atan2(env.state["target"][:, 1], env.state["target"][:, 0])
    assert (angle > 2.5).any() and (angle < -2.5).any() and (angle.abs() < 0.5).any()
    q, qd = env.state["q"], env.state["qd"]
    assert q.abs().max() <= math.pi and q.abs().max() > 3.0
    assert qd.abs().max() <= 0.1 and qd.abs().max() > 0.09


def test_constructor_validation_names_the_argument():
    with pytest.raises(ValueError, match="num_envs must be positive"):
        Reacher(0)
    with pytest.raises(ValueError, match="dt must be positive"):
        Reacher(1, dt=0.0)
    with pytest.raises(ValueError, match="link_mass_2 must be positive"):
        Reacher(1, link_mass_2=-1.0)
    with pytest.raises(ValueError, match="max_torque must be positive"):
        Reacher(1, max_torque=0.0)
    with pytest.raises(ValueError, match="damping cannot be negative"):
        Reacher(1, damping=-0.1)
    with pytest.raises(ValueError, match="frame_skip must be a positive integer"):
        Reacher(1, frame_skip=0)
    with pytest.raises(ValueError, match="target_min_radius"):
        Reacher(1, target_min_radius=0.3)
    with pytest.raises(ValueError, match="target_max_radius cannot exceed"):
        Reacher(1, target_max_radius=0.25)
    with pytest.raises(ValueError, match=r"action must have shape \(2, 2\)"):
        Reacher(2).step(torch.zeros(2, 3))


def test_registered_under_its_name():
    env = build_learning_env("reacher", num_envs=2, device="cpu", seed=0)
    assert isinstance(env, Reacher) and env.num_envs == 2


def test_forward_kinematics_and_observation_layout():
    env = Reacher(5, dtype="float64", seed=0)
    half_pi, r = math.pi / 2, math.sqrt(0.5)
    q = torch.tensor(
        [
            [0.0, 0.0],
            [half_pi, 0.0],
            [0.0, half_pi],
            [half_pi, half_pi],
            [math.pi / 4, -math.pi / 4],
        ],
        dtype=F64,
    )
    expected = torch.tensor(
        [[0.21, 0.0], [0.0, 0.21], [0.1, 0.11], [-0.11, 0.1], [0.1 * r + 0.11, 0.1 * r]], dtype=F64
    )
    assert torch.allclose(env.fingertip(q), expected, atol=1e-12)
    target = torch.tensor([[0.05, -0.1]], dtype=F64).expand(5, 2)
    qd = torch.tensor([[0.3, -0.7]], dtype=F64).expand(5, 2)
    obs = env._observe({"q": q, "qd": qd, "target": target})
    assert torch.allclose(obs[:, 0:2], torch.cos(q)) and torch.allclose(obs[:, 2:4], torch.sin(q))
    assert torch.equal(obs[:, 4:6], target) and torch.equal(obs[:, 6:8], qd)
    assert torch.allclose(obs[:, 8:10], expected - target, atol=1e-12)


def test_mass_matrix_is_spd_and_matches_the_textbook_two_link_expression():
    env = Reacher(1, dtype="float64", seed=0)
    q = (
        4
        * math.pi
        * (torch.rand(500, 2, dtype=F64, generator=torch.Generator().manual_seed(0)) - 0.5)
    )
    mass = env.mass_matrix(q)
    assert mass.shape == (500, 2, 2)
    assert torch.equal(mass, mass.transpose(-1, -2))
    assert torch.linalg.eigvalsh(mass).min() > 1e-5
    # Uniform rods, m = 0.05 kg, l1 = 0.1 m, l2 = 0.11 m, at q2 = pi / 3 (cos = 1/2):
    # M11 = m lc1^2 + I1 + m (l1^2 + lc2^2 + 2 l1 lc2 cos q2) + I2
    #     = 1.25e-4 + 4.1667e-5 + 0.05 (0.01 + 0.003025 + 0.0055) + 5.0417e-5 = 1.14333e-3
    # M12 = m (lc2^2 + l1 lc2 cos q2) + I2 = 0.05 (0.003025 + 0.00275) + 5.0417e-5 = 3.39167e-4
    # M22 = m lc2^2 + I2 = 1.5125e-4 + 5.0417e-5 = 2.01667e-4
    hand = torch.tensor([[1.143333e-3, 3.391667e-4], [3.391667e-4, 2.016667e-4]], dtype=F64)
    at = env.mass_matrix(torch.tensor([0.7, math.pi / 3], dtype=F64))
    assert torch.allclose(at, hand, rtol=1e-5, atol=0)
    # The mass matrix depends on the elbow angle only.
    shifted = env.mass_matrix(q + torch.tensor([1.3, 0.0], dtype=F64))
    assert torch.allclose(shifted, mass)


def test_step_matches_the_euler_lagrange_equations():
    """Coriolis terms from autograd of T = qd^T M(q) qd / 2, solved with linalg.solve."""
    env = Reacher(4, dtype="float64", seed=0, frame_skip=3, damping=0.004)
    generator = torch.Generator().manual_seed(1)
    q = 2 * torch.rand(4, 2, dtype=F64, generator=generator)
    qd = 3 * torch.randn(4, 2, dtype=F64, generator=generator)
    action = torch.rand(4, 2, dtype=F64, generator=generator) * 2 - 1
    target = env.state["target"].clone()

    def lagrangian_acceleration(qi, qdi, ai):
        # d/dt (M qd) - dT/dq = tau - damping qd, with d/dt (M qd) = M qdd + (dM/dq . qd) qd.
        dmass_qd = torch.autograd.functional.jacobian(lambda x: env.mass_matrix(x) @ qdi, qi)
        dkinetic = torch.autograd.functional.jacobian(
            lambda x: 0.5 * qdi @ env.mass_matrix(x) @ qdi, qi
        )
        coriolis = dmass_qd @ qdi - dkinetic
        force = env.max_torque * ai - env.damping * qdi - coriolis
        return torch.linalg.solve(env.mass_matrix(qi), force)

    def reference_acceleration(q, qd):
        rows = zip(q, qd, action, strict=True)
        return torch.stack([lagrangian_acceleration(*row) for row in rows])

    q_ref, qd_ref = q.clone(), qd.clone()
    for _ in range(3):
        qd_ref = qd_ref + 0.01 * reference_acceleration(q_ref, qd_ref)
        q_ref = q_ref + 0.01 * qd_ref
    env.state = {"q": q, "qd": qd, "target": target}
    obs, reward, terminated, truncated, info = env.step(action)
    assert torch.allclose(env.state["q"], q_ref, rtol=1e-10, atol=1e-12)
    assert torch.allclose(env.state["qd"], qd_ref, rtol=1e-10, atol=1e-12)
    distance = (env.fingertip(q_ref) - target).norm(dim=-1)
    expected = -torch.sqrt(distance**2 + 1e-3**2) - 0.01 * (action**2).sum(-1)
    assert torch.allclose(reward, expected)
    assert torch.allclose(info["metrics"]["final_distance"], distance)
    assert torch.equal(info["metrics"]["success"], (distance < 0.02).to(F64))
    assert not terminated.any() and not truncated.any()


def test_success_metric_when_the_fingertip_is_on_the_target():
    env = Reacher(2, dtype="float32", seed=0)
    q = torch.tensor([[0.4, 1.0], [0.4, 1.0]])
    target = env.fingertip(q) + torch.tensor([[0.005, 0.0], [0.05, 0.0]])
    env.state = {"q": q, "qd": torch.zeros(2, 2), "target": target}
    *_, info = env.step(torch.zeros(2, 2))
    assert torch.equal(info["metrics"]["success"], torch.tensor([1.0, 0.0]))
    assert info["metrics"]["success"].dtype == torch.float32


def test_kinetic_energy_is_conserved_without_damping_and_decays_with_it():
    """Semi-implicit Euler is first order: over T = 0.5 s with |qd| <= 1 rad/s the
    relative energy error is O(dt |qd|^2 T) ~ 0.5% at dt = 0.01 s; allow 2%, and
    check that the error is the integrator's by halving dt (it roughly halves)."""

    def drift(dt, frame_skip, damping):
        env = Reacher(64, dtype="float64", seed=3, damping=damping, initial_velocity=1.0)
        env.dt, env.frame_skip = dt, frame_skip
        start = _kinetic_energy(env, env.state)
        for _ in range(25):
            env.step(torch.zeros(64, 2, dtype=F64))
        return (_kinetic_energy(env, env.state) - start) / start

    coarse = drift(0.01, 2, 0.0)
    fine = drift(0.005, 4, 0.0)
    assert coarse.abs().max() < 0.02
    assert fine.abs().max() < 0.6 * coarse.abs().max()
    damped = drift(0.01, 2, 0.002)
    assert (damped < -0.05).all()


@pytest.mark.parametrize(("steps", "max_episode_steps"), [(1, None), (5, None), (5, 3)])
def test_gradients_match_finite_differences(steps, max_episode_steps):
    env = Reacher(3, dtype="float64", max_episode_steps=max_episode_steps, seed=0)
    assert check_env_gradients(env, steps)
