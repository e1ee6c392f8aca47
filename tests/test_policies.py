"""Gaussian MLP policy: contract, distributions, gradients."""

from __future__ import annotations

import pytest
import torch
from torch.distributions import Normal, TanhTransform, TransformedDistribution
from torch.distributions.transforms import AffineTransform

from pathgrad.envs import PointMass
from pathgrad.policies import GaussianMLPPolicy, PolicyOutput


def make_policy(**kwargs) -> GaussianMLPPolicy:
    torch.manual_seed(0)
    return GaussianMLPPolicy(3, 2, hidden_sizes=(8,), **kwargs).double()


def test_output_keys_shapes_and_deterministic_mean():
    policy = make_policy()
    obs = torch.randn(5, 3, dtype=torch.float64)
    output = policy.get_differentiable_action(obs)
    assert set(output) == {"action", "log_prob", "entropy", "mean"}
    assert output["action"].shape == (5, 2) and output["log_prob"].shape == (5,)
    assert output["entropy"].shape == (5,) and output["action"].requires_grad
    deterministic = policy.get_differentiable_action(obs, deterministic=True)
    assert torch.equal(deterministic["action"], deterministic["mean"])
    assert torch.equal(policy(obs), deterministic["mean"])


def test_log_prob_and_entropy_match_torch_distributions():
    policy = make_policy(init_log_std=-0.3)
    obs = torch.randn(4, 3, dtype=torch.float64)
    output = policy.get_differentiable_action(obs)
    normal = Normal(policy.mean_net(obs), torch.full((4, 2), -0.3, dtype=torch.float64).exp())
    assert torch.allclose(output["log_prob"], normal.log_prob(output["action"]).sum(-1))
    assert torch.allclose(output["entropy"], normal.entropy().sum(-1))


def test_squashed_actions_stay_in_bounds_with_the_change_of_variables():
    policy = make_policy(squash=True, action_low=[-2.0, 0.0], action_high=[2.0, 1.0])
    obs = 10 * torch.randn(64, 3, dtype=torch.float64)
    output = policy.get_differentiable_action(obs)
    low = torch.tensor([-2.0, 0.0], dtype=torch.float64)
    high = torch.tensor([2.0, 1.0], dtype=torch.float64)
    assert (output["action"] >= low).all() and (output["action"] <= high).all()
    base = Normal(policy.mean_net(obs), policy.log_std.exp().expand(64, 2))
    squashed = TransformedDistribution(
        base, [TanhTransform(), AffineTransform((high + low) / 2, (high - low) / 2)]
    )
    action = output["action"].clamp(low + 1e-9, high - 1e-9)
    expected = squashed.log_prob(action).sum(-1)
    assert torch.allclose(output["log_prob"], expected, atol=1e-5)


def test_get_action_has_no_graph_and_from_spaces_sizes_the_policy():
    env = PointMass(2)
    policy = GaussianMLPPolicy.from_spaces(env.single_observation_space, env.single_action_space)
    obs, _ = env.reset(seed=0)
    action = policy.get_action(obs)
    assert action.shape == (2, 2) and not action.requires_grad


def test_reparameterized_action_gradient_matches_finite_differences():
    policy = make_policy(squash=True)
    obs = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    noise_seed = 123

    def sample(observation):
        torch.manual_seed(noise_seed)
        output = policy.get_differentiable_action(observation)
        return output["action"], output["log_prob"]

    assert torch.autograd.gradcheck(sample, (obs,))


def test_constructor_validation():
    with pytest.raises(ValueError, match="activation must be one of"):
        GaussianMLPPolicy(2, 1, activation="swish")
    with pytest.raises(ValueError, match="hidden_sizes must be positive"):
        GaussianMLPPolicy(2, 1, hidden_sizes=(0,))
    with pytest.raises(ValueError, match="squash needs finite action_low"):
        GaussianMLPPolicy(2, 1, squash=True, action_low=float("-inf"))
    with pytest.raises(ValueError, match="action_high must exceed action_low"):
        GaussianMLPPolicy(2, 1, squash=True, action_low=1.0, action_high=1.0)


@pytest.mark.parametrize("squash", [False, True])
@pytest.mark.parametrize("deterministic", [False, True])
def test_lazy_outputs_equal_the_computed_ones_and_are_computed_only_when_read(
    squash, deterministic
):
    policy = make_policy(squash=squash)
    obs = torch.randn(4, 3, dtype=torch.float64)
    torch.manual_seed(5)
    lazy = policy.get_differentiable_action(obs, deterministic=deterministic)
    torch.manual_seed(5)
    eager = policy.action_from_noise(obs, policy.sample_noise(obs, deterministic))
    assert isinstance(lazy, PolicyOutput) and not isinstance(eager, PolicyOutput)
    assert set(lazy) == set(eager) and len(lazy) == 4 and "log_prob" in lazy
    deferred = {"log_prob", "entropy", *(["mean"] if squash else [])}
    assert set(lazy._deferred) == deferred  # nothing computed by `in`
    for key, value in eager.items():
        assert torch.equal(lazy[key], value), key
    assert not lazy._deferred
    lazy["log_prob"] = torch.zeros(4)
    assert torch.equal(lazy["log_prob"], torch.zeros(4))
    fresh = policy.get_differentiable_action(obs)
    assert set(fresh._values) == {"action", *([] if squash else ["mean"])}
    fresh["entropy"] = torch.ones(4)  # replaces a deferred entry without computing it
    assert torch.equal(fresh["entropy"], torch.ones(4)) and len(fresh) == 4
    del fresh["log_prob"]
    assert "log_prob" not in fresh and len(fresh) == 3
