"""check-env's window gradients: how d(window return)/d(first action) grows with the window."""

from __future__ import annotations

import pytest
import torch

from pathgrad.envs import BatchedDifferentiableEnv, PointMass
from pathgrad.testing.gradient_growth import describe_gradient_growth, window_gradient_norms


class Doubling(BatchedDifferentiableEnv):
    """``x' = 2 x + a``, reward ``x'``: a window of W steps has d(return)/d(a_0) = 2^W - 1."""

    observation_dim = 1
    action_dim = 1
    default_max_episode_steps = 1000

    def _sample_initial_state(self, num):
        return {"x": self._uniform(-1e-3, 1e-3, num)}

    def _dynamics(self, state, action):
        return {"x": 2.0 * state["x"] + action[:, 0]}

    def _reward(self, state, action, next_state):
        return next_state["x"]

    def _observe(self, state):
        return state["x"].unsqueeze(-1)


def test_the_norms_are_those_of_the_chain_and_a_large_growth_is_named():
    env = Doubling(3, seed=0, dtype="float64")
    norms = window_gradient_norms(env, seed=0, warmup=3)
    for window, values in norms.items():
        assert torch.equal(values, torch.full((3,), 2.0**window - 1.0, dtype=torch.float64))
    line = describe_gradient_growth(norms)
    assert line.startswith(
        "window gradients: norm of d(window return)/d(first action), median (max) of 3 envs: "
        "1 step 1 (1); 4 steps 15 (15); 16 steps 6.6e+04 (6.6e+04); 32 steps 4.3e+09 (4.3e+09)"
        ". The largest grows 2.9e+08x from 4 to 32 steps"
    )
    assert line.endswith(
        "bound them with trainer.action_adjoint_max_norm (each env's action adjoint clipped, "
        "about 10x its median) or a shorter trainer.segment_length"
    )


@pytest.mark.parametrize("env", [PointMass(2, seed=0), Doubling(2, seed=0)])
def test_a_modest_growth_is_only_reported_and_the_env_is_left_reset(env):
    norms = window_gradient_norms(env, seed=0, windows=(1, 4, 8))
    assert ". The largest grows" not in describe_gradient_growth(norms)  # 255 / 15 for Doubling
    start = {key: value.clone() for key, value in env.state.items()}
    env.reset(seed=0)
    assert all(torch.equal(value, env.state[key]) for key, value in start.items())


def test_an_overflowing_window_is_named_not_finite():
    norms = {1: torch.tensor([1.0, 1.0]), 4: torch.tensor([2.0, 3.0]),
             32: torch.tensor([5.0, float("inf")])}  # fmt: skip
    line = describe_gradient_growth(norms)
    assert "32 steps not finite in 1 of 2 envs" in line
    assert ". The largest grows past the float range from 4 to 32 steps" in line
