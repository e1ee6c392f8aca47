"""pathgrad.models: the reference's ActorOnly, Policy base, MLP and builders, both conventions.

Every gradient path through ActorOnly (its tensor and TensorDict calls, the
adapter for TensorDict-only policies, APG, SHAC and SAPO windows) is checked
against central differences in float64.
"""

from __future__ import annotations

import math
import sys

import pytest
import torch
from torch import nn

from helpers import central_difference_gradient, window_gradient_error
from pathgrad.algo import (
    APG,
    SAPO,
    SHAC,
    APGCfg,
    SAPOCfg,
    SAPOEnsemble,
    SAPOEnsembleCfg,
    SHACCfg,
)
from pathgrad.collector import DifferentiableCollector
from pathgrad.envs import PointMass
from pathgrad.models import (
    MLP,
    ActorOnly,
    Policy,
    build_mlp_from_cfg,
    build_policy,
    get_policy_class,
    get_registered_policy_names,
    register_policy,
)
from pathgrad.normalization import RunningObservationNormalizer
from pathgrad.policies import (
    Policy as TensorPolicy,
)
from pathgrad.policies import (
    TensorDictPolicyAdapter,
    as_tensor_policy,
    calling_convention,
)

ACTOR_CFG = {
    "type": "mlp",
    "network_cfg": {
        "hidden_sizes": [8],
        "activation": "tanh",
        "last_activation": "tanh",
        "orthogonal_init": [1.414, 1.0],
    },
}


def actor_only(obs_dim: int = 6, action_dim: int = 2, log_std: float = -1.0) -> ActorOnly:
    torch.manual_seed(0)
    policy = build_policy(
        {"name": "actor_only", "initial_log_std": log_std, "actor": ACTOR_CFG},
        obs_dim,
        action_dim,
        "cpu",
    )
    return policy.double()


class TensorDictOnly(Policy):
    """A policy written against the reference's base alone (TensorDicts only)."""

    def __init__(self, inner: ActorOnly) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, tensordict, deterministic: bool = False):
        return self.inner.forward(tensordict, deterministic)

    def get_differentiable_action(self, tensordict, deterministic: bool = False):
        return self.inner.get_differentiable_action(tensordict, deterministic)

    def get_value(self, tensordict):
        return self.inner.get_value(tensordict)

    def evaluate_actions(self, tensordict):
        return self.inner.evaluate_actions(tensordict)


def test_reference_construction_and_tensordict_calls():
    tensordict = pytest.importorskip("tensordict")
    actor = nn.Linear(3, 2)
    policy = ActorOnly(3, 2, torch.device("cpu"), actor=actor)
    assert policy.actor is actor and policy.obs_dim == policy.actor_obs_dim == 3
    assert torch.equal(policy.log_std, torch.zeros(2))  # the reference starts at 0
    assert (policy.log_std_min, policy.log_std_max) == (-5.0, 2.0)
    assert isinstance(policy, Policy) and isinstance(policy, TensorPolicy)
    obs = torch.randn(4, 3)
    sampled = policy.get_action(tensordict.TensorDict({"obs": obs}, batch_size=[4]))
    assert set(sampled.keys()) == {"obs", "action", "sample_log_prob", "value"}
    assert not sampled["action"].requires_grad and not torch.equal(sampled["action"], actor(obs))
    mean = policy.get_action(tensordict.TensorDict({"obs": obs}, batch_size=[4]), True)
    torch.testing.assert_close(mean["action"], actor(obs).detach())
    written = policy.get_differentiable_action(tensordict.TensorDict({"obs": obs}, batch_size=[4]))
    assert set(written.keys()) == {"obs", "action", "sample_log_prob", "entropy", "value"}
    assert written["action"].requires_grad and torch.equal(written["value"], torch.zeros(4))
    evaluated = policy.evaluate_actions(written)
    assert isinstance(evaluated, tensordict.TensorDict) and evaluated.batch_size == (4,)
    normal = torch.distributions.Normal(actor(obs), torch.ones(4, 2))
    action = written["action"].detach()
    torch.testing.assert_close(evaluated["sample_log_prob"], normal.log_prob(action).sum(-1))
    torch.testing.assert_close(evaluated["entropy"], normal.entropy().sum(-1))
    torch.testing.assert_close(written["sample_log_prob"], normal.log_prob(action).sum(-1))


def test_tensor_convention_matches_torch_distributions_and_clamps_log_std():
    policy = actor_only(log_std=-7.0)  # below the clamp: the distribution uses -5
    obs = torch.randn(5, 6, dtype=torch.float64)
    torch.manual_seed(3)
    output = policy.get_differentiable_action(obs)
    assert set(output) == {"action", "mean", "log_prob", "entropy"}
    normal = torch.distributions.Normal(
        output["mean"], torch.full_like(output["mean"], math.exp(-5.0))
    )
    torch.testing.assert_close(output["log_prob"], normal.log_prob(output["action"]).sum(-1))
    torch.testing.assert_close(output["entropy"], normal.entropy().sum(-1))
    torch.testing.assert_close(policy.get_action(obs), output["mean"].detach())  # mean by default
    assert policy.forward(obs).shape == (5, 2) and not policy.get_action(obs).requires_grad
    with pytest.raises(ValueError, match="actor_obs_groups"):
        ActorOnly(6, 2, "cpu", nn.Linear(6, 2), actor_obs_groups=["policy"])


@pytest.mark.parametrize("log_std", [-1.0, 3.0])  # inside and above the clamp
def test_tensor_call_gradients_match_finite_differences(log_std):
    policy = actor_only(log_std=log_std)
    obs = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)

    def sample(observation, *parameters):
        torch.manual_seed(5)
        output = policy.get_differentiable_action(observation)
        return output["action"], output["log_prob"], output["entropy"]

    assert torch.autograd.gradcheck(sample, (obs, *policy.parameters()))
    if log_std > policy.log_std_max:  # clamped: no gradient, and none by differences either
        sample(obs)[0].sum().backward()
        assert torch.equal(policy.log_std.grad, torch.zeros(2))


def test_tensordict_call_gradients_match_finite_differences():
    tensordict = pytest.importorskip("tensordict")
    policy = actor_only()
    obs = torch.randn(3, 6, dtype=torch.float64, requires_grad=True)

    def sample(observation, *parameters):
        torch.manual_seed(5)
        written = policy.get_differentiable_action(
            tensordict.TensorDict({"obs": observation}, batch_size=[3])
        )
        return written["action"], written["sample_log_prob"], written["entropy"]

    assert torch.autograd.gradcheck(sample, (obs, *policy.parameters()))


def windows(policy: nn.Module):
    """``rollout(steps)`` of 3 float64 PointMass envs (3-step episodes), same noise each call."""
    env = PointMass(3, dtype="float64", max_episode_steps=3, seed=0)
    normalizer = RunningObservationNormalizer(6)
    torch.manual_seed(1)
    normalizer.update(torch.randn(64, 6, dtype=torch.float64))
    collector = DifferentiableCollector(env, policy, "cpu", observation_normalizer=normalizer)

    def rollout(steps: int):
        torch.manual_seed(11)
        collector.reset(seed=3)
        return collector.collect(steps)

    return normalizer, rollout


@pytest.mark.parametrize("convention", ["tensor", "tensordict"])
def test_apg_window_gradient_matches_finite_differences(convention):
    policy = actor_only()
    if convention == "tensordict":
        pytest.importorskip("tensordict")
        policy = TensorDictOnly(policy)
        assert isinstance(as_tensor_policy(policy), TensorDictPolicyAdapter)
    _, rollout = windows(policy)
    apg = APG(APGCfg(gamma=0.9, ent_coef=0.1), policy)  # the entropy's path too
    assert window_gradient_error(apg, lambda: rollout(5)) < 1e-6


def test_shac_and_sapo_actor_gradients_through_actor_only_match_finite_differences():
    policy = actor_only()
    normalizer, rollout = windows(policy)
    critic = {"critic_hidden_sizes": [8], "critic_activation": "tanh", "reward_scale": 0.5}
    shac = SHAC(SHACCfg(gamma=0.9, **critic), policy, observation_dim=6)
    shac.observation_transform = normalizer.normalize
    assert window_gradient_error(shac, lambda: rollout(5)) < 1e-6
    sapo = SAPO(SAPOCfg(gamma=0.9, init_temperature=0.3, **critic), policy, 6, 2)
    sapo.observation_transform = normalizer.normalize  # entropy's path: the soft reward
    assert window_gradient_error(sapo, lambda: rollout(5)) < 1e-6
    earlier = SAPOEnsemble(SAPOEnsembleCfg(gamma=0.9, init_temperature=0.3, **critic), policy, 6, 2)
    earlier.observation_transform = normalizer.normalize  # log_prob's path
    assert window_gradient_error(earlier, lambda: rollout(5)) < 1e-6


def test_adapter_outputs_and_conventions():
    pytest.importorskip("tensordict")
    inner = actor_only()
    policy = TensorDictOnly(inner)
    assert calling_convention(policy) == "tensordict"
    assert calling_convention(inner) == "both" and calling_convention(nn.Linear(1, 1)) == "tensor"

    class DuckTyped(nn.Module):  # the reference's own test policies subclass nothing
        def get_action(self, tensordict, deterministic=False):
            tensordict["action"] = tensordict["obs"] * 0
            return tensordict

    assert calling_convention(DuckTyped()) == "tensordict"
    adapted = as_tensor_policy(policy)
    obs = torch.randn(4, 6, dtype=torch.float64)
    torch.manual_seed(2)
    output = adapted.get_differentiable_action(obs)
    assert set(output) == {"action", "log_prob", "entropy", "value"}
    torch.manual_seed(2)
    torch.testing.assert_close(output["log_prob"], inner.get_differentiable_action(obs)["log_prob"])
    torch.testing.assert_close(adapted.get_action(obs), inner.get_action(obs))
    assert adapted.training is policy.training and list(adapted.parameters())
    assert as_tensor_policy(inner) is inner


def test_adapter_without_tensordict_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensordict", None)
    adapted = as_tensor_policy(TensorDictOnly(actor_only()))
    with pytest.raises(ImportError, match=r"pip install 'pathgrad\[tensordict\]'"):
        adapted.get_action(torch.zeros(1, 6, dtype=torch.float64))
    assert actor_only().get_action(torch.zeros(1, 6, dtype=torch.float64)).shape == (1, 2)


def test_mlp_builder_orthogonal_init_and_errors():
    torch.manual_seed(0)
    model = build_mlp_from_cfg(
        {"type": "MLP", "network_cfg": {"hidden_sizes": [16, 16], "activation": "tanh",
                                        "last_activation": "tanh", "use_layernorm": True,
                                        "orthogonal_init": [1.414, 1.414, 0.01]}},
        6, 2,
    )  # fmt: skip
    assert isinstance(model, MLP) and isinstance(model[-1], nn.Tanh)
    assert sum(isinstance(layer, nn.LayerNorm) for layer in model) == 2
    first, _, head = model.linear_layers  # orthogonal 16 x 6: orthonormal columns times the gain
    torch.testing.assert_close(first.weight.T @ first.weight, 1.414**2 * torch.eye(6))
    torch.testing.assert_close(head.weight @ head.weight.T, 0.01**2 * torch.eye(2))
    assert all(
        torch.equal(layer.bias, torch.zeros_like(layer.bias)) for layer in model.linear_layers
    )
    with pytest.raises(ValueError, match="Only 'mlp' type"):
        build_mlp_from_cfg({"type": "cnn", "network_cfg": {}}, 1, 1)
    with pytest.raises(ValueError, match="unknown keys \\['widths'\\]"):
        build_mlp_from_cfg({"type": "mlp", "network_cfg": {"widths": [4]}}, 1, 1)
    with pytest.raises(ValueError, match="one gain per linear layer"):
        network = {"hidden_sizes": [4], "orthogonal_init": [1.0]}
        build_mlp_from_cfg({"type": "mlp", "network_cfg": network}, 1, 1)
    with pytest.raises(ValueError, match="activation must be one of"):
        MLP(1, 1, [4], activation="swirl")


def test_mlp_takes_the_references_names_shapes_and_default_gain():
    torch.manual_seed(0)
    mine = MLP(in_dim=6, out_dim=2, hidden_sizes=[8], activation="swish")
    theirs = MLP(input_dim=6, output_dim=2, hidden_dims=[8], activation="swish")
    assert isinstance(theirs[1], nn.SiLU)
    theirs.load_state_dict(mine.state_dict())  # the same layers: checkpoints load either way
    x = torch.randn(5, 6)
    torch.testing.assert_close(theirs(x), mine(x))
    shaped = MLP(input_dim=6, output_dim=(3, 2), hidden_dims=[8])
    assert shaped.linear_layers[-1].out_features == 6 and shaped(x).shape == (5, 3, 2)
    square = MLP(4, 4, [4])
    square.init_orthogonal()  # the reference's default gain: 1.0
    for layer in square.linear_layers:
        torch.testing.assert_close(layer.weight @ layer.weight.T, torch.eye(4))
    square.init_orthogonal(scales=[2.0, 0.5])
    head = square.linear_layers[-1]
    torch.testing.assert_close(head.weight @ head.weight.T, 0.25 * torch.eye(4))
    square.init_orthogonal(gains=3.0)  # pathgrad's earlier keyword
    torch.testing.assert_close(head.weight @ head.weight.T, 9.0 * torch.eye(4))
    with pytest.raises(TypeError, match="MLP needs input_dim \\(or in_dim\\)"):
        MLP(output_dim=2, hidden_dims=[4])
    with pytest.raises(TypeError, match="MLP got output_dim=2 and out_dim=3: give one"):
        MLP(1, 2, [4], out_dim=3)
    with pytest.raises(ValueError, match="output_dim must be a positive int or shape"):
        MLP(1, (2, 0), [4])


def test_policy_builder_registry_and_initial_log_std():
    assert get_registered_policy_names() == ["actor_only"]
    assert get_policy_class("actor_only") is ActorOnly and get_policy_class("ppo") is None
    env = PointMass(2)
    policy = build_policy(
        {"name": "ACTOR_ONLY", "initial_log_std": -2.0, "actor": ACTOR_CFG},
        env.single_observation_space,
        env.single_action_space,
        "cpu",
    )
    assert (policy.obs_dim, policy.action_dim) == (6, 2)
    assert torch.equal(policy.log_std, torch.full((2,), -2.0))
    actor = nn.Linear(6, 2)
    assert build_policy({"name": "actor_only"}, 6, 2, "cpu", actor=actor).actor is actor
    with pytest.raises(ValueError, match="Policy 'actor_critic' is not registered"):
        build_policy({"name": "actor_critic"}, 6, 2, "cpu", actor=actor)
    with pytest.raises(ValueError, match="requires external 'actor' module"):
        build_policy({"name": "actor_only"}, 6, 2, "cpu")
    with pytest.raises(ValueError, match="obs_groups"):
        build_policy({"name": "actor_only", "obs_groups": {"actor": ["a"]}}, 6, 2, "cpu", actor)
    with pytest.raises(ValueError, match="already registered"):
        register_policy("actor_only", ActorOnly)


def test_base_policy_refuses_a_silent_non_reparameterized_gradient():
    class SampleOnly(Policy):
        def forward(self, tensordict, deterministic=False):
            return tensordict

        def get_value(self, tensordict):
            return tensordict

        def evaluate_actions(self, tensordict):
            return tensordict

    with pytest.raises(NotImplementedError, match="does not implement differentiable"):
        SampleOnly().get_differentiable_action({"obs": torch.zeros(1, 1)})


def test_finite_differences_see_the_clamp_too():
    policy = actor_only(log_std=2.5)  # above log_std_max

    def loss():
        torch.manual_seed(4)
        return policy.get_differentiable_action(torch.ones(2, 6, dtype=torch.float64))[
            "action"
        ].sum()

    loss().backward()
    numeric = central_difference_gradient(loss, [policy.log_std])
    assert torch.equal(numeric[0], torch.zeros(2)) and torch.equal(policy.log_std.grad, numeric[0])
