"""HorizonCurriculum through the trainer (the adapters are tested in test_adapters.py)."""

from __future__ import annotations

import pytest
import torch

from pathgrad.algo import APG, APGCfg
from pathgrad.checkpoint import read_checkpoint
from pathgrad.differentiable_trainer import DifferentiableTrainer, DifferentiableTrainerCfg
from pathgrad.env import ScheduledDifferentiableVecEnv
from pathgrad.envs import HorizonCurriculum, PointMass
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
