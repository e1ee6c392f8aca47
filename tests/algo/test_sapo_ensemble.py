"""SAPO-ensemble (the earlier SAPO): the soft objective's gradient, the temperature,
the critic ensemble, resume."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from helpers import (
    LinearPolicy,
    ScalarEnv,
    build_point_mass_trainer,
    float64_windows,
    learning_state,
    relative_error,
    window_gradient_error,
)
from pathgrad.algo import SAPOEnsemble, SAPOEnsembleCfg
from pathgrad.collector import DifferentiableCollector


def small_sapo(**fields) -> tuple[SAPOEnsemble, Any]:
    """SAPO-ensemble on float64 PointMass windows (squashed policy, 2 critics); ``rollout``."""
    policy, normalizer, rollout = float64_windows(squash=True)
    cfg = SAPOEnsembleCfg(
        **{"gamma": 0.9, "critic_hidden_sizes": [8], "critic_activation": "tanh",
           "reward_scale": 0.5, "init_temperature": 0.3, **fields}
    )  # fmt: skip
    sapo = SAPOEnsemble(cfg, policy, observation_dim=6, action_dim=2)
    sapo.observation_transform = normalizer.normalize
    return sapo, rollout


@pytest.mark.parametrize("reduction", ["mean", "min"])
def test_actor_gradient_matches_finite_differences_of_the_soft_objective(reduction):
    sapo, rollout = small_sapo(critic_reduction=reduction)
    window = lambda: rollout(5)  # noqa: E731 - crosses an episode end (truncation after 3)
    assert window_gradient_error(sapo, window) < 1e-6
    # The entropy term is in it: without it the gradient differs.
    with_entropy = gradient(sapo, window())
    sapo.log_temperature.data.fill_(math.log(1e-12))
    assert relative_error(gradient(sapo, window()), with_entropy) > 1e-3


def gradient(algorithm, rollout) -> list[torch.Tensor]:
    algorithm.begin_update()
    algorithm.accumulate_segment(rollout)
    values = [p.grad.clone() for p in algorithm.policy.parameters()]
    algorithm.cancel_update()
    return values


def test_the_soft_reward_adds_the_temperature_times_the_action_entropy():
    sapo, window = small_sapo()
    rollout = window(4)
    actor, critic = sapo._window_rewards(rollout)
    log_probs = torch.stack([t.policy_output["log_prob"] for t in rollout.transitions])
    # Entropy in the normalized box: PointMass actions span [-1, 1], so no scale term.
    expected = 0.5 * rollout.rewards - 0.3 * log_probs
    assert torch.allclose(actor, expected, rtol=1e-12, atol=1e-12)
    assert actor.requires_grad and not critic.requires_grad


def test_the_entropy_is_measured_in_the_normalized_action_box():
    sapo, window = small_sapo()
    unit = sapo._action_entropies(window(1))
    sapo.policy.action_half_range.fill_(2.0)  # the same sample, actions spanning [-2, 2]
    wide = window(1).transitions[0].policy_output["log_prob"]
    assert torch.allclose(-wide - 2 * math.log(2.0), unit[0], atol=1e-12)  # density / 2 per axis
    assert torch.allclose(sapo._action_entropies(window(1)), unit, atol=1e-12)


@pytest.mark.parametrize(("target", "direction"), [(-50.0, "falls"), (50.0, "rises")])
def test_the_temperature_steers_the_entropy_towards_its_target(target, direction):
    sapo, window = small_sapo(target_entropy=target)
    before = sapo.temperature
    sapo.begin_update()
    sapo.accumulate_segment(window(4))
    metrics = sapo.finish_update()
    after = sapo.temperature
    assert metrics["temperature"] == after
    assert (after < before) if direction == "falls" else (after > before)
    assert math.isfinite(metrics["action_entropy"])


def test_a_fixed_temperature_stays_and_the_default_target_is_minus_the_action_size():
    sapo, window = small_sapo(learn_temperature=False)
    assert sapo.target_entropy == -2.0
    sapo.begin_update()
    sapo.accumulate_segment(window(4))
    sapo.finish_update()
    assert sapo.temperature == pytest.approx(0.3, rel=1e-12)


def test_every_critic_of_the_ensemble_trains_and_the_values_combine():
    sapo, window = small_sapo(num_critics=3, critic_reduction="min")
    observations = torch.randn(5, 6, dtype=torch.float64)
    members = sapo._values(sapo.critic, observations)
    stacked = torch.stack(
        [member(sapo.observation_transform(observations)).squeeze(-1)
         for member in sapo.critic.members]
    )  # fmt: skip
    assert torch.equal(members, stacked.amin(0))
    before = [p.clone() for p in sapo.critic.parameters()]
    sapo.begin_update()
    sapo.accumulate_segment(window(4))
    metrics = sapo.finish_update()
    assert metrics["value_loss"] > 0
    for member in range(3):  # each member moved
        params = list(sapo.critic.members[member].parameters())
        start = before[member * len(params) : (member + 1) * len(params)]
        assert any(not torch.equal(a, b) for a, b in zip(params, start, strict=True))


def test_resume_continues_exactly_as_an_uninterrupted_run(tmp_path):
    straight = build_point_mass_trainer(
        tmp_path / "a", algorithm="sapo_ensemble", eval_frequency_steps=0
    )
    straight.train(total_updates=6)
    first = build_point_mass_trainer(
        tmp_path / "b", algorithm="sapo_ensemble", eval_frequency_steps=0
    )
    first.train(total_updates=3)
    path = first.save_checkpoint()
    resumed = build_point_mass_trainer(
        tmp_path / "c", seed=5, algorithm="sapo_ensemble", eval_frequency_steps=0
    )
    resumed.load_checkpoint(path)
    resumed.train(total_updates=6)
    expected = learning_state(straight)
    assert "log_temperature" in expected and "temperature_optimizer.0.exp_avg" in expected
    for name, value in learning_state(resumed).items():
        assert torch.equal(value, expected[name]), name
    assert straight.algorithm.temperature != pytest.approx(0.1)  # it did learn


def test_a_shac_checkpoint_does_not_load_into_sapo(tmp_path):
    path = build_point_mass_trainer(tmp_path, algorithm="shac").save_checkpoint()
    sapo_trainer = build_point_mass_trainer(tmp_path, algorithm="sapo_ensemble")
    with pytest.raises(ValueError, match="has no 'log_temperature' \\(not a SAPO state\\)"):
        sapo_trainer.load_checkpoint(path)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_critics": 0}, "num_critics must be at least 1, got 0"),
        ({"critic_reduction": "max"}, "critic_reduction must be one of \\['mean', 'min'\\]"),
        ({"init_temperature": 0.0}, "init_temperature must be positive"),
        ({"target_entropy": float("nan")}, "target_entropy must be a finite number"),
        ({"temperature_optimizer": {"name": "nadam"}}, "optimizer.name must be one of"),
    ],
)
def test_config_errors_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        SAPOEnsembleCfg(**fields)


class MeanOnlyPolicy(LinearPolicy):
    """A deterministic controller: its outputs carry no log-probability."""

    def get_differentiable_action(self, obs: torch.Tensor, deterministic: bool = False):
        action = self.w * obs
        return {"action": action, "mean": action}


def test_a_policy_without_log_probabilities_is_refused():
    sapo = SAPOEnsemble(SAPOEnsembleCfg(), MeanOnlyPolicy(), observation_dim=1, action_dim=1)
    rollout = DifferentiableCollector(ScalarEnv([1.0]), sapo.policy, "cpu").collect(2)
    sapo.begin_update()
    with pytest.raises(ValueError, match="SAPO-ensemble needs a stochastic policy"):
        sapo.accumulate_segment(rollout)
    sapo.cancel_update()
