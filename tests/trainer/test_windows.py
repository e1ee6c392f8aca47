"""Algorithms that set each update's length (AHAC's round(H)): steps, budgets, resume."""

from __future__ import annotations

import pytest
import torch

from helpers import build_point_mass_trainer, learning_state
from pathgrad.algo import AHACCfg


def ahac_trainer(directory, **overrides):
    cfg = AHACCfg(
        optimizer={"name": "adam", "learning_rate": 1e-2},
        critic_hidden_sizes=[16],
        critic_epochs=8,
        min_horizon=3,
        max_horizon=9,
        contact_threshold=10.0,  # PointMass sits around |p| sqrt(12) 100 > 10: H grows
        horizon_lr=0.05,
        **overrides,
    )
    return build_point_mass_trainer(
        directory, algorithm="ahac", algorithm_cfg=cfg, contacts=True, eval_frequency_steps=60
    )


def test_each_update_steps_round_h_and_global_step_counts_them(tmp_path):
    trainer = ahac_trainer(tmp_path)
    history = trainer.train(total_updates=6)["train_history"]
    horizons = [int(entry["train/horizon"]) for entry in history]
    steps = [int(entry["global_step"]) for entry in history]
    assert horizons[0] == 3 and horizons[-1] > 3  # H moved
    assert [b - a for a, b in zip([0, *steps], steps, strict=False)] == [4 * h for h in horizons]
    assert trainer.global_step == 4 * sum(horizons)
    assert trainer.eval_history  # evaluations fell due on the way
    assert trainer.algorithm.adaptive_horizon.schedule.bound_horizon == 6


def test_an_env_step_budget_needs_explicit_schedule_horizons_and_shortens_the_last_window(
    tmp_path,
):
    with pytest.raises(ValueError, match="sets each update's length.*give total_updates"):
        ahac_trainer(tmp_path / "a").train(total_timesteps=100)
    fixed = {"name": "linear", "kwargs": {"total_iters": 50}}
    trainer = ahac_trainer(
        tmp_path / "b", lr_scheduler=fixed, critic_lr_scheduler=fixed, horizon_lr_scheduler=fixed
    )
    trainer.train(total_timesteps=4 * 3 + 4 * 2)  # a window of 3, then what is left: 2
    assert trainer.global_step == 20 and trainer.num_updates == 2


def test_resume_in_the_middle_equals_uninterrupted_training(tmp_path):
    fixed = {"name": "linear", "kwargs": {"total_iters": 40, "end_factor": 0.5}}
    curves = {"lr_scheduler": fixed, "critic_lr_scheduler": fixed, "horizon_lr_scheduler": fixed}
    full = ahac_trainer(tmp_path / "full", **curves)
    full.train(total_updates=6)
    first = ahac_trainer(tmp_path / "resumed", **curves)
    first.train(total_updates=3)
    path = first.save_checkpoint()
    resumed = ahac_trainer(tmp_path / "resumed", **curves)
    resumed.load_checkpoint(path)
    resumed.train(total_updates=6)
    assert resumed.global_step == full.global_step
    assert (
        resumed.algorithm.state_dict()["adaptive_horizon"]
        == (full.algorithm.state_dict()["adaptive_horizon"])
    )
    want, got = learning_state(full), learning_state(resumed)
    assert want.keys() == got.keys()
    for name, value in want.items():
        assert torch.equal(value, got[name]), name
    assert full.last_eval_metrics == resumed.last_eval_metrics
