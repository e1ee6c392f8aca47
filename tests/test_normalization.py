"""Running observation normalizer."""

from __future__ import annotations

import pytest
import torch

from pathgrad.normalization import RunningObservationNormalizer


def test_batched_merge_equals_statistics_of_all_data():
    torch.manual_seed(0)
    data = torch.randn(1000, 3, dtype=torch.float64) * torch.tensor([1.0, 5.0, 0.1]) + 3.0
    normalizer = RunningObservationNormalizer(3)
    for chunk in data.split([1, 7, 300, 0, 692]):
        normalizer.update(chunk)
    assert float(normalizer.count) == 1000
    assert torch.allclose(normalizer.mean, data.mean(0), atol=1e-12)
    assert torch.allclose(normalizer.var, data.var(0, unbiased=False), atol=1e-12)


def test_normalize_masks_clips_and_keeps_dtype():
    normalizer = RunningObservationNormalizer(3, normalize_mask=[True, False, True], clip=2.0)
    normalizer.update(torch.tensor([[0.0, 0.0, 0.0], [2.0, 10.0, 4.0]]))
    obs = torch.tensor([[1.0, 123.0, 100.0]], dtype=torch.float32)
    out = normalizer.normalize(obs)
    assert out.dtype == torch.float32
    assert out[0, 0].item() == pytest.approx(0.0, abs=1e-6)
    assert out[0, 1].item() == 123.0  # masked out: unchanged
    assert out[0, 2].item() == 2.0  # clipped


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
    with pytest.raises(ValueError, match=r"mean has shape \(2,\), expected \(3,\)"):
        RunningObservationNormalizer(3).load_state_dict(source.state_dict())


def test_constructor_validation():
    with pytest.raises(ValueError, match="normalize_mask has 2 entries, expected 3"):
        RunningObservationNormalizer(3, normalize_mask=[True, False])
    with pytest.raises(ValueError, match="dim must be positive"):
        RunningObservationNormalizer(0)
