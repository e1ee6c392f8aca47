"""evaluate_episodes: exact episode counts, metrics, mode restore, errors."""

from __future__ import annotations

import pytest
import torch

from helpers import LinearPolicy, ScalarEnv
from pathgrad.envs import PointMass
from pathgrad.evaluation import evaluate_episodes
from pathgrad.policies import GaussianMLPPolicy


class UnevenEnv(ScalarEnv):
    """Env 0 finishes every step, env 1 every third step; reward = env index + 1."""

    def step(self, action):
        obs, _, terminated, _, info = super().step(action)
        self.clock = getattr(self, "clock", 0) + 1
        truncated = torch.tensor([True, self.clock % 3 == 0])
        reward = torch.tensor([1.0, 2.0], dtype=torch.float64)
        info["metrics"] = {"success": torch.tensor([1.0, 0.0], dtype=torch.float64)}
        return obs, reward, terminated, truncated, info


def test_counts_exactly_the_requested_episodes_spread_over_envs():
    # 3 episodes over 2 envs: env 0 contributes 2 (length 1), env 1 one (length 3).
    metrics = evaluate_episodes(LinearPolicy(), UnevenEnv([0.0, 0.0]), 3, "cpu")
    assert metrics["eval/avg_length"] == pytest.approx((1 + 1 + 3) / 3)
    assert metrics["eval/avg_reward"] == pytest.approx((1 + 1 + 6) / 3)
    assert metrics["eval/success_rate"] == pytest.approx(2 / 3)
    assert set(metrics) == {"eval/avg_reward", "eval/avg_length", "eval/success_rate"}


def test_point_mass_metrics_seed_and_mode_restore():
    policy = GaussianMLPPolicy(6, 2)
    policy.train()
    env = PointMass(4, max_episode_steps=5, seed=0)
    first = evaluate_episodes(policy, env, 6, "cpu", seed=3)
    second = evaluate_episodes(policy, env, 6, "cpu", seed=3)
    assert first == second
    assert policy.training
    assert first["eval/avg_length"] == 5.0
    assert {"eval/final_distance", "eval/success_rate"} <= set(first)
    policy.eval()
    evaluate_episodes(policy, env, 1, "cpu", observation_transform=lambda obs: obs * 0)
    assert not policy.training


def test_errors():
    with pytest.raises(ValueError, match="num_episodes must be positive"):
        evaluate_episodes(LinearPolicy(), ScalarEnv([0.0]), 0, "cpu")
    with pytest.raises(RuntimeError, match="did not complete 2 episodes in 10 steps"):
        evaluate_episodes(
            LinearPolicy(), ScalarEnv([0.0], episode_steps=100), 2, "cpu", max_steps=10
        )
    env = ScalarEnv([0.0])
    metrics = evaluate_episodes(LinearPolicy(), env, 1, "cpu")
    assert metrics["eval/success_rate"] != metrics["eval/success_rate"]  # NaN: no success metric
    assert metrics["eval/position"] == 0.0
