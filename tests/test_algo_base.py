"""Optimizers by name, closed-form LR schedules, horizon binding and resume."""

from __future__ import annotations

import math

import pytest
import torch

from pathgrad.algo import APG, APGCfg


def make_apg(lr_scheduler=None, optimizer=None) -> APG:
    policy = torch.nn.Linear(2, 1)
    cfg = APGCfg(
        optimizer=optimizer or {"name": "adam", "learning_rate": 1.0},
        lr_scheduler=lr_scheduler or {},
    )
    return APG(cfg, policy)


def rates(apg: APG, updates: int) -> list[float]:
    """Learning rates after each of ``updates`` scheduler steps, starting with the first."""
    values = [apg.current_learning_rate()]
    for _ in range(updates):
        apg._step_scheduler()
        values.append(apg.current_learning_rate())
    return values


@pytest.mark.parametrize(
    ("name", "optimizer_type"),
    [
        ("adam", torch.optim.Adam),
        ("adamw", torch.optim.AdamW),
        ("sgd", torch.optim.SGD),
        ("rmsprop", torch.optim.RMSprop),
    ],
)
def test_optimizer_names_build_pytorch_optimizers(name, optimizer_type):
    apg = make_apg(optimizer={"name": name, "learning_rate": 0.5})
    assert type(apg.optimizer) is optimizer_type
    assert apg.current_learning_rate() == 0.5


def test_invalid_optimizer_kwargs_name_the_field():
    with pytest.raises(ValueError, match="optimizer.kwargs are invalid for 'adam'"):
        make_apg(optimizer={"name": "adam", "kwargs": {"momentum": 0.9}})


def test_constant_exponential_and_step_schedules():
    assert rates(make_apg(), 3) == [1.0, 1.0, 1.0, 1.0]
    exponential = rates(make_apg({"name": "exponential", "kwargs": {"gamma": 0.5}}), 3)
    assert exponential == [1.0, 0.5, 0.25, 0.125]
    step = rates(make_apg({"name": "step", "kwargs": {"step_size": 2, "gamma": 0.1}}), 4)
    assert step == pytest.approx([1.0, 1.0, 0.1, 0.1, 0.01])


def test_linear_and_cosine_with_explicit_horizon_stay_at_their_end():
    linear = rates(make_apg({"name": "linear", "kwargs": {"total_iters": 4, "end_factor": 0.2}}), 6)
    assert linear == pytest.approx([1.0, 0.8, 0.6, 0.4, 0.2, 0.2, 0.2])
    cosine = rates(make_apg({"name": "cosine", "kwargs": {"T_max": 2, "eta_min": 0.1}}), 3)
    assert cosine == pytest.approx([1.0, 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 2)), 0.1, 0.1])


def test_warmup_rises_linearly_then_the_decay_starts():
    apg = make_apg(
        {
            "name": "linear",
            "kwargs": {"total_iters": 2},
            "warmup_updates": 2,
            "warmup_start_factor": 0.5,
        }
    )
    assert rates(apg, 4) == pytest.approx([0.5, 0.75, 1.0, 0.5, 0.0])


def test_prepare_schedule_binds_the_horizon_to_the_budget():
    apg = make_apg({"name": "linear"})
    apg._prepare_schedule(4, 4)
    assert apg.lr_schedule.total_horizon == 4
    assert rates(apg, 4) == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])


def test_prepare_schedule_rebinds_to_cover_a_larger_budget_after_progress():
    apg = make_apg({"name": "linear"})
    apg._prepare_schedule(4, 4)
    rates(apg, 2)
    apg._prepare_schedule(8, 6)
    assert apg.lr_schedule.total_horizon == 8
    assert apg.current_learning_rate() == pytest.approx(1.0 - 2 / 8)
    apg._step_scheduler()
    assert apg.current_learning_rate() == pytest.approx(1.0 - 3 / 8)


def test_prepare_schedule_errors():
    with pytest.raises(ValueError, match="estimated_updates must be at least remaining_updates"):
        make_apg()._prepare_schedule(1, 2)
    with pytest.raises(ValueError, match=r"warmup_updates \(5\) must be smaller"):
        make_apg({"name": "linear", "warmup_updates": 5})._prepare_schedule(5, 5)
    with pytest.raises(ValueError, match="ends after 3 updates"):
        make_apg({"name": "cosine", "kwargs": {"T_max": 3}})._prepare_schedule(4, 4)


def test_check_schedule_horizon_raises_before_running_past_an_explicit_horizon():
    apg = make_apg({"name": "linear", "kwargs": {"total_iters": 2}})
    apg._check_schedule_horizon(2)
    rates(apg, 2)
    with pytest.raises(RuntimeError, match="ends after 2 updates, 2 are taken"):
        apg._check_schedule_horizon(1)


def test_check_schedule_horizon_requires_a_bound_horizon():
    apg = make_apg({"name": "cosine"})
    with pytest.raises(RuntimeError, match=r"has no horizon: give lr_scheduler.kwargs\['T_max'\]"):
        apg._check_schedule_horizon(1)
    make_apg({"name": "exponential", "kwargs": {"gamma": 0.9}})._check_schedule_horizon(10**6)


def test_state_dict_restores_the_curve_and_restart_starts_it_again():
    source = make_apg({"name": "linear"})
    source._prepare_schedule(10, 10)
    rates(source, 3)
    state = source.state_dict()

    restored = make_apg({"name": "linear"})
    restored.load_state_dict(state, resume_scheduler="restore")
    assert restored.current_learning_rate() == pytest.approx(0.7)
    assert restored.lr_schedule.total_horizon == 10

    restarted = make_apg({"name": "linear"})
    restarted.load_state_dict(state, resume_scheduler="restart")
    assert restarted.current_learning_rate() == 1.0
    assert restarted.lr_schedule.step_count == 0
    with pytest.raises(ValueError, match="resume_scheduler must be 'restore' or 'restart'"):
        restarted.load_state_dict(state, resume_scheduler="keep")
