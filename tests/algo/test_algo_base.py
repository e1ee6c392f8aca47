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


def test_build_optimizer_accepts_a_mapping_or_nothing():
    from pathgrad.algo import build_optimizer

    model = torch.nn.Linear(2, 1)
    sgd = build_optimizer(
        model.parameters(), {"name": "sgd", "learning_rate": 0.05, "kwargs": {"momentum": 0.9}}
    )
    assert type(sgd) is torch.optim.SGD
    assert sgd.defaults["momentum"] == 0.9 and sgd.defaults["lr"] == 0.05
    default = build_optimizer(model.parameters())
    assert type(default) is torch.optim.Adam and default.defaults["lr"] == 3e-4
    with pytest.raises(ValueError, match=r"optimizer has unknown keys \['lr'\]"):
        build_optimizer(model.parameters(), {"lr": 0.1})


SCHEDULES = [
    {"name": "linear", "kwargs": {"total_iters": 5, "end_factor": 0.1}},
    {"name": "cosine", "kwargs": {"T_max": 4, "eta_min": 0.05}},
    {"name": "exponential", "kwargs": {"gamma": 0.7}},
    {"name": "step", "kwargs": {"step_size": 2, "gamma": 0.5}},
    {"name": "linear", "kwargs": {"total_iters": 3}, "warmup_updates": 2},
    {"name": None, "warmup_updates": 3, "warmup_start_factor": 0.2},
]


def _stepped(optimizer, scheduler, steps):
    rates = [optimizer.param_groups[0]["lr"]]
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        rates.append(optimizer.param_groups[0]["lr"])
    return rates


@pytest.mark.parametrize("cfg", SCHEDULES)
def test_build_lr_scheduler_steps_like_the_algorithm_schedule(cfg):
    from pathgrad.algo import build_lr_scheduler

    apg = make_apg(cfg, optimizer={"name": "sgd", "learning_rate": 1.0})
    expected = rates(apg, 8)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = build_lr_scheduler(optimizer, cfg)
    assert isinstance(scheduler, torch.optim.lr_scheduler.LRScheduler)
    assert _stepped(optimizer, scheduler, 8) == expected
    assert scheduler.get_last_lr() == [expected[-1]]


def test_build_lr_scheduler_resumes_exactly_from_its_state_dict(tmp_path):
    from pathgrad.algo import build_lr_scheduler

    cfg = {"name": "cosine", "kwargs": {"eta_min": 0.1}, "warmup_updates": 1}

    def make():
        model = torch.nn.Linear(2, 1)
        torch.nn.init.zeros_(model.weight)
        optimizer = torch.optim.Adam(
            [{"params": [model.weight]}, {"params": [model.bias], "lr": 0.5}], lr=1.0
        )
        return optimizer, build_lr_scheduler(optimizer, cfg, total_updates=9)

    def group_rates(optimizer, scheduler, steps):
        values = [[group["lr"] for group in optimizer.param_groups]]
        for _ in range(steps):
            optimizer.step()
            scheduler.step()
            values.append([group["lr"] for group in optimizer.param_groups])
        return values

    optimizer, scheduler = make()
    uninterrupted = group_rates(optimizer, scheduler, 9)
    optimizer, scheduler = make()
    group_rates(optimizer, scheduler, 4)
    path = tmp_path / "scheduler.pt"
    torch.save(scheduler.state_dict(), path)
    resumed_optimizer, resumed = make()  # rebuilt at the start of the curve
    resumed.load_state_dict(torch.load(path, weights_only=True))
    assert resumed.last_epoch == 4
    assert resumed.get_last_lr() == uninterrupted[4]
    assert group_rates(resumed_optimizer, resumed, 5) == uninterrupted[4:]


def test_build_lr_scheduler_none_horizon_and_binding():
    from pathgrad.algo import build_lr_scheduler

    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=1.0)
    assert build_lr_scheduler(optimizer, None) is None
    assert build_lr_scheduler(optimizer, {"name": None}) is None
    with pytest.raises(ValueError, match=r"cosine scheduler requires kwargs\['T_max'\]"):
        build_lr_scheduler(optimizer, {"name": "cosine"})
    scheduler = build_lr_scheduler(optimizer, {"name": "linear"}, total_updates=4)
    assert _stepped(optimizer, scheduler, 5) == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0, 0.0])
    with pytest.raises(ValueError, match=r"warmup_updates \(4\) must be smaller"):
        build_lr_scheduler(optimizer, {"name": "linear", "warmup_updates": 4}, total_updates=4)


def test_bind_schedule_binds_the_horizon_from_the_first_update():
    apg = make_apg({"name": "linear"})
    apg.bind_schedule(total_updates=4)
    assert rates(apg, 2) == pytest.approx([1.0, 0.75, 0.5])
    apg.bind_schedule(total_updates=8)  # counted from the first update, not from now
    assert apg.current_learning_rate() == pytest.approx(1.0 - 2 / 8)
    explicit = make_apg({"name": "linear", "kwargs": {"total_iters": 10}})
    explicit.bind_schedule(total_updates=4)
    assert explicit.lr_schedule.total_horizon == 10
    with pytest.raises(ValueError, match="total_updates must be positive"):
        apg.bind_schedule(total_updates=0)
