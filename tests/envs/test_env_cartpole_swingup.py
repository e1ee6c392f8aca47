"""CartPoleSwingUp: seeding, documented dynamics, gradients, physics, soft wall, exact state."""

from __future__ import annotations

import math

import pytest
import torch

from pathgrad.env import build_learning_env
from pathgrad.envs.cartpole_swingup import CartPoleSwingUp
from pathgrad.testing import check_env_gradients

F64 = torch.float64


def _state(position, velocity, angle, angular_velocity) -> dict[str, torch.Tensor]:
    values = (position, velocity, angle, angular_velocity)
    keys = ("position", "velocity", "angle", "angular_velocity")
    return {key: torch.tensor(value, dtype=F64) for key, value in zip(keys, values, strict=True)}


def _energy(env: CartPoleSwingUp, state: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mechanical energy (J) of a cart with a uniform rod of half-length l pivoted on it."""
    total_mass, m, half = env.cart_mass + env.pole_mass, env.pole_mass, env.pole_half_length
    x_dot, theta, theta_dot = state["velocity"], state["angle"], state["angular_velocity"]
    kinetic = (
        0.5 * total_mass * x_dot**2
        + m * half * torch.cos(theta) * x_dot * theta_dot
        + (2.0 / 3.0) * m * half**2 * theta_dot**2
    )
    return kinetic + m * env.gravity * half * torch.cos(theta)


def test_pole_starts_hanging_down_near_the_centre():
    env = CartPoleSwingUp(256, dtype="float64", seed=0)
    env.reset(seed=0)
    angle = env.state["angle"]
    assert ((angle - math.pi).abs() <= 0.1).all()
    assert env.state["position"].abs().max() <= 0.1
    assert env.state["velocity"].abs().max() <= 0.05
    assert env.state["angular_velocity"].abs().max() <= 0.05
    # Genuinely random, not a constant start.
    assert angle.std() > 0.03 and env.state["position"].std() > 0.03
    obs, _ = env.reset(seed=1)
    assert (obs[:, 2] < -0.99).all()  # cos(theta) near -1: hanging
    assert torch.allclose(obs[:, 3], torch.sin(env.state["angle"]))


def test_constructor_validation_and_registry():
    for name in ("dt", "pole_mass", "pole_half_length", "force_mag", "track_limit"):
        with pytest.raises(ValueError, match=f"{name} must be positive"):
            CartPoleSwingUp(1, **{name: 0.0})
    for name in ("gravity", "wall_stiffness", "control_cost"):
        with pytest.raises(ValueError, match=f"{name} cannot be negative"):
            CartPoleSwingUp(1, **{name: -1.0})
    with pytest.raises(ValueError, match=r"action must have shape \(2, 1\)"):
        CartPoleSwingUp(2).step(torch.zeros(2, 2))
    env = build_learning_env("cartpoleswingup", num_envs=2, device="cpu", dt=0.01)
    assert isinstance(env, CartPoleSwingUp) and env.dt == 0.01
    assert env.max_episode_steps == 500


def test_one_step_matches_a_hand_computation():
    g, mc, mp, half, fm, dt, k, beta = 9.0, 1.5, 0.2, 0.4, 7.0, 0.05, 300.0, 20.0
    env = CartPoleSwingUp(
        3,
        dtype="float64",
        gravity=g,
        cart_mass=mc,
        pole_mass=mp,
        pole_half_length=half,
        force_mag=fm,
        dt=dt,
        wall_stiffness=k,
        wall_sharpness=beta,
        track_limit=2.0,
        centre_width=0.7,
        control_cost=0.03,
    )
    env.reset(seed=0)
    # Rows: mid-track, just inside the right wall, past the left wall.
    rows = [(0.3, -0.4, 2.5, 1.2, 0.6), (1.95, 0.8, -0.3, -2.0, -1.0), (-2.1, -0.2, 3.5, 0.1, 0.2)]
    env.state = _state(*zip(*[row[:4] for row in rows], strict=True))
    action = torch.tensor([[row[4]] for row in rows], dtype=F64)
    obs, reward, terminated, truncated, info = env.step(action)
    for i, (x, xd, th, thd, a) in enumerate(rows):

        def softplus(u):
            return math.log1p(math.exp(beta * u)) / beta

        force = fm * a - k * (softplus(x - 2.0) - softplus(-x - 2.0))
        total = mc + mp
        temp = (force + mp * half * thd**2 * math.sin(th)) / total
        thacc = (g * math.sin(th) - math.cos(th) * temp) / (
            half * (4.0 / 3.0 - mp * math.cos(th) ** 2 / total)
        )
        xacc = temp - mp * half * thacc * math.cos(th) / total
        xd2, thd2 = xd + dt * xacc, thd + dt * thacc
        x2, th2 = x + dt * xd2, th + dt * thd2
        expected_obs = torch.tensor([x2, xd2, math.cos(th2), math.sin(th2), thd2], dtype=F64)
        assert torch.allclose(obs[i], expected_obs, rtol=1e-12, atol=1e-12)
        upright = (1.0 + math.cos(th2)) / 2.0
        centred = (1.0 + math.exp(-(x2**2) / (2.0 * 0.7**2))) / 2.0
        expected_reward = upright * centred - 0.03 * a**2
        assert reward[i].item() == pytest.approx(expected_reward, rel=1e-12, abs=1e-12)
        assert info["metrics"]["upright"][i].item() == pytest.approx(math.cos(th2), abs=1e-12)
        assert info["metrics"]["cart_position"][i].item() == pytest.approx(x2, abs=1e-12)
    # The wall force really entered the rows near and past the walls.
    assert env.wall_force(torch.tensor([1.95, -2.1], dtype=F64)).abs().min() > 1.0
    assert not terminated.any() and not truncated.any()


def test_success_metric_and_reward_range():
    env = CartPoleSwingUp(4, dtype="float64", seed=0)
    env.reset(seed=0)
    # Upright and at rest is an equilibrium: the state barely moves in one step.
    env.state = _state([0.1, 0.6, 0.0, 0.0], [0.0] * 4, [0.0, 0.0, 0.5, math.pi], [0.0] * 4)
    _, reward, _, _, info = env.step(torch.zeros(4, 1, dtype=F64))
    assert torch.equal(info["metrics"]["success"], torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=F64))
    assert reward[0] > 0.99 and reward[1] < reward[0] and reward[3].abs() < 1e-12
    env.reset(seed=1)
    for _ in range(20):
        _, reward, _, _, _ = env.step(torch.ones(4, 1, dtype=F64))
        assert (reward >= -env.control_cost).all() and (reward <= 1.0).all()


@pytest.mark.parametrize("steps", [1, 5])
def test_gradients_match_finite_differences(steps):
    assert check_env_gradients(CartPoleSwingUp(3, dtype="float64", seed=0), steps)


def test_gradients_are_smooth_through_the_soft_track_limit():
    env = CartPoleSwingUp(3, dtype="float64", seed=0)
    # Carts entering, at and beyond the soft wall (both sides), moving into it.
    start = _state([2.35, 2.42, -2.5], [1.5, 0.5, -0.5], [0.3, 3.0, -1.0], [0.5, -0.2, 1.0])
    assert env.wall_force(start["position"]).abs().min() > 0.1
    assert check_env_gradients(env, 5, initial_state=start)


def test_energy_is_conserved_without_force_to_first_order_in_dt():
    """Unforced and frictionless, the documented equations conserve mechanical energy.

    Semi-implicit Euler is first order: the energy error over a fixed horizon
    shrinks linearly with dt. Starting 0.1 rad off upright, the pole falls past
    horizontal within 1 s, converting about 0.8 J of potential energy; the drift
    must stay below 1% of that at dt = 1 ms and shrink about fivefold from dt = 5 ms.
    A wrong inertia factor, sign or mass term breaks conservation by far more.
    """
    drifts = {}
    for dt in (0.005, 0.001):
        env = CartPoleSwingUp(2, dtype="float64", dt=dt, seed=0, max_episode_steps=10_000)
        env.reset(seed=0)
        env.state = _state([0.0, 0.3], [0.0, -0.2], [0.1, -0.2], [0.0, 0.3])
        initial = _energy(env, env.state)
        drift = torch.zeros(2, dtype=F64)
        for _ in range(round(1.0 / dt)):
            env.step(torch.zeros(2, 1, dtype=F64))
            drift = torch.maximum(drift, (_energy(env, env.state) - initial).abs())
        height_lost = torch.cos(torch.tensor([0.1, -0.2], dtype=F64)) - torch.cos(
            env.state["angle"]
        )
        potential_lost = env.pole_mass * env.gravity * env.pole_half_length * height_lost
        assert (potential_lost > 0.5).all()  # the pole really fell
        drifts[dt] = drift
    assert (drifts[0.001] < 0.008).all()
    assert (drifts[0.001] < drifts[0.005] / 3.0).all()


def test_pole_falls_to_the_side_it_leans_and_pushes_the_cart_back():
    env = CartPoleSwingUp(2, dtype="float64", seed=0)
    env.reset(seed=0)
    env.state = _state([0.0, 0.0], [0.0, 0.0], [0.05, -0.05], [0.0, 0.0])
    for _ in range(25):
        env.step(torch.zeros(2, 1, dtype=F64))
    angle, position = env.state["angle"], env.state["position"]
    assert angle[0] > 0.1 and angle[1] < -0.1
    # Momentum is conserved horizontally: the cart recoils opposite to the pole's lean.
    assert position[0] < 0.0 and position[1] > 0.0
    # And a positive action pushes the cart towards +x.
    pushed = CartPoleSwingUp(1, dtype="float64", seed=0)
    pushed.reset(seed=0)
    pushed.step(torch.ones(1, 1, dtype=F64))
    assert pushed.state["velocity"][0] > 0.0


@pytest.mark.parametrize("direction", [1.0, -1.0])
def test_soft_wall_keeps_a_pushed_cart_near_the_track_limit(direction):
    def max_excursion(stiffness: float) -> float:
        env = CartPoleSwingUp(1, dtype="float64", seed=0, wall_stiffness=stiffness)
        env.reset(seed=0)
        furthest = 0.0
        for _ in range(500):
            env.step(torch.full((1, 1), direction, dtype=F64))
            furthest = max(furthest, direction * env.state["position"].item())
            assert math.isfinite(furthest)
        return furthest

    # Full force for 10 s: the cart reaches the wall at ~6 m/s and stays within 0.3 m past it.
    assert 2.4 < max_excursion(1000.0) < 2.7
    # Without the wall the same push runs far off the track, so the bound above is the wall's.
    assert max_excursion(0.0) > 50.0


def test_wide_starts_and_energy_shaping_for_training():
    wide = CartPoleSwingUp(512, dtype="float64", seed=0, initial_angle_spread=math.pi)
    wide.reset(seed=0)
    assert float((wide.state["angle"] - math.pi).abs().max()) > 3.0  # every angle
    with pytest.raises(ValueError, match=r"initial_angle_spread must be in \[0, pi\]"):
        CartPoleSwingUp(1, initial_angle_spread=-0.1)
    with pytest.raises(ValueError, match="shaping_discount must be in"):
        CartPoleSwingUp(1, energy_shaping=1.0, shaping_discount=0.0)

    shaped = CartPoleSwingUp(3, dtype="float64", energy_shaping=5.0, shaping_discount=0.9)
    plain = CartPoleSwingUp(3, dtype="float64")
    state = _state([0.0, 0.1, -0.2], [0.0, 0.3, 0.1], [math.pi, 0.0, 2.0], [0.0, 0.0, 3.0])
    gap = shaped.energy_gap(state)
    assert gap[0].item() == pytest.approx(-1.0) and gap[1].item() == pytest.approx(0.0)
    # The gap is the pole's energy about the pivot (cart at rest) relative to upright.
    rest = {**state, "velocity": torch.zeros(3, dtype=F64)}
    top = _energy(plain, _state([0.0] * 3, [0.0] * 3, [0.0] * 3, [0.0] * 3))
    scale = 2 * plain.pole_mass * plain.gravity * plain.pole_half_length
    assert torch.allclose(gap, (_energy(plain, rest) - top) / scale)
    action = torch.tensor([[0.5], [-0.3], [1.0]], dtype=F64)
    following = plain._dynamics(state, action)
    potential = lambda s: -5.0 * shaped.energy_gap(s).square()  # noqa: E731
    expected = plain._reward(state, action, following) + 0.9 * potential(following)
    expected = expected - potential(state)
    assert torch.allclose(shaped._reward(state, action, following), expected, atol=1e-12)
    assert check_env_gradients(CartPoleSwingUp(3, dtype="float64", seed=0, energy_shaping=5.0), 5)
