"""Gradient-checkpointed complete rollouts give the plain rollout's gradients."""

from __future__ import annotations

import pytest
import torch

from helpers import LinearPolicy, ScalarEnv, build_point_mass_trainer, learning_state
from pathgrad.algo import APGCfg, complete_discounted_return
from pathgrad.collector import DifferentiableCollector
from pathgrad.envs import MountainCarContinuous, PointMass
from pathgrad.policies import GaussianMLPPolicy
from pathgrad.trainer.gradient_checkpointing import checkpointed_complete_returns


def plain_and_checkpointed(env_type, chunk_steps: int, steps: int = 13):
    results = []
    for checkpointed in (False, True):
        torch.manual_seed(0)
        env = env_type(3, dtype="float64", max_episode_steps=5, seed=0)
        policy = GaussianMLPPolicy(env.observation_dim, env.action_dim, hidden_sizes=(8,)).double()
        collector = DifferentiableCollector(env, policy, "cpu")
        collector.reset(seed=1)
        torch.manual_seed(5)
        if checkpointed:
            result = checkpointed_complete_returns(collector, steps, chunk_steps, 0.9)
            returns, entropy = result.returns, result.entropy_returns
        else:
            rollout = collector.collect(steps)
            returns = complete_discounted_return(rollout, 0.9)
            alive = rollout.alive_mask.double()
            discounts = 0.9 ** torch.arange(steps, dtype=torch.float64).unsqueeze(-1)
            entropy = (
                torch.stack([t.policy_output["entropy"] for t in rollout.transitions])
                * alive
                * discounts
            ).sum(0)
        (returns.sum() + 0.1 * entropy.sum()).backward()
        results.append(
            (
                returns.detach(),
                [p.grad.clone() for p in policy.parameters()],
                env.detach_state(),
                env.generator.get_state(),
            )
        )
    return results


@pytest.mark.parametrize("env_type", [PointMass, MountainCarContinuous])
@pytest.mark.parametrize("chunk_steps", [1, 4, 13, 20])
def test_checkpointed_gradients_equal_the_plain_rollout(env_type, chunk_steps):
    (plain_returns, plain_grads, plain_obs, plain_gen), (ck_returns, ck_grads, ck_obs, ck_gen) = (
        plain_and_checkpointed(env_type, chunk_steps)
    )
    assert torch.allclose(ck_returns, plain_returns, rtol=1e-12, atol=1e-12)
    for ours, theirs in zip(ck_grads, plain_grads, strict=True):
        assert torch.allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    # The env continues from the end of the rollout, as after a plain collection.
    assert torch.equal(ck_obs, plain_obs) and torch.equal(ck_gen, plain_gen)


def test_the_trainer_switch_gives_the_same_training(tmp_path):
    settings = {"rollout_mode": "complete", "update_horizon": 12, "eval_frequency_steps": 0}
    algorithm_cfg = APGCfg(optimizer={"learning_rate": 1e-2})
    plain = build_point_mass_trainer(
        tmp_path / "a", dtype="float64", algorithm_cfg=algorithm_cfg, **settings
    )
    plain.train(total_updates=3)
    checkpointed = build_point_mass_trainer(
        tmp_path / "b",
        dtype="float64",
        algorithm_cfg=APGCfg(optimizer={"learning_rate": 1e-2}),
        gradient_checkpointing=True,
        checkpoint_chunk_steps=5,
        **settings,
    )
    checkpointed.train(total_updates=3)
    for name, value in learning_state(plain).items():
        assert torch.allclose(value, learning_state(checkpointed)[name], rtol=1e-9, atol=1e-12), (
            name
        )
    assert list(plain.ret_window) == pytest.approx(list(checkpointed.ret_window))


def test_configuration_errors():
    from pathgrad.algo import APG
    from pathgrad.differentiable_trainer import DifferentiableTrainer, DifferentiableTrainerCfg

    with pytest.raises(
        ValueError, match="gradient_checkpointing applies to rollout_mode='complete'"
    ):
        DifferentiableTrainerCfg(gradient_checkpointing=True)
    with pytest.raises(ValueError, match="checkpoint_chunk_steps must be positive"):
        DifferentiableTrainerCfg(checkpoint_chunk_steps=0)
    policy = LinearPolicy()
    cfg = DifferentiableTrainerCfg(rollout_mode="complete", gradient_checkpointing=True)
    with pytest.raises(ValueError, match="needs an env built on BatchedDifferentiableEnv"):
        DifferentiableTrainer(cfg, ScalarEnv([1.0]), policy, APG(APGCfg(), policy))


def test_gradient_health_metrics_survive_checkpointing(tmp_path):
    settings = {
        "rollout_mode": "complete",
        "update_horizon": 12,
        "eval_frequency_steps": 0,
        "action_adjoint_max_norm": 0.05,
        "record_gradient_health": True,
    }
    metrics = []
    for name, extra in (("plain", {}), ("ck", {"gradient_checkpointing": True})):
        trainer = build_point_mass_trainer(
            tmp_path / name,
            dtype="float64",
            algorithm_cfg=APGCfg(optimizer={"learning_rate": 1e-2}),
            checkpoint_chunk_steps=5,
            **settings,
            **extra,
        )
        entry = trainer.train(total_updates=2)["last_train_metrics"]
        metrics.append({k: v for k, v in entry.items() if k.startswith("train/action_adjoint")})
    plain, checkpointed = metrics
    assert set(plain) == set(checkpointed) and len(plain) >= 3
    assert plain["train/action_adjoint_clipped_fraction"] > 0  # the clip was active
    for key, value in plain.items():
        assert checkpointed[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
