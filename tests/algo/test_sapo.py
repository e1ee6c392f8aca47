"""SAPO as its authors run it: the soft objective's gradient, min/mean critics, the
offset entropy bonus, the temperature, checkpoints and the earlier variant's configs."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from helpers import (
    build_point_mass_trainer,
    learning_state,
    relative_error,
    window_gradient_error,
)
from pathgrad.algo import SAPO, SAPOCfg, build_algo, td_lambda_targets
from pathgrad.algo.sapo import entropy_bonus
from pathgrad.runs.config import load_config
from pathgrad.runs.config_sources import ConfigError
from pathgrad.squashed_normal import SquashedNormalPolicy

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def small_sapo(**fields) -> tuple[SAPO, Any]:
    """SAPO on float64 PointMass windows (the authors' policy, 2 critics) and ``rollout(steps)``."""
    from pathgrad.collector import DifferentiableCollector
    from pathgrad.envs import PointMass
    from pathgrad.normalization import RunningObservationNormalizer

    torch.manual_seed(0)
    env = PointMass(3, dtype="float64", max_episode_steps=3, seed=0)
    policy = SquashedNormalPolicy(6, 2, hidden_sizes=(8,), init_log_std=-0.5).double()
    normalizer = RunningObservationNormalizer(6)
    normalizer.update(torch.randn(64, 6, dtype=torch.float64))
    collector = DifferentiableCollector(env, policy, "cpu", observation_normalizer=normalizer)

    def rollout(steps: int):
        torch.manual_seed(11)
        collector.reset(seed=3)
        return collector.collect(steps)

    cfg = SAPOCfg(**{"gamma": 0.9, "critic_hidden_sizes": [8], "reward_scale": 0.5, **fields})
    sapo = SAPO(cfg, policy, observation_dim=6, action_dim=2)
    sapo.observation_transform = normalizer.normalize
    return sapo, rollout


def gradient(algorithm, rollout) -> list[torch.Tensor]:
    algorithm.begin_update()
    algorithm.accumulate_segment(rollout)
    values = [p.grad.clone() for p in algorithm.policy.parameters()]
    algorithm.cancel_update()
    return values


def test_actor_gradient_matches_finite_differences_through_simulation_and_entropy():
    sapo, rollout = small_sapo()
    window = lambda: rollout(5)  # noqa: E731 - crosses an episode end (truncation after 3)
    assert window_gradient_error(sapo, window) < 1e-6
    with_entropy = gradient(sapo, window())  # the reparameterized entropy is in it
    sapo.log_temperature.data.fill_(math.log(1e-12))
    assert relative_error(gradient(sapo, window()), with_entropy) > 1e-3
    # The bootstrap is differentiable in the state, not in the critics' weights.
    sapo.begin_update()
    sapo.accumulate_segment(window())
    assert all(p.grad is None for p in sapo.critic.parameters())
    assert all(p.requires_grad for p in sapo.critic.parameters())
    sapo.cancel_update()


class FixedCritics(torch.nn.Module):
    """Two critics with hand-made values: ``sum(obs)`` and ``3 - sum(obs)``."""

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        total = observations.sum(-1, keepdim=True)
        return torch.stack([total, 3.0 - total])


def test_targets_use_the_min_of_the_critics_and_the_bootstrap_their_mean():
    sapo, _ = small_sapo()
    assert sapo.target_critic is None
    assert "target_critic" not in sapo.state_dict()
    sapo.critic = FixedCritics()
    sapo.observation_transform = None
    observations = torch.tensor([[1.0, 0.0], [2.0, 1.0]], dtype=torch.float64)  # sums 1, 3
    assert torch.equal(sapo._target_values(observations), torch.tensor([1.0, 0.0]).double())
    assert torch.equal(sapo._bootstrap_values(observations), torch.tensor([1.5, 1.5]).double())
    # The TD(lambda) targets of a kept window: min values, soft rewards with alpha now.
    final = torch.tensor([[[0.5, 0.0]], [[2.5, 0.0]]], dtype=torch.float64)  # [T=2, N=1, 2]
    window = {
        "observations": torch.zeros(2, 1, 2, dtype=torch.float64),
        "rewards": torch.tensor([[1.0], [2.0]], dtype=torch.float64),
        "entropy_bonus": torch.tensor([[0.5], [-1.0]], dtype=torch.float64),
        "terminated": torch.zeros(2, 1, dtype=torch.bool),
        "dones": torch.zeros(2, 1, dtype=torch.bool),
        "final_observations": final,
    }
    sapo._windows = [window]
    sapo.log_temperature.data.fill_(math.log(0.4))
    _, targets = sapo._targets()
    soft = torch.tensor([[1.0 + 0.4 * 0.5], [2.0 - 0.4]], dtype=torch.float64)
    minimum = torch.tensor([[0.5], [0.5]], dtype=torch.float64)  # min(0.5, 2.5), min(2.5, 0.5)
    expected = td_lambda_targets(soft, minimum, window["terminated"], window["dones"], 0.9, 0.95)
    assert torch.allclose(targets, expected.reshape(-1), rtol=0, atol=1e-12)


def test_the_actor_bootstraps_with_the_mean_of_the_critics():
    sapo, rollout = small_sapo(gamma=0.5, reward_scale=1.0)
    window = rollout(2)
    sapo.critic = FixedCritics()
    sapo.log_temperature.data.fill_(math.log(1e-30))  # the bonus vanishes
    sapo.begin_update()
    sapo.accumulate_segment(window)
    objective = float(sapo._objective_total)
    sapo.cancel_update()
    rewards = window.rewards.detach()  # no episode ends: one bootstrap, (s + 3 - s) / 2
    expected = (rewards[0] + 0.5 * rewards[1] + 0.5**2 * 1.5).mean() / 2
    assert objective == pytest.approx(float(expected), rel=1e-12)


def test_the_entropy_bonus_is_zero_at_its_target_and_scaled_by_it():
    assert float(entropy_bonus(torch.tensor(-4.0), -4.0)) == 0.0
    assert float(entropy_bonus(torch.tensor(0.0), -4.0)) == pytest.approx(0.5)  # (H + 4) / 8
    assert float(entropy_bonus(torch.tensor(-6.0), -4.0)) == pytest.approx(-0.25)
    sapo, window = small_sapo()
    assert sapo.target_entropy == -1.0  # -A/2
    assert sapo.temperature == 1.0  # alpha starts at 1
    rollout = window(4)
    actor, critic = sapo._window_rewards(rollout)
    entropies = torch.stack([t.policy_output["entropy"] for t in rollout.transitions])
    expected = 0.5 * rollout.rewards + (entropies + 1.0) / 2.0
    assert torch.allclose(actor, expected, rtol=0, atol=1e-12)
    assert actor.requires_grad and torch.equal(critic, 0.5 * rollout.rewards.detach())


@pytest.mark.parametrize(("target", "direction"), [(-50.0, "falls"), (50.0, "rises")])
def test_the_temperature_steers_the_entropy_towards_its_target(target, direction):
    sapo, window = small_sapo(target_entropy=target)
    sapo.begin_update()
    sapo.accumulate_segment(window(4))
    metrics = sapo.finish_update()
    assert metrics["temperature"] == sapo.temperature
    # AdamW's first step moves log alpha by about its learning rate, the sign of the gap
    change = math.log(sapo.temperature)
    assert change == pytest.approx(-5e-3 if direction == "falls" else 5e-3, rel=1e-3)
    assert math.isfinite(metrics["action_entropy"])


def test_a_fixed_temperature_stays():
    sapo, window = small_sapo(learn_temperature=False, init_temperature=0.3)
    sapo.begin_update()
    sapo.accumulate_segment(window(4))
    sapo.finish_update()
    assert sapo.temperature == pytest.approx(0.3, rel=1e-12)


def test_both_critics_train_on_the_same_targets_in_fixed_slices():
    sapo, window = small_sapo()
    before = [p.clone() for p in sapo.critic.parameters()]
    assert torch.equal(sapo._minibatch_order(5, torch.device("cpu")), torch.arange(5))
    sapo.begin_update()
    sapo.accumulate_segment(window(4))
    metrics = sapo.finish_update()
    assert metrics["value_loss"] > 0
    per_member = len(list(sapo.critic.members[0].parameters()))
    for member in range(2):
        params = list(sapo.critic.members[member].parameters())
        start = before[member * per_member : (member + 1) * per_member]
        assert any(not torch.equal(a, b) for a, b in zip(params, start, strict=True))


def test_resume_continues_exactly_as_an_uninterrupted_run(tmp_path):
    def trainer(folder, seed=0):
        return build_point_mass_trainer(
            tmp_path / folder,
            seed=seed,
            algorithm="sapo",
            policy_name="squashed_normal",
            eval_frequency_steps=0,
        )

    straight = trainer("a")
    straight.train(total_updates=6)
    first = trainer("b")
    first.train(total_updates=3)
    path = first.save_checkpoint()
    resumed = trainer("c", seed=5)
    resumed.load_checkpoint(path)
    resumed.train(total_updates=6)
    expected = learning_state(straight)
    assert "log_temperature" in expected and "temperature_optimizer.0.exp_avg" in expected
    for name, value in learning_state(resumed).items():
        assert torch.equal(value, expected[name]), name
    assert straight.algorithm.temperature != pytest.approx(1.0)  # it did learn


def test_checkpoint_validation_names_the_bad_field(tmp_path):
    trainer = build_point_mass_trainer(tmp_path, algorithm="sapo")
    sapo = trainer.algorithm
    state = sapo.state_dict()
    sapo.validate_state_dict(state)
    with pytest.raises(ValueError, match="algorithm.log_temperature must be a scalar tensor"):
        sapo.validate_state_dict({**state, "log_temperature": torch.zeros(2)})
    without = {k: v for k, v in state.items() if k != "temperature_optimizer"}
    with pytest.raises(ValueError, match="no 'temperature_optimizer' \\(not a SAPO state\\)"):
        sapo.validate_state_dict(without)
    earlier = build_point_mass_trainer(tmp_path, algorithm="sapo_ensemble").save_checkpoint()
    with pytest.raises(ValueError, match="resumes as 'sapo_ensemble'"):
        trainer.load_checkpoint(earlier)


def test_an_earlier_sapo_config_names_the_kept_variant():
    with pytest.raises(ConfigError) as error:
        load_config(ROOT / "configs" / "pendulum_sapo.yaml", ["algorithm.name=sapo"])
    message = str(error.value)
    assert "\n" not in message and message.startswith("algorithm.cfg.target_critic_alpha: ")
    assert "algorithm.name: sapo_ensemble" in message
    with pytest.raises(ValueError, match="^critic_reduction: .*'sapo_ensemble'"):
        build_algo("sapo", {"critic_reduction": "min"}, SquashedNormalPolicy(2, 1))
    assert type(load_config(ROOT / "configs" / "pendulum_sapo.yaml")).__name__ == "RunConfig"


def test_the_ant_config_has_the_authors_settings():
    from pathgrad.runs.config import algorithm_config

    config = load_config(ROOT / "configs" / "diffrl_ant_sapo.yaml")
    cfg = algorithm_config(config)
    assert isinstance(cfg, SAPOCfg) and config.policy.name == "squashed_normal"
    assert (cfg.optimizer.name, cfg.optimizer.learning_rate) == ("adamw", 2e-3)
    assert (cfg.critic_optimizer.learning_rate, cfg.max_grad_norm) == (5e-4, 0.5)
    assert cfg.lr_scheduler.kwargs["end_factor"] * 2e-3 == pytest.approx(1e-5)
    assert cfg.critic_lr_scheduler.kwargs["end_factor"] * 5e-4 == pytest.approx(1e-5)
    assert (config.env.num_envs, config.trainer.segment_length) == (64, 32)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_critics": 0}, "num_critics must be at least 1, got 0"),
        ({"init_temperature": 0.0}, "init_temperature must be positive"),
        ({"target_entropy": 0.0}, "target_entropy must be a finite nonzero number"),
        ({"target_entropy": float("nan")}, "target_entropy must be a finite nonzero number"),
        ({"temperature_optimizer": {"name": "nadam"}}, "optimizer.name must be one of"),
        ({"critic_lr_scheduler": {"name": "nope"}}, "^critic_lr_scheduler: lr_scheduler.name"),
    ],
)
def test_config_errors_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        SAPOCfg(**fields)


def test_a_policy_without_entropies_is_refused():
    from helpers import LinearPolicy, ScalarEnv
    from pathgrad.collector import DifferentiableCollector

    class MeanOnly(LinearPolicy):
        def get_differentiable_action(self, obs, deterministic=False):
            action = self.w * obs
            return {"action": action, "mean": action}

    sapo = SAPO(SAPOCfg(), MeanOnly(), observation_dim=1, action_dim=1)
    rollout = DifferentiableCollector(ScalarEnv([1.0]), sapo.policy, "cpu").collect(2)
    sapo.begin_update()
    with pytest.raises(ValueError, match="SAPO needs a stochastic policy"):
        sapo.accumulate_segment(rollout)
    sapo.cancel_update()
