"""ahac_stiffness: the stiffness reading, the adaptive horizon, its gradient, checkpoints."""

from __future__ import annotations

import math

import pytest
import torch

from helpers import (
    LinearPolicy,
    ScalarEnv,
    build_point_mass_trainer,
    learning_state,
)
from pathgrad.algo import StiffnessAHAC, StiffnessAHACCfg
from pathgrad.collector import DifferentiableCollector


def scalar_ahac(w: float, **fields) -> tuple[StiffnessAHAC, DifferentiableCollector]:
    """StiffnessAHAC on ``x' = (1 + w) x``: the sensitivity grows by ``|1 + w|`` per step back."""
    policy = LinearPolicy(w)
    cfg = StiffnessAHACCfg(
        critic_hidden_sizes=[], optimizer={"name": "sgd", "learning_rate": 1e-12}
    )
    cfg = cfg.replace(**fields)
    return StiffnessAHAC(cfg, policy, observation_dim=1), DifferentiableCollector(
        ScalarEnv([1.0, -0.5], episode_steps=1000), policy, "cpu"
    )


def run_updates(ahac: StiffnessAHAC, collector: DifferentiableCollector, updates: int, window: int):
    horizons, readings = [], []
    for _ in range(updates):
        ahac.begin_update()
        ahac.accumulate_segment(collector.collect(window))
        collector.reset()
        metrics = ahac.finish_update()
        horizons.append(metrics["horizon"])
        readings.append(metrics["stiffness"])
    return horizons, readings


def test_stiffness_is_the_log_growth_of_the_window_sensitivity():
    ahac, collector = scalar_ahac(1.0, min_horizon=2, max_horizon=6)
    _, readings = run_updates(ahac, collector, 1, window=8)
    # d x_6 / d a_t = 2^(5 - t): growth 2^5 from the last action back to the first.
    assert readings[0] == pytest.approx(5 * math.log(2.0))
    stable, collector = scalar_ahac(-0.5, min_horizon=2, max_horizon=6)
    assert run_updates(stable, collector, 1, window=8)[1][0] == pytest.approx(0.0)


def test_horizon_shrinks_under_high_stiffness_and_grows_back_under_low():
    # Unstable loop, rate log 2 per step: C = 2 allows about 3 steps.
    ahac, collector = scalar_ahac(1.0, min_horizon=2, max_horizon=12, stiffness_threshold=2.0)
    horizons, readings = run_updates(ahac, collector, 12, window=12)
    assert horizons[0] == 12 and readings[0] == pytest.approx(11 * math.log(2.0))
    # then it settles where (h - 1) log 2 is about C: 3 to 5 steps.
    assert all(3 <= horizon <= 5 for horizon in horizons[2:])
    # A stable loop (no growth) lengthens the window back up to max_horizon.
    stable, collector = scalar_ahac(-0.5, min_horizon=2, max_horizon=12, stiffness_threshold=2.0)
    stable.load_state_dict(ahac.state_dict())
    horizons, _ = run_updates(stable, collector, 8, window=12)
    assert horizons[0] < 6 and horizons[-1] == 12
    # Very stiff dynamics stop at min_horizon (the multiplier is bounded).
    stiff, collector = scalar_ahac(3.0, min_horizon=2, max_horizon=12, stiffness_threshold=0.5)
    horizons, _ = run_updates(stiff, collector, 6, window=12)
    assert horizons[-1] == 2 and stiff.horizon_multiplier == 10.0


def test_the_actor_objective_stops_at_the_horizon_and_the_critic_sees_the_window():
    w, gamma = 0.5, 0.9
    ahac, collector = scalar_ahac(w, min_horizon=1, max_horizon=2, gamma=gamma)
    with torch.no_grad():  # V(x) = x
        ahac.target_critic[0].weight.fill_(1.0)
        ahac.target_critic[0].bias.zero_()
    ahac.begin_update()
    ahac.accumulate_segment(collector.collect(4))
    x1, x2 = 1.5 * torch.tensor([1.0, -0.5]), 1.5**2 * torch.tensor([1.0, -0.5])
    expected = ((-(x1**2)) + gamma * (-(x2**2) + gamma * x2)).mean() / 2
    assert ahac._objective_total.item() == pytest.approx(expected.item())
    assert ahac._windows[-1]["rewards"].shape == (4, 2)
    ahac.cancel_update()


def test_actor_gradient_matches_finite_differences_of_the_truncated_objective():
    from helpers import float64_windows, window_gradient_error

    policy, normalizer, rollout = float64_windows()
    cfg = StiffnessAHACCfg(
        gamma=0.9,
        critic_hidden_sizes=[8],
        critic_activation="tanh",
        reward_scale=0.5,
        min_horizon=2,
        max_horizon=7,
    )
    ahac = StiffnessAHAC(cfg, policy, observation_dim=6)
    ahac.horizon_multiplier, ahac.horizon = 3.0, 4  # a window of 6 truncated after 4 steps
    ahac.observation_transform = normalizer.normalize
    ahac.begin_update()
    ahac.accumulate_segment(rollout(6))
    assert ahac._stiffness_readings and ahac._windows[-1]["rewards"].shape[0] == 6
    ahac.cancel_update()
    assert window_gradient_error(ahac, lambda: rollout(6)) < 1e-6
    assert ahac.horizon == 4  # cancelled updates leave the horizon alone


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"min_horizon": 0}, "min_horizon must be at least 1, got 0"),
        ({"min_horizon": 2.5}, "min_horizon must be an integer"),
        ({"max_horizon": True}, "max_horizon must be an integer"),
        ({"min_horizon": 8, "max_horizon": 4}, r"max_horizon must be at least min_horizon \(8\)"),
        ({"stiffness_threshold": 0.0}, "stiffness_threshold must be positive and finite"),
        ({"stiffness_threshold": math.inf}, "stiffness_threshold must be positive and finite"),
        ({"horizon_lr": -1.0}, "horizon_lr must be positive and finite"),
        ({"lam": 1.5}, "lam must be in"),
    ],
)
def test_config_validation_names_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        StiffnessAHACCfg(**fields)


def test_built_by_name_and_rejects_other_checkpoints(tmp_path):
    from pathgrad.algo import build_algo

    with pytest.raises(ValueError, match="'ahac_stiffness' needs env="):
        build_algo("ahac_stiffness", {}, LinearPolicy(), "cpu")
    shac_path = build_point_mass_trainer(tmp_path / "s", algorithm="shac").save_checkpoint()
    trainer = build_point_mass_trainer(tmp_path / "a", algorithm="ahac_stiffness")
    with pytest.raises(ValueError, match="has no 'horizon' \\(not an ahac_stiffness state\\)"):
        trainer.load_checkpoint(shac_path)
    state = trainer.algorithm.state_dict()
    state["horizon"] = {"multiplier": 99.0, "horizon": 4}
    with pytest.raises(ValueError, match=r"multiplier 99.0 is outside \[0, 28\]"):
        trainer.algorithm.validate_state_dict(state)


def ahac_trainer(directory):
    cfg = StiffnessAHACCfg(
        optimizer={"name": "adam", "learning_rate": 1e-2},
        lr_scheduler={"name": "linear", "kwargs": {"total_iters": 40, "end_factor": 0.5}},
        critic_epochs=2,
        min_horizon=2,
        max_horizon=6,
        stiffness_threshold=0.5,
        horizon_lr=0.75,
    )
    trainer = build_point_mass_trainer(
        directory,
        algorithm="ahac_stiffness",
        algorithm_cfg=cfg,
        segment_length=6,
        update_horizon=12,
        eval_frequency_steps=4 * 12 * 3,
    )
    # Start short: PointMass is smooth (no growth), so the horizon lengthens.
    trainer.algorithm.horizon_multiplier, trainer.algorithm.horizon = 4.0, 2
    return trainer


def test_resume_from_a_checkpoint_equals_uninterrupted_training(tmp_path):
    full = ahac_trainer(tmp_path / "full")
    history = full.train(total_updates=8)["train_history"]
    horizons = [entry["train/horizon"] for entry in history]
    assert horizons[0] == 2 and horizons[-1] > 3  # the horizon moved during the run
    first = ahac_trainer(tmp_path / "resumed")
    first.train(total_updates=4)
    path = first.save_checkpoint()
    resumed = ahac_trainer(tmp_path / "resumed")
    resumed.load_checkpoint(path)
    assert resumed.algorithm.state_dict()["horizon"] == first.algorithm.state_dict()["horizon"]
    resumed.train(total_updates=8)
    assert resumed.algorithm.state_dict()["horizon"] == full.algorithm.state_dict()["horizon"]
    want, got = learning_state(full), learning_state(resumed)
    assert want.keys() == got.keys()
    for name, value in want.items():
        assert torch.equal(value, got[name]), name
    assert list(full.ret_window) == list(resumed.ret_window)
    assert full.last_eval_metrics == resumed.last_eval_metrics
