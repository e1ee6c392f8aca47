"""Per-row adjoint clipping and its statistics, against hand computations."""

from __future__ import annotations

import pytest
import torch

from pathgrad.gradients import BatchedGradientNormStats, clip_batched_gradient_norm


def test_clip_matches_a_hand_computation_and_records_stats():
    gradient = torch.tensor([[3.0, 4.0], [0.3, 0.4], [float("nan"), 1.0], [0.0, 0.0]])
    stats = BatchedGradientNormStats("cpu")
    clipped = clip_batched_gradient_norm(gradient, 1.0, stats)
    expected = torch.tensor([[0.6, 0.8], [0.3, 0.4], [0.0, 0.0], [0.0, 0.0]])
    assert torch.allclose(clipped, expected)
    metrics = stats.metrics()
    assert metrics["action_adjoint_preclip_mean_norm"] == pytest.approx((5.0 + 0.5 + 0.0) / 3)
    assert metrics["action_adjoint_preclip_max_norm"] == pytest.approx(5.0)
    assert metrics["action_adjoint_clipped_fraction"] == pytest.approx(1 / 4)
    assert metrics["action_adjoint_nonfinite_fraction"] == pytest.approx(1 / 4)
    assert float(stats.rows) == 4 and float(stats.finite_rows) == 3


def test_clip_is_overflow_safe_in_float32_and_handles_higher_rank():
    gradient = torch.tensor([[3e37, 4e37]], dtype=torch.float32)
    clipped = clip_batched_gradient_norm(gradient, 2.0)
    assert torch.allclose(clipped, torch.tensor([[1.2, 1.6]]))
    cube = torch.ones(2, 2, 2)
    assert torch.allclose(clip_batched_gradient_norm(cube, 1.0), cube / 2)


def test_zero_limit_is_identity_and_errors():
    gradient = torch.tensor([[3.0, 4.0]])
    assert clip_batched_gradient_norm(gradient, 0.0) is gradient
    with pytest.raises(ValueError, match="max_norm cannot be negative"):
        clip_batched_gradient_norm(gradient, -1.0)
    with pytest.raises(ValueError, match="leading batch dimension"):
        clip_batched_gradient_norm(torch.ones(3), 1.0)


def test_merge_combines_accumulators():
    first, second = BatchedGradientNormStats("cpu"), BatchedGradientNormStats("cpu")
    clip_batched_gradient_norm(torch.tensor([[3.0, 4.0]]), 1.0, first)
    clip_batched_gradient_norm(torch.tensor([[0.0, 2.0], [float("inf"), 0.0]]), 1.0, second)
    merged = BatchedGradientNormStats.merge([first, second]).metrics()
    assert merged["action_adjoint_preclip_mean_norm"] == pytest.approx(3.5)
    assert merged["action_adjoint_preclip_max_norm"] == pytest.approx(5.0)
    assert merged["action_adjoint_clipped_fraction"] == pytest.approx(2 / 3)
    assert merged["action_adjoint_nonfinite_fraction"] == pytest.approx(1 / 3)


def test_statistics_without_clipping_leave_the_adjoint_unchanged():
    gradient = torch.tensor([[3.0, 4.0], [float("nan"), 0.0]])
    stats = BatchedGradientNormStats("cpu")
    assert clip_batched_gradient_norm(gradient, 0.0, stats) is gradient
    metrics = stats.metrics()
    assert metrics["action_adjoint_preclip_max_norm"] == pytest.approx(5.0)
    assert metrics["action_adjoint_clipped_fraction"] == 0.0
    assert metrics["action_adjoint_nonfinite_fraction"] == pytest.approx(0.5)
