"""Exported policies: torch.export (.pt2) and ONNX, loadable without pathgrad."""

from __future__ import annotations

import warnings

import pytest
import torch

from pathgrad.export import export_policy, read_metadata
from pathgrad.normalization import RunningObservationNormalizer
from pathgrad.policies import GaussianMLPPolicy


def run_exported(path, observations: torch.Tensor) -> torch.Tensor:
    if path.suffix == ".pt2":
        return torch.export.load(str(path)).module()(observations)
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path))
    return torch.from_numpy(session.run(None, {"observation": observations.numpy()})[0])


@pytest.mark.parametrize("name", ["policy.pt2", "policy.onnx"])
def test_an_unsquashed_policy_is_bounded_to_the_action_space(tmp_path, name):
    torch.manual_seed(0)
    policy = GaussianMLPPolicy(3, 2, hidden_sizes=(8,))
    with torch.no_grad():
        policy.mean_net[-1].bias.copy_(torch.tensor([5.0, -5.0]))  # far outside the bounds
    normalizer = RunningObservationNormalizer(3)
    normalizer.update(torch.randn(50, 3) * 4 + 2)
    bounds = (torch.tensor([-1.0, -0.5]), torch.tensor([1.0, 0.5]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecation warnings on the way
        export_policy(policy, normalizer, torch.randn(1, 3), tmp_path / name, bounds, {"k": 1})
    observations = torch.randn(7, 3)
    actions = run_exported(tmp_path / name, observations)
    assert torch.equal(actions, torch.tensor([[1.0, -0.5]]).expand(7, 2))
    with torch.no_grad():
        policy.mean_net[-1].bias.zero_()
    export_policy(policy, normalizer, torch.randn(4, 3), tmp_path / name, bounds)
    expected = policy.get_action(normalizer.normalize(observations)).clamp(
        torch.tensor([-1.0, -0.5]), torch.tensor([1.0, 0.5])
    )
    assert torch.allclose(run_exported(tmp_path / name, observations), expected, atol=1e-6)
    assert read_metadata(tmp_path / name) == {}


def test_unknown_formats_are_refused_before_writing(tmp_path):
    policy = GaussianMLPPolicy(3, 2, hidden_sizes=(8,))
    with pytest.raises(ValueError, match=r"give a \.pt2 \(torch.export\) or \.onnx file name"):
        export_policy(policy, None, torch.randn(2, 3), tmp_path / "policy.pt")
    assert list(tmp_path.iterdir()) == []


def test_a_file_without_metadata_is_named(tmp_path):
    import onnx

    path = tmp_path / "other.onnx"
    onnx.save(onnx.helper.make_model(onnx.helper.make_graph([], "g", [], [])), str(path))
    with pytest.raises(ValueError, match="carries no pathgrad metadata"):
        read_metadata(path)
