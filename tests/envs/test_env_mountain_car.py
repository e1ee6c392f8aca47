"""MountainCarContinuous: bitwise parity with Gymnasium, gradients, termination."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gymnasium_parity import assert_matches_gymnasium
from pathgrad.envs.mountain_car import MountainCarContinuous
from pathgrad.testing import check_env_gradients


@pytest.mark.parametrize(("seed", "scale", "bias"), [(0, 1.0, 0.0), (1, 3.0, 0.0), (2, 0.3, 0.8)])
def test_matches_gymnasium_bit_for_bit(seed, scale, bias):
    env = MountainCarContinuous(6, dtype="float64", seed=seed)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    actions = (rng.standard_normal((999, 6, 1)) * scale + bias).astype(np.float32)
    assert (
        assert_matches_gymnasium(env, "MountainCarContinuous-v0", ["position", "velocity"], actions)
        > 100
    )


def bang_bang(env: MountainCarContinuous, steps: int) -> list[bool]:
    """Push along the velocity: reaches the goal within about 120 steps."""
    terminated_any = []
    obs, _ = env.reset(seed=0)
    for _ in range(steps):
        action = torch.where(obs[:, 1:] >= 0, 1.0, -1.0).to(env.dtype)
        obs, reward, terminated, truncated, info = env.step(action)
        terminated_any.append(bool(terminated.any()))
        if terminated.any():
            assert reward[terminated].min().item() == pytest.approx(100.0 - 0.1)
            assert info["metrics"]["success"][terminated].min().item() == 1.0
            assert (info["final_observation"][terminated, 0] >= 0.45).all()
            assert (obs[terminated, 0] < -0.39).all() and (obs[terminated, 1] == 0).all()
            break
    return terminated_any


def test_energy_pumping_reaches_the_goal_and_terminates():
    assert any(bang_bang(MountainCarContinuous(4, seed=0), 300))


def test_left_wall_stops_the_car():
    env = MountainCarContinuous(1, dtype="float64")
    env.reset(seed=0)
    env.state = {
        "position": torch.tensor([-1.19], dtype=torch.float64),
        "velocity": torch.tensor([-0.05], dtype=torch.float64),
        "reached": torch.tensor([False]),
    }
    obs, *_ = env.step(torch.tensor([[-1.0]], dtype=torch.float64))
    assert (
        obs[0, 0].item() == float(np.float32(-1.2)) and obs[0, 1].item() == 0.0
    )  # stored as float32


def test_gradients_match_finite_differences_inside_the_track():
    start = {
        "position": torch.tensor([-0.5, -0.8, 0.1], dtype=torch.float64),
        "velocity": torch.tensor([0.0, 0.01, -0.02], dtype=torch.float64),
    }
    for steps in (1, 5):
        env = MountainCarContinuous(3, dtype="float64", match_gymnasium_precision=False)
        assert check_env_gradients(
            env,
            steps,
            initial_state={**start, "reached": torch.zeros(3, dtype=torch.bool)},
            action_scale=0.3,
        )


def test_reset_distribution():
    env = MountainCarContinuous(2048, seed=0)
    obs, _ = env.reset(seed=1)
    assert obs[:, 0].min() >= -0.6 and obs[:, 0].max() <= -0.4 and (obs[:, 1] == 0).all()
    assert env.single_observation_space.low.tolist() == pytest.approx([-1.2, -0.07])
