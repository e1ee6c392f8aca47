"""APG: returns, gradients against finite differences, truncation, skips, errors."""

from __future__ import annotations

import math

import pytest
import torch

from helpers import (
    LinearPolicy,
    ScalarEnv,
    central_difference_gradient,
    make_rollout,
    relative_error,
)
from pathgrad.algo import APG, APGCfg, complete_discounted_return, segmented_discounted_return
from pathgrad.collector import DifferentiableCollector, DifferentiableRollout
from pathgrad.envs import PointMass
from pathgrad.policies import GaussianMLPPolicy

REWARDS = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]
DONES = [[False, False], [True, False], [False, False], [False, True]]


def test_segmented_return_restarts_the_discount_after_done():
    returns = segmented_discounted_return(make_rollout(REWARDS, DONES), 0.5)
    assert returns.tolist() == pytest.approx(
        [1 + 0.5 * 3 + 5 + 0.5 * 7, 2 + 0.5 * 4 + 0.25 * 6 + 0.125 * 8]
    )


def test_complete_return_stops_after_the_first_done():
    returns = complete_discounted_return(make_rollout(REWARDS, DONES), 0.5)
    assert returns.tolist() == pytest.approx([1 + 0.5 * 3, 2 + 0.5 * 4 + 0.25 * 6 + 0.125 * 8])


def test_return_functions_reject_empty_rollouts():
    empty = DifferentiableRollout(torch.zeros(2, 1), ())
    for function in (segmented_discounted_return, complete_discounted_return):
        with pytest.raises(ValueError, match="Cannot compute returns for an empty rollout."):
            function(empty, 0.9)


def make_apg(policy: torch.nn.Module, **cfg) -> APG:
    cfg.setdefault("optimizer", {"name": "sgd", "learning_rate": 0.1})
    return APG(APGCfg(**cfg), policy)


def _point_mass_problem():
    torch.manual_seed(0)
    env = PointMass(3, dtype="float64", max_episode_steps=3, seed=0)
    policy = GaussianMLPPolicy(6, 2, hidden_sizes=(8,), activation="tanh").double()
    with torch.no_grad():  # a non-trivial output layer so every parameter matters
        policy.mean_net[-1].weight.normal_(0.0, 0.5)
    collector = DifferentiableCollector(env, policy, "cpu", action_adjoint_max_norm=1e9)
    return env, policy, collector


def _rollout(collector: DifferentiableCollector, steps: int) -> DifferentiableRollout:
    torch.manual_seed(11)  # the same action noise for every evaluation
    collector.reset(seed=3)
    return collector.collect(steps)


def test_segment_gradient_matches_finite_differences_across_a_done():
    env, policy, collector = _point_mass_problem()
    apg = make_apg(policy, gamma=0.9, ent_coef=0.01)
    apg.begin_update()
    rollout = _rollout(collector, 6)
    assert rollout.dones.any(dim=1).tolist() == [False, False, True, False, False, True]
    apg.accumulate_segment(rollout)
    parameters = list(policy.parameters())
    analytic = [p.grad.clone() for p in parameters]

    def loss():
        rollout = _rollout(collector, 6)
        entropy = sum(
            0.9 ** (t % 3) * tr.policy_output["entropy"] for t, tr in enumerate(rollout.transitions)
        )
        return -segmented_discounted_return(rollout, 0.9).mean() - 0.01 * entropy.mean()

    numeric = central_difference_gradient(loss, parameters)
    assert relative_error(analytic, numeric) < 1e-6
    assert apg.finish_update()["action_adjoint_clipped_fraction"] == 0.0


def test_complete_rollout_gradient_matches_finite_differences():
    env, policy, collector = _point_mass_problem()
    apg = make_apg(policy, gamma=0.95)
    scale = torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64)
    apg.begin_update()
    apg.accumulate_complete_rollout(
        _rollout(collector, 5), objective_scale=scale, accumulation_scale=0.5
    )
    parameters = list(policy.parameters())
    analytic = [p.grad.clone() for p in parameters]

    def loss():
        return -0.5 * (complete_discounted_return(_rollout(collector, 5), 0.95) * scale).mean()

    assert relative_error(analytic, central_difference_gradient(loss, parameters)) < 1e-6


def test_segments_give_the_hand_derived_truncated_gradient():
    # x' = x + w x, r = -x'^2. A segment of L steps from a constant c has
    # r_k = -c^2 (1+w)^(2k), dr_k/dw = -2k c^2 (1+w)^(2k-1); the second segment
    # starts from c = x0 (1+w)^L, detached, and its discount continues at gamma^L.
    x0, w, gamma, length = torch.tensor([0.5, -1.0], dtype=torch.float64), 0.2, 0.9, 2
    policy = LinearPolicy(w)
    collector = DifferentiableCollector(ScalarEnv(x0.tolist()), policy, "cpu")
    apg = make_apg(policy, gamma=gamma)
    apg.begin_update()
    apg.accumulate_segment(collector.collect(length))
    assert apg._discount.tolist() == pytest.approx([gamma**length] * 2)
    collector.detach_state()
    apg.accumulate_segment(collector.collect(length))

    def segment_gradient(c, first_discount):
        return sum(
            first_discount * gamma ** (k - 1) * -2 * k * c**2 * (1 + w) ** (2 * k - 1)
            for k in range(1, length + 1)
        )

    second_start = x0 * (1 + w) ** length
    expected = segment_gradient(x0, 1.0) + segment_gradient(second_start, gamma**length)
    assert policy.w.grad.item() == pytest.approx(-expected.mean().item(), rel=1e-12)


def test_discount_restarts_at_done_across_segments():
    policy = LinearPolicy(0.1)
    collector = DifferentiableCollector(ScalarEnv([1.0], episode_steps=3), policy, "cpu")
    apg = make_apg(policy, gamma=0.5)
    apg.begin_update()
    apg.accumulate_segment(collector.collect(2))
    assert apg._discount.item() == 0.25
    collector.detach_state()
    apg.accumulate_segment(collector.collect(1))  # the episode ends here
    assert apg._discount.item() == 1.0


def _nan_at_second_step(reward, step):
    return reward * float("nan") if step == 1 else reward


def _snapshot(apg: APG):
    params = [p.detach().clone() for p in apg.policy.parameters()]
    state = {k: {n: t.clone() for n, t in v.items()} for k, v in apg.optimizer.state.items()}
    return params, state, apg.lr_schedule.step_count


def test_nan_reward_skips_the_update_leaving_everything_bitwise_unchanged():
    policy = LinearPolicy(0.2)
    env = ScalarEnv([1.0, 2.0], reward_hook=lambda r, step: _nan_at_second_step(r, step - 3))
    collector = DifferentiableCollector(env, policy, "cpu")
    apg = make_apg(
        policy,
        optimizer={"name": "adam", "learning_rate": 0.01},
        lr_scheduler={"name": "exponential", "kwargs": {"gamma": 0.5}},
    )
    assert apg.update(collector.collect(3))["skipped_update"] == 0.0  # builds Adam state
    collector.detach_state()
    params, state, schedule_step = _snapshot(apg)
    apg.begin_update()
    apg.accumulate_segment(collector.collect(2))  # NaN reward in this segment
    collector.detach_state()
    apg.accumulate_segment(collector.collect(2))  # a finite segment does not revive it
    metrics = apg.finish_update()
    assert metrics["skipped_update"] == 1.0 and metrics["skipped_excessive_gradient"] == 0.0
    assert math.isnan(metrics["grad_norm"])
    new_params, new_state, new_step = _snapshot(apg)
    assert all(torch.equal(a, b) for a, b in zip(params, new_params, strict=True))
    for key, values in state.items():
        assert all(torch.equal(values[n], new_state[key][n]) for n in values)
    assert new_step == schedule_step
    assert metrics["learning_rate"] == 0.005


def test_nonfinite_loss_or_gradient_raise_when_skipping_is_off():
    policy = LinearPolicy(0.2)
    collector = DifferentiableCollector(
        ScalarEnv([1.0], reward_hook=_nan_at_second_step), policy, "cpu"
    )
    apg = make_apg(policy, skip_nonfinite_updates=False)
    apg.begin_update()
    with pytest.raises(FloatingPointError, match="APG produced a non-finite loss."):
        apg.accumulate_segment(collector.collect(2))
    apg.cancel_update()

    def nan_gradient(reward, step):  # finite value, NaN derivative: 0 * sqrt'(0)
        return reward + 0.0 * torch.sqrt(reward - reward)

    collector = DifferentiableCollector(ScalarEnv([1.0], reward_hook=nan_gradient), policy, "cpu")
    apg.begin_update()
    with pytest.raises(FloatingPointError, match="APG produced a non-finite policy gradient."):
        apg.accumulate_segment(collector.collect(1))


def test_excessive_gradient_is_skipped_before_clipping():
    policy = LinearPolicy(0.2)
    collector = DifferentiableCollector(ScalarEnv([3.0]), policy, "cpu")
    apg = make_apg(policy, max_grad_norm_before_clip=1e-6)
    before = policy.w.detach().clone()
    metrics = apg.update(collector.collect(1))
    assert metrics["skipped_update"] == 1.0 and metrics["skipped_excessive_gradient"] == 1.0
    assert metrics["grad_norm"] > 1e-6 and torch.equal(policy.w.detach(), before)


def test_update_applies_clipped_step_and_reports_the_metric_names():
    policy = LinearPolicy(0.2)
    collector = DifferentiableCollector(
        ScalarEnv([3.0]), policy, "cpu", action_adjoint_max_norm=100.0
    )
    apg = make_apg(policy, max_grad_norm=0.5, gamma=1.0)
    rollout = collector.collect(1)
    expected_norm = abs(-2 * (3.0 * 1.2) * 3.0)  # |d(-r)/dw| with r = -(x + w x)^2
    metrics = apg.update(rollout)
    assert set(metrics) == {
        "loss",
        "objective",
        "entropy",
        "grad_norm",
        "skipped_update",
        "skipped_excessive_gradient",
        "learning_rate",
        "action_adjoint_preclip_mean_norm",
        "action_adjoint_preclip_max_norm",
        "action_adjoint_clipped_fraction",
        "action_adjoint_nonfinite_fraction",
    }
    assert metrics["grad_norm"] == pytest.approx(expected_norm)
    assert metrics["objective"] == pytest.approx(-(3.6**2)) and metrics["loss"] == pytest.approx(
        3.6**2
    )
    assert policy.w.item() == pytest.approx(0.2 - 0.1 * 0.5)  # SGD on the clipped gradient


def test_entropy_bonus_and_objective_scale_on_hand_examples():
    policy = torch.nn.Linear(1, 1)
    apg = make_apg(policy, gamma=0.5, ent_coef=0.1)
    entropies = [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]]
    apg.begin_update()
    apg.accumulate_segment(make_rollout(REWARDS, DONES, entropies))
    metrics = apg.finish_update()
    entropy = ((1 + 0.5 * 2 + 3 + 0.5 * 4) + (1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 4)) / 2
    objective = segmented_discounted_return(make_rollout(REWARDS, DONES), 0.5).mean().item()
    assert metrics["entropy"] == pytest.approx(entropy)
    assert metrics["loss"] == pytest.approx(-objective - 0.1 * entropy)

    apg.begin_update()
    scale = torch.tensor([2.0, 1.0])
    apg.accumulate_complete_rollout(
        make_rollout(REWARDS, DONES, entropies), objective_scale=scale, accumulation_scale=0.5
    )
    metrics = apg.finish_update()
    complete_entropy = torch.tensor([1 + 0.5 * 2, 1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 4])
    returns = torch.tensor([1 + 0.5 * 3, 2 + 0.5 * 4 + 0.25 * 6 + 0.125 * 8])
    assert metrics["entropy"] == pytest.approx(0.5 * (complete_entropy * scale).mean().item())
    assert metrics["objective"] == pytest.approx(0.5 * (returns * scale).mean().item())


def test_lifecycle_and_argument_errors():
    policy = torch.nn.Linear(1, 1)
    apg = make_apg(policy)
    rollout = make_rollout([[1.0, 2.0]], [[False, False]])
    empty = DifferentiableRollout(torch.zeros(2, 1), ())
    with pytest.raises(RuntimeError, match=r"Call begin_update\(\) before accumulating a segment."):
        apg.accumulate_segment(rollout)
    with pytest.raises(RuntimeError, match=r"Call begin_update\(\) before accumulating a rollout."):
        apg.accumulate_complete_rollout(rollout)
    with pytest.raises(RuntimeError, match=r"Call begin_update\(\) before finishing an update."):
        apg.finish_update()
    apg.begin_update()
    with pytest.raises(RuntimeError, match="An APG optimizer update is already active."):
        apg.begin_update()
    with pytest.raises(RuntimeError, match="Cannot finish an APG update without any segments."):
        apg.finish_update()
    for call in (apg.accumulate_segment, apg.accumulate_complete_rollout):
        with pytest.raises(ValueError, match="APG requires a non-empty differentiable rollout."):
            call(empty)
    with pytest.raises(ValueError, match="accumulation_scale must be positive."):
        apg.accumulate_complete_rollout(rollout, accumulation_scale=0.0)
    with pytest.raises(ValueError, match="objective_scale must be scalar or have one value"):
        apg.accumulate_complete_rollout(rollout, objective_scale=torch.ones(3))
    with pytest.raises(ValueError, match="objective_scale must be scalar or have one value"):
        apg.accumulate_complete_rollout(rollout, objective_scale=torch.ones(2, 1))
    with pytest.raises(ValueError, match="objective_scale must contain only finite values."):
        apg.accumulate_complete_rollout(rollout, objective_scale=float("inf"))
    apg.cancel_update()
    apg.begin_update()  # cancel ended the update
    apg.cancel_update()
    cfg = APGCfg()
    cfg.max_grad_norm_before_clip = -1.0
    with pytest.raises(ValueError, match="max_grad_norm_before_clip cannot be negative."):
        APG(cfg, policy)
    with pytest.raises(ValueError, match="max_grad_norm_before_clip cannot be negative."):
        APGCfg(max_grad_norm_before_clip=-1.0)
