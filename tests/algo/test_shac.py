"""SHAC: TD(lambda) targets, the bootstrapped actor objective, critic, checkpoints."""

from __future__ import annotations

import pytest
import torch

from helpers import LinearPolicy, ScalarEnv, build_point_mass_trainer
from pathgrad.algo import SHAC, SHACCfg, td_lambda_targets
from pathgrad.collector import DifferentiableCollector
from pathgrad.differentiable_trainer import DifferentiableTrainer, DifferentiableTrainerCfg


def test_td_lambda_targets_with_a_termination_and_a_truncation_inside_the_window():
    rewards = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    next_values = torch.tensor([[10.0, 20.0], [30.0, 40.0], [50.0, 60.0], [70.0, 80.0]])
    terminated = torch.tensor([[False, False], [True, False], [False, False], [False, False]])
    dones = torch.tensor([[False, False], [True, False], [False, True], [False, False]])
    targets = td_lambda_targets(rewards, next_values, terminated, dones, gamma=0.9, lam=0.5)
    # env 0 terminates at t=1 (no value after it); env 1 is truncated at t=2
    # (bootstrap from the pre-reset value 60); both windows end at t=3.
    env0 = [1 + 0.9 * (0.5 * 10 + 0.5 * 3), 3.0, 5 + 0.9 * (0.5 * 50 + 0.5 * 70), 7 + 0.9 * 70]
    env1_t2 = 6 + 0.9 * 60
    env1_t1 = 4 + 0.9 * (0.5 * 40 + 0.5 * env1_t2)
    env1 = [2 + 0.9 * (0.5 * 20 + 0.5 * env1_t1), env1_t1, env1_t2, 8 + 0.9 * 80]
    assert targets[:, 0].tolist() == pytest.approx(env0)
    assert targets[:, 1].tolist() == pytest.approx(env1)
    one_step = td_lambda_targets(rewards, next_values, terminated, dones, gamma=0.9, lam=0.0)
    assert one_step[0].tolist() == pytest.approx([1 + 0.9 * 10, 2 + 0.9 * 20])


class TerminatingScalarEnv(ScalarEnv):
    """A ScalarEnv whose episodes terminate (instead of being truncated)."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, truncated, torch.zeros_like(truncated), info


def identity_critic_shac(policy, gamma: float, **fields) -> SHAC:
    cfg = SHACCfg(
        gamma=gamma,
        critic_hidden_sizes=[],
        optimizer={"name": "sgd", "learning_rate": 0.1},
        **fields,
    )
    shac = SHAC(cfg, policy, observation_dim=1)
    with torch.no_grad():  # V(x) = x
        shac.target_critic[0].weight.fill_(1.0)
        shac.target_critic[0].bias.zero_()
    return shac


@pytest.mark.parametrize("terminating", [False, True])
def test_objective_bootstraps_the_pre_reset_observation_and_not_after_termination(terminating):
    # x' = (1 + w) x, r = -x'^2, episodes of 2 steps, a window of 3 steps.
    w, gamma, x0 = 0.5, 0.9, 1.0
    env = (TerminatingScalarEnv if terminating else ScalarEnv)([x0], episode_steps=2)
    policy = LinearPolicy(w)
    shac = identity_critic_shac(policy, gamma)
    rollout = DifferentiableCollector(env, policy, "cpu").collect(3)
    shac.begin_update()
    shac.accumulate_segment(rollout)
    x1, x2, x3 = x0 * 1.5, x0 * 1.5**2, x0 * 1.5  # x2 is the pre-reset state
    end_value = 0.0 if terminating else gamma * x2
    expected = ((-(x1**2)) + gamma * (-(x2**2) + end_value) + (-(x3**2) + gamma * x3)) / 3
    metrics = shac.finish_update()
    assert metrics["objective"] == pytest.approx(expected)
    assert {"value_loss", "explained_variance", "critic_learning_rate"} <= set(metrics)


def test_bootstrap_gradient_flows_through_the_state_not_the_critic_weights():
    policy = LinearPolicy(0.5)
    shac = identity_critic_shac(policy, 0.9)
    rollout = DifferentiableCollector(ScalarEnv([1.0]), policy, "cpu").collect(1)
    shac.begin_update()
    shac.accumulate_segment(rollout)
    # objective = r0 + gamma V(x1) with x1 = (1 + w) x0: d/dw = (-2 x1 + 0.9) x0.
    assert policy.w.grad.item() == pytest.approx(-(-2 * 1.5 + 0.9))
    assert all(p.grad is None for p in shac.target_critic.parameters())
    assert all(p.grad is None for p in shac.critic.parameters())
    shac.cancel_update()


def test_critic_warmup_leaves_out_the_bootstrap_for_its_updates_and_resumes():
    policy = LinearPolicy(0.5)
    shac = identity_critic_shac(policy, 0.9, critic_warmup_updates=2)
    gradients = []
    for _ in range(3):
        with torch.no_grad():  # the same actor and V(x) = x before every update
            policy.w.fill_(0.5)
            shac.target_critic[0].weight.fill_(1.0)
            shac.target_critic[0].bias.zero_()
        rollout = DifferentiableCollector(ScalarEnv([1.0]), policy, "cpu").collect(1)
        shac.begin_update()
        shac.accumulate_segment(rollout)
        gradients.append(policy.w.grad.item())
        shac.finish_update()
    # objective r0 = -x1^2 (+ gamma V(x1) after the warm-up), x1 = (1 + w) x0
    assert gradients == pytest.approx([2 * 1.5, 2 * 1.5, -(-2 * 1.5 + 0.9)])
    assert shac.critic_updates == 3
    state = shac.state_dict()
    restored = identity_critic_shac(LinearPolicy(0.5), 0.9, critic_warmup_updates=2)
    restored.load_state_dict(state)
    assert restored.critic_updates == 3
    del state["critic_updates"]  # a checkpoint from before the option: one per schedule step
    restored.load_state_dict(state)
    assert restored.critic_updates == state["critic_schedule"]["step_count"] == 3
    with pytest.raises(ValueError, match="algorithm.critic_updates must be a non-negative"):
        restored.validate_state_dict({**shac.state_dict(), "critic_updates": -1})


def test_resume_inside_the_critic_warmup_equals_uninterrupted_training(tmp_path):
    from helpers import learning_state

    def trainer(name: str, seed: int = 0):
        cfg = SHACCfg(
            optimizer={"name": "adam", "learning_rate": 1e-2},
            lr_scheduler={"name": "linear", "kwargs": {"total_iters": 40, "end_factor": 0.5}},
            critic_warmup_updates=4,
        )
        return build_point_mass_trainer(
            tmp_path / name, seed=seed, algorithm="shac", algorithm_cfg=cfg, eval_frequency_steps=0
        )

    straight = trainer("a")
    straight.train(total_updates=6)
    first = trainer("b")
    first.train(total_updates=2)  # the checkpoint falls inside the 4-update warm-up
    path = first.save_checkpoint()
    resumed = trainer("c", seed=5)
    resumed.load_checkpoint(path)
    assert resumed.algorithm.critic_updates == 2
    resumed.train(total_updates=6)
    expected = learning_state(straight)
    for name, value in learning_state(resumed).items():
        assert torch.equal(value, expected[name]), name
    assert resumed.algorithm.critic_updates == straight.algorithm.critic_updates == 6


def test_critic_learns_and_the_target_follows_it(tmp_path):
    trainer = build_point_mass_trainer(tmp_path, algorithm="shac", eval_frequency_steps=0)
    before = [p.clone() for p in trainer.algorithm.target_critic.parameters()]
    history = trainer.train(total_updates=30)["train_history"]
    losses = [entry["train/value_loss"] for entry in history]
    assert sum(losses[-5:]) < sum(losses[:5])
    assert history[-1]["train/explained_variance"] > 0.5
    after = list(trainer.algorithm.target_critic.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_shac_needs_segmented_rollouts_and_validates_its_config():
    policy = LinearPolicy()
    shac = SHAC(SHACCfg(), policy, observation_dim=1)
    cfg = DifferentiableTrainerCfg(rollout_mode="complete")
    with pytest.raises(ValueError, match=r"SHAC supports rollout_mode \['segmented'\]"):
        DifferentiableTrainer(cfg, ScalarEnv([1.0]), policy, shac)
    with pytest.raises(ValueError, match="use rollout_mode='segmented'"):
        shac.accumulate_complete_rollout(None)
    for kwargs, message in [
        ({"lam": 1.5}, "lam must be in"),
        ({"critic_epochs": 0}, "critic_epochs and critic_minibatches must be positive"),
        ({"target_critic_alpha": 1.0}, "target_critic_alpha must be in"),
        ({"reward_scale": 0.0}, "reward_scale must be positive"),
        ({"critic_warmup_updates": -1}, "critic_warmup_updates must be >= 0"),
        ({"critic_activation": "swish"}, "critic_activation must be one of"),
        ({"critic_optimizer": {"name": "nadam"}}, "optimizer.name must be one of"),
    ]:
        with pytest.raises(ValueError, match=message):
            SHACCfg(**kwargs)


def test_an_apg_checkpoint_does_not_load_into_shac(tmp_path):
    path = build_point_mass_trainer(tmp_path).save_checkpoint()
    shac_trainer = build_point_mass_trainer(tmp_path, algorithm="shac")
    with pytest.raises(ValueError, match="has no 'critic' \\(not a SHAC state\\)"):
        shac_trainer.load_checkpoint(path)


@pytest.mark.parametrize("warmup", [0, 1])  # with the bootstrap, and without it (warm-up)
def test_actor_gradient_matches_finite_differences_across_a_truncation(warmup):
    from helpers import float64_windows, window_gradient_error

    policy, normalizer, rollout = float64_windows()
    cfg = SHACCfg(
        gamma=0.9,
        critic_hidden_sizes=[8],
        critic_activation="tanh",
        reward_scale=0.5,
        critic_warmup_updates=warmup,
    )
    shac = SHAC(cfg, policy, observation_dim=6)
    shac.observation_transform = normalizer.normalize
    assert window_gradient_error(shac, lambda: rollout(5)) < 1e-6


def test_actor_gradient_with_layer_norm_in_actor_and_critic_matches_finite_differences():
    from helpers import float64_windows, window_gradient_error

    policy, normalizer, rollout = float64_windows(squash=True, layer_norm=True)
    assert any(isinstance(layer, torch.nn.LayerNorm) for layer in policy.mean_net)
    cfg = SHACCfg(gamma=0.9, critic_hidden_sizes=[8, 8], critic_layer_norm=True)
    shac = SHAC(cfg, policy, observation_dim=6)
    norms = [layer for layer in shac.critic if isinstance(layer, torch.nn.LayerNorm)]
    assert [norm.normalized_shape for norm in norms] == [(8,), (8,)]
    with torch.no_grad():  # LayerNorm's affine terms away from their 1/0 start
        for norm in norms:
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.uniform_(-0.5, 0.5)
        shac.target_critic.load_state_dict(shac.critic.state_dict())
    shac.observation_transform = normalizer.normalize
    assert window_gradient_error(shac, lambda: rollout(5)) < 1e-6


def test_float64_switch_reaches_the_critic(tmp_path):
    trainer = build_point_mass_trainer(tmp_path, algorithm="shac", dtype="float64")
    assert all(p.dtype == torch.float64 for p in trainer.algorithm.critic.parameters())
    metrics = trainer.train(total_updates=1)["last_train_metrics"]
    assert metrics["train/skipped_update"] == 0.0 and metrics["train/value_loss"] > 0
