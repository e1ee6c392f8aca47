"""AHAC's contact value and the per-step duals that move its horizon."""

from __future__ import annotations

import math

import pytest
import torch

from pathgrad.algo.adaptive_horizon import DualHorizon, contact_values
from pathgrad.core.configclasses import LRSchedulerCfg

CONSTANT = LRSchedulerCfg()


def test_contact_value_floors_every_acceleration_magnitude_at_one_and_keeps_the_sign():
    forces = torch.tensor([[[2.0, 2.0, 2.0, 2.0, 2.0, 2.0]], [[0.0] * 6]])
    accelerations = torch.tensor([[[0.0, 0.5, -0.5, 4.0, -4.0, -1.0]], [[9.0] * 6]])
    # divided by 1, 1, -1, 4, -4, -1: ratios 2, 2, -2, 0.5, -0.5, -2
    expected = math.sqrt(4 + 4 + 4 + 0.25 + 0.25 + 4)
    values = contact_values(forces, accelerations)
    assert values.dtype == torch.float64
    assert values.tolist() == pytest.approx([expected, 0.0])
    with pytest.raises(ValueError, match=r"must both be \[num_envs, bodies, 6\]"):
        contact_values(forces, accelerations[:, :, :3])


def test_duals_move_the_horizon_and_are_padded_with_the_last_or_trimmed():
    duals = DualHorizon(8, 64, threshold=10.0, rate=0.1, schedule=CONSTANT)
    assert duals.horizon == 8.0 and duals.steps == 8 and duals.duals.tolist() == [0.0] * 8
    duals.update(torch.tensor([10.0] * 7 + [30.0]))  # only the last step is above C
    assert duals.duals.tolist() == pytest.approx([0.0] * 7 + [2.0])
    assert duals.horizon == pytest.approx(8.2) and duals.steps == 8
    duals.update(torch.full((8,), 30.0))  # sum 18: H = 8.2 + 1.8 = 10
    assert duals.horizon == pytest.approx(10.0) and duals.steps == 10
    assert duals.duals.tolist() == pytest.approx([2.0] * 7 + [4.0, 4.0, 4.0])  # padded
    duals.update(torch.full((10,), -40.0))  # duals -3 (x7), -1 (x3): H = 10 - 2.4 = 7.6 -> 8
    assert duals.horizon == 8.0 and duals.steps == 8
    assert duals.duals.tolist() == pytest.approx([-3.0] * 7 + [-1.0])  # trimmed
    duals.update(torch.full((8,), 1e6))  # far above C: clipped at max_horizon
    assert duals.horizon == 64.0 and duals.steps == 64 and duals.duals.numel() == 64
    before = duals.state_dict()
    duals.update(torch.tensor([float("nan")] * 64))  # no reading: nothing moves
    assert duals.state_dict()["duals"] == before["duals"]
    assert (
        duals.horizon == 64.0 and duals.schedule.step_count == before["schedule"]["step_count"] + 1
    )


def test_the_other_sign_shortens_the_horizon_under_contact():
    duals = DualHorizon(8, 64, 10.0, 0.1, CONSTANT, contact_lengthens=False)
    duals.horizon = 20.0
    duals.duals = torch.zeros(20, dtype=torch.float64)
    duals.update(torch.full((20,), 30.0))  # duals 2 each, sum 40: H = 20 - 4
    assert duals.horizon == pytest.approx(16.0) and duals.steps == 16


def test_the_rate_decays_linearly_over_the_bound_budget_and_resumes_exactly():
    schedule = LRSchedulerCfg(name="linear", kwargs={"end_factor": 0.02})
    duals = DualHorizon(8, 64, 500.0, 5e-4, schedule)
    duals.schedule.bind_budget(10)
    rates = []
    for _ in range(10):
        rates.append(duals.rate)
        duals.update(torch.full((duals.steps,), 900.0))
    assert rates[0] == pytest.approx(5e-4)
    assert rates[5] == pytest.approx(5e-4 * (1 - 0.98 * 0.5))
    assert duals.rate == pytest.approx(1e-5)
    copy = DualHorizon(8, 64, 500.0, 5e-4, schedule)
    copy.validate_state_dict(duals.state_dict(), "h")
    copy.load_state_dict(duals.state_dict())
    assert copy.state_dict() == duals.state_dict() and copy.rate == duals.rate
