"""HorizonCurriculum through the trainer; the Gymnasium and Stable-Baselines3 adapters."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from pathgrad.algo import APG, APGCfg
from pathgrad.checkpoint import read_checkpoint
from pathgrad.differentiable_trainer import DifferentiableTrainer, DifferentiableTrainerCfg
from pathgrad.env import ScheduledDifferentiableVecEnv
from pathgrad.envs import HorizonCurriculum, PointMass, to_gymnasium, to_sb3
from pathgrad.policies import GaussianMLPPolicy


def test_linear_and_geometric_horizons():
    env = PointMass(2, seed=0)
    linear = HorizonCurriculum(env, 4, 12, num_rollouts=4)
    assert [linear.horizon(k) for k in range(6)] == [4, 6, 8, 10, 12, 12]
    geometric = HorizonCurriculum(env, 4, 64, num_rollouts=4, schedule="geometric")
    assert [geometric.horizon(k) for k in range(5)] == [4, 8, 16, 32, 64]
    spec = HorizonCurriculum(env, 4, 8, 2, normalize_objective=True).prepare_differentiable_rollout(
        1
    )
    assert spec.num_steps == 6 and spec.objective_scale == pytest.approx(1 / 6)
    assert dict(spec.metadata) == {"horizon": 6.0}
    assert isinstance(linear, ScheduledDifferentiableVecEnv)
    assert linear.max_episode_steps == env.max_episode_steps  # passed through


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start_horizon": 0}, "start_horizon and end_horizon must be positive"),
        ({"num_rollouts": 0}, "num_rollouts must be positive"),
        ({"schedule": "cubic"}, "schedule must be one of"),
    ],
)
def test_curriculum_validation(kwargs, message):
    arguments = {"start_horizon": 2, "end_horizon": 4, "num_rollouts": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        HorizonCurriculum(PointMass(1), **arguments)


def test_curriculum_drives_complete_rollouts_in_the_trainer(tmp_path):
    torch.manual_seed(0)
    env = HorizonCurriculum(PointMass(3, seed=0), 2, 8, num_rollouts=6, normalize_objective=True)
    policy = GaussianMLPPolicy(6, 2, hidden_sizes=(8,))
    cfg = DifferentiableTrainerCfg(
        rollout_mode="complete", gradient_accumulation_steps=2, checkpoint_dir=str(tmp_path)
    )
    trainer = DifferentiableTrainer(cfg, env, policy, APG(APGCfg(), policy))
    summary = trainer.train(total_updates=3)  # rollouts 0..5: horizons 2, 3, 4, 5, 6, 7
    means = [entry["train/rollout_horizon_mean"] for entry in summary["train_history"]]
    assert means == [2.5, 4.5, 6.5]
    assert summary["global_step"] == (2 + 3 + 4 + 5 + 6 + 7) * 3
    checkpoint = read_checkpoint(trainer.save_checkpoint())
    assert checkpoint["rollout_index"] == 6 and checkpoint["env"] is not None


def test_gymnasium_adapter_steps_exactly_the_same_dynamics():
    actions = np.random.default_rng(0).uniform(-1, 1, (12, 4, 2)).astype(np.float32)
    direct = PointMass(4, max_episode_steps=5, seed=0)
    expected_obs, _ = direct.reset(seed=3)
    vector = to_gymnasium(PointMass(4, max_episode_steps=5, seed=0))
    assert vector.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert vector.observation_space.shape == (4, 6) and vector.action_space.shape == (4, 2)
    obs, _ = vector.reset(seed=3)
    assert np.array_equal(obs, expected_obs.numpy())
    for step_actions in actions:
        expected = direct.step(torch.from_numpy(step_actions))
        obs, reward, terminated, truncated, infos = vector.step(step_actions)
        assert isinstance(obs, np.ndarray) and obs.dtype == np.float32
        assert np.array_equal(obs, expected[0].numpy())
        assert np.array_equal(reward, expected[1].numpy().astype(np.float64))
        assert np.array_equal(truncated, expected[3].numpy()) and not terminated.any()
        assert np.array_equal(infos["final_obs"], expected[4]["final_observation"].numpy())
        assert np.array_equal(infos["_final_obs"], expected[3].numpy())
        assert "final_distance" in infos
    vector.close()


def test_stable_baselines3_ppo_trains_through_the_adapter():
    from stable_baselines3 import PPO

    vec_env = to_sb3(PointMass(8, max_episode_steps=50, seed=0))
    model = PPO("MlpPolicy", vec_env, n_steps=64, batch_size=128, n_epochs=2, seed=0, device="cpu")
    model.learn(total_timesteps=2048)
    assert model.num_timesteps >= 2048
    obs = vec_env.reset()
    action, _ = model.predict(obs, deterministic=True)
    assert action.shape == (8, 2)
    obs, reward, dones, infos = vec_env.step(action)
    assert obs.shape == (8, 6) and reward.shape == (8,) and dones.dtype == bool
