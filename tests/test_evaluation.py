"""evaluate_episodes: exact episode counts, metrics, mode restore, errors.

Its defaults are the reference's; pathgrad's own choices are PATHGRAD_EVALUATION (``OWN``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import LinearPolicy, ScalarEnv
from pathgrad.envs import PointMass
from pathgrad.evaluation import PATHGRAD_EVALUATION as OWN
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
    metrics = evaluate_episodes(LinearPolicy(), UnevenEnv([0.0, 0.0]), 3, "cpu", **OWN)
    assert metrics["eval/avg_length"] == pytest.approx((1 + 1 + 3) / 3)
    assert metrics["eval/avg_reward"] == pytest.approx((1 + 1 + 6) / 3)
    assert metrics["eval/success_rate"] == pytest.approx(2 / 3)
    assert set(metrics) == {"eval/avg_reward", "eval/avg_length", "eval/success_rate"}


def test_point_mass_metrics_seed_and_mode_restore():
    policy = GaussianMLPPolicy(6, 2)
    policy.train()
    env = PointMass(4, max_episode_steps=5, seed=0)
    first = evaluate_episodes(policy, env, 6, "cpu", seed=3, **OWN)
    second = evaluate_episodes(policy, env, 6, "cpu", seed=3, **OWN)
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
    metrics = evaluate_episodes(LinearPolicy(), env, 1, "cpu", **OWN)
    assert metrics["eval/success_rate"] != metrics["eval/success_rate"]  # NaN: no success metric
    assert metrics["eval/position"] == 0.0


class StaggeredEnv:
    """Envs finishing after 1, 2 and 3 steps (the reference's evaluation test env).

    Reward 1 per step; success in ``info["success"]``; per-env metrics of
    several shapes in ``info["metrics"]``.
    """

    num_envs = 3
    device = torch.device("cpu")

    def __init__(self) -> None:
        self.steps = torch.zeros(3, dtype=torch.long)
        self.horizons = torch.tensor([1, 2, 3])

    def reset(self, *, seed=None, options=None):
        self.steps.zero_()
        return self.steps[:, None].double(), {}

    def step(self, action):
        self.steps += 1
        done = self.steps >= self.horizons
        final = self.steps.double()
        info = {
            "success": done.clone(),
            "metrics": {
                "terminal_step": final,
                "final_position": torch.stack((final, final + 10.0), dim=-1),  # [N, 2]
                "column": final[:, None].numpy(),  # [N, 1] numpy: a scalar per env
                "batch_total": final.sum(),  # not per env: ignored
                "wrong_rows": torch.zeros(5),  # not per env: ignored
            },
        }
        self.steps[done] = 0
        return self.steps[:, None].double(), torch.ones(3), done, torch.zeros(3, dtype=bool), info


def test_non_scalar_metrics_are_reported_per_component_and_success_from_info():
    # Default per-env quotas for 4 episodes over 3 envs: env 0 gives two episodes of
    # length 1, env 1 one of length 2, env 2 one of length 3.
    metrics = evaluate_episodes(LinearPolicy(), StaggeredEnv(), 4, "cpu", **OWN)
    assert metrics == pytest.approx(
        {
            "eval/avg_reward": 1.75,
            "eval/avg_length": 1.75,
            "eval/success_rate": 1.0,
            "eval/terminal_step": 1.75,
            "eval/final_position/0": 1.75,
            "eval/final_position/1": 11.75,
            "eval/column": 1.75,
        }
    )


def test_the_defaults_are_the_reference_s_selection_prefix_and_dropped_vector_metrics():
    metrics = evaluate_episodes(LinearPolicy(), StaggeredEnv(), 4, "cpu")
    # The first four completions: env 0 at steps 1, 2, 3 and env 1 at step 2.
    assert metrics["eval/avg_reward"] == 1.25
    assert metrics["eval/avg_length"] == 1.25
    assert metrics["eval/success_rate"] == 1.0
    assert metrics["eval/metrics/terminal_step"] == 1.25
    assert not any(key.startswith("eval/metrics/final_position") for key in metrics)
    kept = evaluate_episodes(LinearPolicy(), StaggeredEnv(), 4, "cpu", vector_metrics="components")
    assert kept["eval/metrics/final_position/1"] == 11.25
    with pytest.raises(ValueError, match="episode_selection must be one of"):
        evaluate_episodes(LinearPolicy(), StaggeredEnv(), 1, "cpu", episode_selection="any")
    with pytest.raises(ValueError, match="vector_metrics must be one of"):
        evaluate_episodes(LinearPolicy(), StaggeredEnv(), 1, "cpu", vector_metrics="keep")


class SuccessEverywhereEnv(UnevenEnv):
    """Success 1 in ``info["success"]``, 0 in ``info["metrics"]["success"]``."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        info["success"] = np.ones(2, dtype=bool)
        info["metrics"]["success"] = torch.zeros(2, dtype=torch.float64)
        return obs, reward, terminated, truncated, info


def test_info_success_wins_over_metrics_success():
    metrics = evaluate_episodes(LinearPolicy(), SuccessEverywhereEnv([0.0, 0.0]), 3, "cpu", **OWN)
    assert metrics["eval/success_rate"] == 1.0
    assert "eval/success" not in metrics


def test_action_transform_is_applied_before_the_env_step_and_on_step_sees_info():
    # a = 0.3 * x with x = 10: the env moves by 3, or by 1 with the clamp to [-1, 1].
    env = ScalarEnv([10.0], episode_steps=1)
    plain = evaluate_episodes(LinearPolicy(), env, 1, "cpu", **OWN)
    infos = []
    clamped = evaluate_episodes(
        LinearPolicy(),
        env,
        2,
        "cpu",
        action_transform=lambda action: action.clamp(-1.0, 1.0),
        on_step=infos.append,
        **OWN,
    )
    assert plain["eval/position"] == pytest.approx(13.0)
    assert clamped["eval/position"] == pytest.approx(11.0)
    assert len(infos) == 2 and "metrics" in infos[0]
