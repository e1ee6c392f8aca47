"""Running observation normalizer."""

from __future__ import annotations

import pytest
import torch

from pathgrad.normalization import RunningObservationNormalizer, apply_normalization


def test_batched_merge_equals_statistics_of_all_data():
    torch.manual_seed(0)
    data = torch.randn(1000, 3, dtype=torch.float64) * torch.tensor([1.0, 5.0, 0.1]) + 3.0
    normalizer = RunningObservationNormalizer(3, initial_count=0.0)
    for chunk in data.split([1, 7, 300, 0, 692]):
        normalizer.update(chunk)
    assert float(normalizer.count) == 1000
    assert torch.allclose(normalizer.mean, data.mean(0), atol=1e-12)
    assert torch.allclose(normalizer.var, data.var(0, unbiased=False), atol=1e-12)


def test_default_pseudo_count_matches_the_reference_statistics():
    # Mean 0 / variance 1 weighted by 1e-4 pseudo-observations, then the data.
    normalizer = RunningObservationNormalizer(3)
    assert float(normalizer.count) == pytest.approx(1e-4)
    first = torch.tensor([[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]])
    second = torch.tensor([[5.0, 6.0, 7.0]])
    normalizer.update(first)
    normalizer.update(second)
    data = torch.cat([first, second]).double()
    count = 3.0001
    mean = data.sum(0) / count
    var = (data.square().sum(0) + 1e-4 - count * mean.square()) / count
    assert float(normalizer.count) == pytest.approx(count)
    torch.testing.assert_close(normalizer.mean, mean)
    torch.testing.assert_close(normalizer.var, var)


def test_default_does_not_clip_and_clip_option_does():
    data = torch.tensor([[0.0], [2.0]])
    unclipped = RunningObservationNormalizer(1)
    clipped = RunningObservationNormalizer(1, clip=10.0, initial_count=0.0)
    for normalizer in (unclipped, clipped):
        normalizer.update(data)
    far = torch.tensor([[1000.0]])
    assert unclipped.clip is None
    assert unclipped.normalize(far).item() > 500.0
    assert clipped.normalize(far).item() == 10.0
    low, high = unclipped.constants(torch.float32)[2:]
    assert torch.isinf(low).all() and torch.isinf(high).all()


def test_normalize_masks_clips_and_keeps_dtype():
    normalizer = RunningObservationNormalizer(
        3, normalize_mask=[True, False, True], clip=2.0, initial_count=0.0
    )
    normalizer.update(torch.tensor([[0.0, 0.0, 0.0], [2.0, 10.0, 4.0]]))
    obs = torch.tensor([[1.0, 123.0, 100.0]], dtype=torch.float32)
    out = normalizer.normalize(obs)
    assert out.dtype == torch.float32
    assert out[0, 0].item() == pytest.approx(0.0, abs=1e-6)
    assert out[0, 1].item() == 123.0  # masked out: unchanged
    assert out[0, 2].item() == 2.0  # clipped
    assert torch.equal(apply_normalization(obs, normalizer.constants(obs.dtype)), out)


def test_non_finite_rows_are_skipped_and_counted():
    clean = torch.tensor([[1.0, 2.0], [3.0, 6.0]], dtype=torch.float64)
    reference = RunningObservationNormalizer(2)
    reference.update(clean)
    normalizer = RunningObservationNormalizer(2)
    poisoned = torch.tensor(
        [[1.0, 2.0], [float("nan"), 0.0], [3.0, 6.0], [0.0, float("inf")]], dtype=torch.float64
    )
    normalizer.update(poisoned)
    assert int(normalizer.skipped_rows) == 2
    assert float(normalizer.count) == float(reference.count)
    assert torch.equal(normalizer.mean, reference.mean)
    assert torch.equal(normalizer.var, reference.var)
    # A batch with no finite row changes nothing but the skip count.
    normalizer.update(torch.full((3, 2), float("-inf")))
    assert int(normalizer.skipped_rows) == 5
    assert torch.equal(normalizer.mean, reference.mean)
    assert torch.isfinite(normalizer.normalize(clean)).all()


def test_all_non_finite_first_batch_with_zero_count_keeps_initial_statistics():
    normalizer = RunningObservationNormalizer(2, initial_count=0.0)
    normalizer.update(torch.full((2, 2), float("nan")))
    assert float(normalizer.count) == 0.0
    assert torch.equal(normalizer.mean, torch.zeros(2, dtype=torch.float64))
    assert torch.equal(normalizer.var, torch.ones(2, dtype=torch.float64))


def test_normalize_gradient_matches_finite_differences():
    normalizer = RunningObservationNormalizer(2)
    normalizer.update(torch.randn(50, 2, dtype=torch.float64))
    obs = torch.randn(4, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(normalizer.normalize, (obs,))


def test_state_dict_round_trip_and_shape_check():
    source = RunningObservationNormalizer(2, normalize_mask=[True, False])
    source.update(torch.randn(10, 2))
    target = RunningObservationNormalizer(2)
    target.load_state_dict(source.state_dict())
    obs = torch.randn(3, 2)
    assert torch.equal(target.normalize(obs), source.normalize(obs))
    assert set(source.state_dict()) == {"mean", "var", "count", "normalize_mask", "epsilon", "clip"}
    with pytest.raises(ValueError, match=r"mean has shape \(2,\), expected \(3,\)"):
        RunningObservationNormalizer(3).load_state_dict(source.state_dict())
    state = source.state_dict()
    state["count"] = torch.tensor(-1.0, dtype=torch.float64)
    with pytest.raises(ValueError, match="count must be finite and >= 0"):
        target.load_state_dict(state)


def test_old_state_dict_with_clip_10_loads_and_keeps_clipping():
    # The format written before clipping became optional: clip=10.0, zero-based count.
    old = {
        "mean": torch.tensor([1.0, 2.0], dtype=torch.float64),
        "var": torch.tensor([0.25, 4.0], dtype=torch.float64),
        "count": torch.tensor(8.0, dtype=torch.float64),
        "normalize_mask": torch.tensor([True, True]),
        "epsilon": 1e-8,
        "clip": 10.0,
    }
    normalizer = RunningObservationNormalizer(2)
    normalizer.load_state_dict(old)
    assert normalizer.clip == 10.0
    assert float(normalizer.count) == 8.0
    out = normalizer.normalize(torch.tensor([[100.0, 2.0]], dtype=torch.float64))
    assert out.tolist() == [[10.0, 0.0]]
    assert normalizer.state_dict()["clip"] == 10.0


def test_reference_format_state_dict_loads_keeping_own_settings():
    normalizer = RunningObservationNormalizer(2, clip=5.0)
    normalizer.load_state_dict(
        {"mean": torch.tensor([1.0, 0.0]), "var": torch.tensor([4.0, 1.0]), "count": 3.0001}
    )
    assert normalizer.clip == 5.0 and normalizer.epsilon == 1e-8
    assert normalizer.mean.dtype == torch.float64
    assert float(normalizer.count) == pytest.approx(3.0001)
    assert normalizer.normalize_mask.all()


def test_constructor_validation():
    with pytest.raises(ValueError, match="normalize_mask has 2 entries, expected 3"):
        RunningObservationNormalizer(3, normalize_mask=[True, False])
    with pytest.raises(ValueError, match="dim must be positive"):
        RunningObservationNormalizer(0)
    with pytest.raises(ValueError, match="clip must be positive or None"):
        RunningObservationNormalizer(2, clip=0.0)
    with pytest.raises(ValueError, match="initial_count must be finite and >= 0"):
        RunningObservationNormalizer(2, initial_count=-1.0)
    assert RunningObservationNormalizer(4).observation_dim == 4
