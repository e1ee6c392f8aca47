"""Pendulum: bitwise parity with Gymnasium's Pendulum-v1, gradients, contract."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gymnasium_parity import assert_matches_gymnasium
from pathgrad.envs.pendulum import Pendulum, angle_normalize
from pathgrad.testing import check_env_gradients


@pytest.mark.parametrize(("seed", "scale"), [(0, 1.0), (1, 3.0), (2, 10.0)])
def test_matches_gymnasium_bit_for_bit_including_out_of_range_actions(seed, scale):
    env = Pendulum(8, dtype="float64", seed=seed)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    actions = (rng.standard_normal((200, 8, 1)) * scale).astype(np.float32)
    assert assert_matches_gymnasium(env, "Pendulum-v1", ["th", "thdot"], actions) == 200 * 8


def test_time_limit_truncates_at_200_and_resets():
    env = Pendulum(2, seed=0)
    env.reset(seed=0)
    for _ in range(199):
        _, _, terminated, truncated, _ = env.step(torch.zeros(2, 1))
        assert not truncated.any() and not terminated.any()
    _, _, terminated, truncated, _ = env.step(torch.zeros(2, 1))
    assert truncated.all() and not terminated.any()
    assert torch.equal(env.elapsed_steps, torch.zeros(2, dtype=torch.long))


def test_reset_distribution_and_spaces():
    env = Pendulum(4096, dtype="float64", seed=0)
    obs, _ = env.reset(seed=3)
    th, thdot = env.state["th"], env.state["thdot"]
    assert th.min() >= -math.pi and th.max() <= math.pi and thdot.abs().max() <= 1.0
    assert abs(th.mean().item()) < 0.1 and th.std().item() == pytest.approx(
        math.pi / 3**0.5, rel=0.05
    )
    assert torch.allclose(obs[:, 0], torch.cos(th)) and torch.equal(obs[:, 2], thdot)
    assert env.single_action_space.high.tolist() == [2.0]
    again, _ = Pendulum(4096, dtype="float64", seed=9).reset(seed=3)
    assert torch.equal(obs, again)


def test_float32_env_tracks_gymnasium_closely():
    env = Pendulum(1, seed=0)
    env.reset(seed=0)
    float64 = Pendulum(1, dtype="float64", seed=0)
    float64.load_state_dict(
        {**env.state_dict(), "state": {k: v.double() for k, v in env.state.items()}}
    )
    for step in range(20):
        action = torch.tensor([[math.sin(step)]])
        obs32, reward32, *_ = env.step(action)
        obs64, reward64, *_ = float64.step(action.double())
        assert torch.allclose(obs32.double(), obs64, atol=1e-5)
        assert reward32.item() == pytest.approx(reward64.item(), abs=1e-4)


def test_gradients_match_finite_differences_where_smooth():
    start = {
        "th": torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64),
        "thdot": torch.tensor([0.5, -0.2, 1.0], dtype=torch.float64),
    }
    for steps in (1, 5):
        env = Pendulum(3, dtype="float64", match_gymnasium_precision=False)
        assert check_env_gradients(env, steps, initial_state=start, action_scale=0.3)


def test_gradient_is_zero_beyond_the_torque_limit():
    env = Pendulum(2, dtype="float64", seed=0)
    env.reset(seed=0)
    action = torch.tensor([[5.0], [1.0]], dtype=torch.float64, requires_grad=True)
    _, reward, *_ = env.step(action)
    (gradient,) = torch.autograd.grad(reward.sum(), action)
    assert gradient[0].item() == 0.0 and gradient[1].item() != 0.0


def test_angle_normalize_wraps_like_gymnasium():
    angles = torch.tensor([0.0, math.pi, -math.pi, 3 * math.pi + 0.5, -7.0], dtype=torch.float64)
    expected = ((angles.numpy() + np.pi) % (2 * np.pi)) - np.pi
    assert angle_normalize(angles).tolist() == expected.tolist()


def test_constructor_validation():
    with pytest.raises(ValueError, match="max_torque must be positive"):
        Pendulum(1, max_torque=0.0)
    with pytest.raises(ValueError, match="dt must be positive"):
        Pendulum(1, dt=-0.1)
