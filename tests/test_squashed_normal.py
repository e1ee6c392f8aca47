"""SquashedNormalPolicy: the clamped state-dependent log-std, its densities, its gradient,
and the run layer's paths (train, eval, export) with it."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch.distributions import AffineTransform, Normal, TanhTransform, TransformedDistribution

from helpers import central_difference_gradient, relative_error, run_cli
from pathgrad.export import read_metadata
from pathgrad.policies import PolicyOutput
from pathgrad.squashed_normal import SquashedNormalPolicy


def small_policy(**kwargs) -> SquashedNormalPolicy:
    torch.manual_seed(0)
    return SquashedNormalPolicy(4, 3, hidden_sizes=(8, 6), **kwargs).double()


def test_the_networks_are_the_authors():
    policy = small_policy(init_log_std=-0.3)
    kinds = [type(layer).__name__ for layer in policy.trunk]
    assert kinds == ["Linear", "LayerNorm", "SiLU", "Linear", "LayerNorm", "SiLU"]
    weight = policy.trunk[3].weight  # orthogonal, gain 1: orthonormal rows (6 <= 8)
    assert torch.allclose(weight @ weight.T, torch.eye(6, dtype=weight.dtype), atol=1e-6)
    assert torch.equal(policy.mean_head.bias, torch.zeros(3, dtype=torch.float64))
    assert torch.allclose(policy.log_std_head.bias, torch.full((3,), -0.3).double())  # float32


@pytest.mark.parametrize(("bias", "bound"), [(10.0, 2.0), (-10.0, -5.0)])
def test_the_log_std_is_clamped_and_no_gradient_passes_the_clamp(bias, bound):
    policy = small_policy()
    with torch.no_grad():
        policy.log_std_head.weight.mul_(1e-3)
        policy.log_std_head.bias.fill_(bias)
    obs = torch.randn(5, 4, dtype=torch.float64)
    _, log_std = policy.distribution(obs)
    assert torch.equal(log_std, torch.full_like(log_std, bound))
    log_std.sum().backward()
    weight = policy.log_std_head.weight
    assert torch.equal(weight.grad, torch.zeros_like(weight))


def test_log_prob_and_entropy_match_torch_distributions_for_the_same_noises():
    policy = small_policy(action_low=[-2.0, -1.0, 0.0], action_high=[2.0, 1.0, 0.5])
    obs = torch.randn(5, 4, dtype=torch.float64)
    torch.manual_seed(3)
    outputs = policy.get_differentiable_action(obs)
    assert isinstance(outputs, PolicyOutput)
    torch.manual_seed(3)
    mean, log_std = policy.distribution(obs)
    noise, entropy_noise = torch.randn_like(mean), torch.randn_like(mean)
    base = Normal(mean, log_std.exp())
    squashed = TransformedDistribution(base, [TanhTransform()])
    affine = AffineTransform(policy.action_center.double(), policy.action_half_range.double())
    in_bounds = TransformedDistribution(base, [TanhTransform(), affine])
    action = in_bounds.transforms[-1](torch.tanh(mean + log_std.exp() * noise))
    assert torch.allclose(outputs["action"], action, atol=1e-12)
    expected_log_prob = in_bounds.log_prob(action).sum(-1)
    assert torch.allclose(outputs["log_prob"], expected_log_prob, atol=1e-9)
    other = torch.tanh(mean + log_std.exp() * entropy_noise)  # in the normalized box
    assert torch.allclose(outputs["entropy"], -squashed.log_prob(other).sum(-1), atol=1e-9)
    center, half = policy.action_center.double(), policy.action_half_range.double()
    assert torch.allclose(outputs["mean"], center + half * torch.tanh(mean), atol=1e-12)


def test_deterministic_actions_draw_no_noise_and_are_the_squashed_mean():
    policy = small_policy()
    obs = torch.randn(2, 4, dtype=torch.float64)
    state = torch.random.get_rng_state()
    action = policy.get_action(obs)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(action, torch.tanh(policy.distribution(obs)[0]))
    assert torch.equal(policy(obs), action)


def test_the_state_dependent_log_std_gradient_matches_finite_differences():
    policy = small_policy()
    obs = torch.randn(5, 4, dtype=torch.float64)

    def loss() -> torch.Tensor:
        torch.manual_seed(7)
        out = policy.get_differentiable_action(obs)
        return (out["action"].pow(2).sum() + out["entropy"].sum() + out["log_prob"].sum()).sum()

    parameters = [policy.log_std_head.weight, policy.log_std_head.bias, policy.trunk[0].weight]
    policy.zero_grad()
    loss().backward()
    analytic = [p.grad.clone() for p in parameters]
    assert all(float(g.abs().sum()) > 0 for g in analytic)
    assert relative_error(analytic, central_difference_gradient(loss, parameters)) < 1e-6


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="log_std_min must be below log_std_max"):
        SquashedNormalPolicy(2, 1, log_std_min=1.0, log_std_max=1.0)
    with pytest.raises(ValueError, match="finite action_low and action_high"):
        SquashedNormalPolicy(2, 1, action_low=-math.inf)
    with pytest.raises(ValueError, match="activation must be one of"):
        SquashedNormalPolicy(2, 1, activation="swish")


def test_train_eval_and_export_with_the_authors_sapo(tmp_path):
    args = [
        "policy.name=squashed_normal",
        "policy.hidden_sizes=[16]",
        "algorithm.name=sapo",
        "algorithm.cfg={}",
        "trainer.total_updates=2",
        "trainer.segment_length=8",
        "trainer.normalize_observations=true",
        "eval.frequency_steps=0",
        "eval.episodes=2",
        "env.num_envs=4",
        "--quiet",
    ]
    code, _, stderr = run_cli(["train", *args], cwd=tmp_path)
    assert code == 0, stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    code, stdout, stderr = run_cli(["eval", str(run_dir), "--episodes", "2", "--json"], tmp_path)
    assert code == 0, stderr
    assert json.loads(stdout)["episodes"] == 2
    code, stdout, stderr = run_cli(["export", str(run_dir), "-o", "policy.pt2"], tmp_path)
    assert code == 0, stderr
    exported = torch.export.load(str(tmp_path / "policy.pt2")).module()
    actions = exported(torch.randn(3, 6))
    assert actions.shape == (3, 2) and bool((actions.abs() <= 1.0).all())
    assert read_metadata(tmp_path / "policy.pt2")["observation_space"]["shape"] == [6]
