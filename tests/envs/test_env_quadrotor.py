"""Quadrotor: seeding, rigid-body physics, rotation integrity, gradients, auto-reset, resume."""

from __future__ import annotations

import math

import pytest
import torch

from pathgrad.env import build_learning_env
from pathgrad.envs.quadrotor import Quadrotor, _exp_so3
from pathgrad.testing import check_env_gradients

F64 = torch.float64


def _set_state(env: Quadrotor, **entries: torch.Tensor) -> None:
    """Level, still drone at the origin with target (1, 1, 1), overridden by ``entries``."""
    n = env.num_envs
    state = {
        "position": torch.zeros(n, 3, dtype=env.dtype),
        "velocity": torch.zeros(n, 3, dtype=env.dtype),
        "rotation": torch.eye(3, dtype=env.dtype).expand(n, 3, 3).clone(),
        "angular_velocity": torch.zeros(n, 3, dtype=env.dtype),
        "target": torch.ones(n, 3, dtype=env.dtype),
    }
    state.update({key: value.to(env.dtype) for key, value in entries.items()})
    env.state = state
    env.elapsed_steps = torch.zeros(n, dtype=torch.long)


def _run(env: Quadrotor, action: torch.Tensor, steps: int) -> None:
    for _ in range(steps):
        env.step(action)


def _angular_momentum(env: Quadrotor) -> torch.Tensor:
    inertia = torch.tensor(env.inertia, dtype=env.dtype)
    body = inertia * env.state["angular_velocity"]
    return (env.state["rotation"] @ body[:, :, None])[:, :, 0]


def test_constructor_and_step_validation_and_registry():
    for name, value in [("mass", 0.0), ("dt", -1.0), ("arm_length", 0.0), ("thrust_range", 0.0)]:
        with pytest.raises(ValueError, match=f"{name} must be positive"):
            Quadrotor(1, **{name: value})
    for name in ["k_drag", "linear_drag", "tilt_cost", "control_cost", "gravity"]:
        with pytest.raises(ValueError, match=f"{name} cannot be negative"):
            Quadrotor(1, **{name: -0.1})
    with pytest.raises(ValueError, match="inertia must be three positive"):
        Quadrotor(1, inertia=(0.01, 0.0, 0.02))
    with pytest.raises(ValueError, match="substeps must be a positive integer"):
        Quadrotor(1, substeps=0)
    with pytest.raises(ValueError, match=r"action must have shape \(2, 4\)"):
        Quadrotor(2).step(torch.zeros(2, 3))
    env = build_learning_env("quadrotor", num_envs=2, device="cpu", seed=0)
    assert isinstance(env, Quadrotor) and env.num_envs == 2


@pytest.mark.parametrize("mass", [1.0, 0.027])
def test_hover_thrust_holds_a_level_drone_still(mass):
    env = Quadrotor(2, dtype="float64", mass=mass, substeps=2)
    assert math.isclose(4 * env.hover_thrust, mass * 9.81)
    _set_state(env, position=torch.tensor([[0.3, -0.2, 0.5], [0.0, 0.0, 0.0]]))
    start = env.state["position"].clone()
    _run(env, torch.zeros(2, 4, dtype=F64), 50)
    assert torch.allclose(env.state["position"], start, atol=1e-12)
    assert env.state["velocity"].abs().max() < 1e-12
    assert torch.allclose(env.state["rotation"], torch.eye(3, dtype=F64).expand(2, 3, 3))


def test_yaw_command_turns_about_z_without_tilting_or_climbing():
    env = Quadrotor(1, dtype="float64")
    _set_state(env)
    u = 0.2
    action = u * torch.tensor([[-1.0, 1.0, -1.0, 1.0]], dtype=F64)  # thrust sum unchanged
    env.step(action)
    torque = env.k_drag * 4 * env.hover_thrust * env.thrust_range * u
    expected_rate = env.dt * torque / env.inertia[2]
    assert torch.allclose(
        env.state["angular_velocity"], torch.tensor([[0.0, 0.0, expected_rate]], dtype=F64)
    )
    _run(env, action, 19)
    rotation = env.state["rotation"][0]
    yaw = torch.atan2(rotation[1, 0], rotation[0, 0])
    assert yaw > 0.1
    assert torch.allclose(rotation[:, 2], torch.tensor([0.0, 0.0, 1.0], dtype=F64), atol=1e-12)
    assert env.state["position"].abs().max() < 1e-12


def test_roll_and_pitch_commands_follow_the_right_hand_rule():
    env = Quadrotor(2, dtype="float64")
    _set_state(env)
    u = 0.05
    # Row 0: left rotors (+y) up -> positive roll about +x, thrust tilts to -y.
    # Row 1: back rotors (-x) up -> positive pitch about +y, thrust tilts to +x.
    action = u * torch.tensor([[-1.0, -1.0, 1.0, 1.0], [-1.0, 1.0, 1.0, -1.0]], dtype=F64)
    env.step(action)
    rates = env.state["angular_velocity"]
    arm = env.arm_length / math.sqrt(2.0)
    expected = env.dt * arm * 4 * env.hover_thrust * env.thrust_range * u / env.inertia[0]
    assert torch.allclose(rates[0], torch.tensor([expected, 0.0, 0.0], dtype=F64))
    assert torch.allclose(rates[1], torch.tensor([0.0, expected, 0.0], dtype=F64))
    _run(env, torch.zeros(2, 4, dtype=F64), 10)  # coast on the acquired rate
    rotation, velocity = env.state["rotation"], env.state["velocity"]
    angle = 11 * env.dt * expected  # constant rate: an exact rotation about one axis
    c, s = math.cos(angle), math.sin(angle)
    roll = torch.tensor([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]], dtype=F64)
    pitch = torch.tensor([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]], dtype=F64)
    assert s > 0.02
    assert torch.allclose(rotation[0], roll) and torch.allclose(rotation[1], pitch)
    assert velocity[0, 1] < 0 and abs(velocity[0, 0]) < 1e-12
    assert velocity[1, 0] > 0 and abs(velocity[1, 1]) < 1e-12


@pytest.mark.parametrize("thrust_range", [1.0, 0.5])
def test_zero_thrust_falls_at_g(thrust_range):
    env = Quadrotor(1, dtype="float64", thrust_range=thrust_range)
    _set_state(env)
    action = torch.full((1, 4), -1.0 / thrust_range, dtype=F64)
    steps = 10
    _run(env, action, steps)
    dt, g = env.dt, 9.81
    assert torch.allclose(
        env.state["velocity"], torch.tensor([[0.0, 0.0, -g * dt * steps]], dtype=F64)
    )
    # Semi-implicit Euler: p_n = -g dt^2 n (n + 1) / 2.
    drop = -g * dt * dt * steps * (steps + 1) / 2
    assert torch.allclose(env.state["position"], torch.tensor([[0.0, 0.0, drop]], dtype=F64))


def test_attitude_stays_a_rotation_under_random_actions():
    env = Quadrotor(8, max_episode_steps=1000, seed=0)
    env.reset(seed=0)
    generator = torch.Generator().manual_seed(0)
    for _ in range(400):
        env.step(torch.rand(8, 4, generator=generator) * 2 - 1)
    rotation = env.state["rotation"].double()
    assert env.state["angular_velocity"].abs().max() > 1.0  # it did tumble
    eye = torch.eye(3, dtype=F64).expand(8, 3, 3)
    assert torch.allclose(rotation.transpose(1, 2) @ rotation, eye, atol=1e-5)
    assert torch.allclose(torch.linalg.det(rotation), torch.ones(8, dtype=F64), atol=1e-5)


def test_torque_free_rotation_conserves_world_angular_momentum():
    env = Quadrotor(2, dtype="float64", inertia=(0.01, 0.02, 0.03))
    env.reset(seed=0)
    env.state["angular_velocity"] = torch.tensor([[1.0, 2.0, 0.5], [3.0, -1.0, 2.0]], dtype=F64)
    before = _angular_momentum(env)
    _run(env, torch.zeros(2, 4, dtype=F64), 200)  # a = 0: equal thrusts, zero torque
    assert not torch.allclose(
        env.state["angular_velocity"][1], torch.tensor([3.0, -1.0, 2.0]).double()
    )
    assert torch.allclose(_angular_momentum(env), before, rtol=1e-9, atol=1e-12)


def test_angular_update_matches_eulers_equations_to_first_order():
    env = Quadrotor(1, dtype="float64", dt=1e-5, inertia=(0.01, 0.02, 0.03))
    omega = torch.tensor([[2.0, -1.0, 3.0]], dtype=F64)
    _set_state(env, angular_velocity=omega)
    action = torch.tensor([[0.3, -0.2, 0.1, 0.4]], dtype=F64)
    env.step(action)
    inertia = torch.tensor(env.inertia, dtype=F64)
    torque = (env.rotor_thrusts(action) @ env._mixer.T)[:, 1:]
    expected = (torque - torch.linalg.cross(omega, inertia * omega, dim=-1)) / inertia
    rate = (env.state["angular_velocity"] - omega) / env.dt
    assert torch.allclose(rate, expected, rtol=1e-3)


def test_exp_map_is_smooth_through_zero_and_the_series_switch():
    vectors = torch.tensor(
        [[0.0, 0.0, 0.0], [1e-4, -2e-4, 3e-5], [0.018, 0.018, -0.018], [0.4, -0.7, 1.1]],
        dtype=F64,
        requires_grad=True,
    )
    rotation = _exp_so3(vectors)
    assert torch.allclose(rotation[0], torch.eye(3, dtype=F64))
    axis = vectors[3].detach() / vectors[3].detach().norm()
    assert torch.allclose(rotation[3] @ axis, axis)  # the axis is fixed
    assert torch.autograd.gradcheck(_exp_so3, (vectors,))


@pytest.mark.parametrize("steps", [1, 5])
def test_check_env_gradients(steps):
    assert check_env_gradients(Quadrotor(3, dtype="float64"), steps)


def test_metrics_and_reward_of_the_stepped_state():
    env = Quadrotor(2, dtype="float64")
    _set_state(env, target=torch.tensor([[0.0, 0.0, 0.05], [1.0, 0.0, 0.0]]))
    action = torch.zeros(2, 4, dtype=F64)
    _, reward, terminated, truncated, info = env.step(action)
    metrics = info["metrics"]
    assert torch.allclose(metrics["final_position_error"], torch.tensor([0.05, 1.0], dtype=F64))
    assert torch.equal(metrics["success"], torch.tensor([1.0, 0.0], dtype=F64))
    # Hovering level and still: only the smoothed distance is paid.
    expected = -torch.sqrt(torch.tensor([0.05**2, 1.0], dtype=F64) + 1e-4)
    assert torch.allclose(reward, expected)
    assert not terminated.any() and not truncated.any()
