"""The env contract, checked once for every built-in env."""

from __future__ import annotations

import re

import pytest
import torch

import pathgrad
from pathgrad.envs import (
    CartPoleSwingUp,
    MountainCarContinuous,
    Pendulum,
    PointMass,
    Quadrotor,
    Reacher,
)

ENVS = [CartPoleSwingUp, MountainCarContinuous, Pendulum, PointMass, Quadrotor, Reacher]


def actions(env, scale: float, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    shape = (env.num_envs, env.action_dim)
    return (scale * torch.rand(shape, generator=generator, dtype=torch.float64) - scale / 2).to(
        env.dtype
    )


@pytest.mark.parametrize("env_type", ENVS)
def test_registered_with_spaces_and_dtypes(env_type):
    env = pathgrad.build_learning_env(env_type.__name__, num_envs=3, device="cpu")
    assert isinstance(env, env_type) and isinstance(env, pathgrad.DifferentiableVecEnv)
    obs, info = env.reset(seed=0)
    assert obs.shape == (3, env.observation_dim) == (3, env.single_observation_space.shape[0])
    assert env.single_action_space.shape == (env.action_dim,) and obs.dtype == torch.float32
    assert env_type(2, dtype="float64").reset(seed=0)[0].dtype == torch.float64


@pytest.mark.parametrize("env_type", ENVS)
def test_seeded_reset_is_reproducible_and_seeds_differ(env_type):
    env = env_type(4, seed=1)
    first, _ = env.reset(seed=7)
    again, _ = env_type(4, seed=2).reset(seed=7)
    other, _ = env.reset(seed=8)
    assert torch.equal(first, again) and not torch.equal(first, other)


@pytest.mark.parametrize("env_type", ENVS)
def test_auto_reset_returns_finishing_reward_and_next_episode_observation(env_type):
    env = env_type(3, dtype="float64", max_episode_steps=2, seed=0)
    env.reset(seed=3)
    _, _, _, truncated, _ = env.step(actions(env, 0.2))
    assert not truncated.any()
    before = {key: value.clone() for key, value in env.state.items()}
    elapsed = env.elapsed_steps.clone()
    action = actions(env, 0.2, seed=1).requires_grad_()
    obs, reward, terminated, truncated, info = env.step(action)
    assert truncated.all()
    env.elapsed_steps = elapsed  # the hooks below may read the step counter
    stepped = env._dynamics(before, action)
    assert torch.allclose(reward, env._reward(before, action, stepped))
    assert torch.allclose(info["final_observation"], env._observe(stepped))
    assert set(info["metrics"]) and all(v.shape == (3,) for v in info["metrics"].values())
    assert torch.allclose(obs, env._observe(env.state))
    assert not torch.allclose(obs, info["final_observation"])
    # The finishing step's final observation depends on the action; the next episode's does not.
    (grad_final,) = torch.autograd.grad(info["final_observation"].sum(), action, retain_graph=True)
    (grad_next,) = torch.autograd.grad(obs.sum(), action, allow_unused=True)
    assert grad_final.abs().sum() > 0
    assert grad_next is None or torch.equal(grad_next, torch.zeros_like(action))


@pytest.mark.parametrize("env_type", ENVS)
def test_detach_state_cuts_the_graph_and_keeps_the_episode(env_type):
    env = env_type(2, seed=0)
    env.reset(seed=0)
    obs, *_ = env.step(actions(env, 0.5).requires_grad_())
    elapsed = env.elapsed_steps.clone()
    detached = env.detach_state()
    assert obs.requires_grad and not detached.requires_grad
    assert torch.equal(detached, obs.detach()) and torch.equal(env.elapsed_steps, elapsed)


@pytest.mark.parametrize("env_type", ENVS)
def test_state_dict_round_trip_continues_identically(env_type):
    env = env_type(4, max_episode_steps=3, seed=0)
    env.reset(seed=5)
    env.step(actions(env, 0.5))
    state = env.state_dict()
    sequence = [actions(env, 1.0, seed=i) for i in range(5)]  # crosses an auto-reset
    expected = [env.step(action) for action in sequence]
    restored = env_type(4, max_episode_steps=3, seed=99)
    restored.load_state_dict(state)
    for action, reference in zip(sequence, expected, strict=True):
        result = restored.step(action)
        for ours, theirs in zip(result[:4], reference[:4], strict=True):
            assert torch.equal(ours, theirs)
    with pytest.raises(ValueError, match=r"env state entry '\w+' has shape"):
        env_type(2).load_state_dict(state)


@pytest.mark.parametrize("env_type", ENVS)
def test_step_rejects_a_wrong_action_shape(env_type):
    env = env_type(2)
    with pytest.raises(ValueError, match=r"action must have shape \(2, "):
        env.step(torch.zeros(3, env.action_dim))


@pytest.mark.parametrize("wrong", ["float", "shape"])
def test_a_terminated_hook_that_is_not_one_bool_per_row_is_named(wrong):
    from pathgrad.envs import PointMass

    class Ends(PointMass):
        def _terminated(self, state):
            ends = state["position"].norm(dim=-1) > 0.0
            return ends.float() if wrong == "float" else ends[:, None]

    env = Ends(3, seed=0)
    env.reset(seed=0)
    got = "torch.float32 of shape (3,)" if wrong == "float" else "torch.bool of shape (3, 1)"
    expected = f"Ends._terminated must return a bool tensor of shape (3,), got {got}."
    with pytest.raises(TypeError, match=re.escape(expected)):
        env.step(torch.zeros(3, env.action_dim))


def test_the_reward_path_check_fails_only_when_no_reward_has_a_gradient():
    from pathgrad.core.env_contract import EnvContractError, check_reward_path

    action = torch.zeros(3, 1, requires_grad=True)
    connected, detached = (action * 2).sum(-1), torch.zeros(3)
    assert check_reward_path(object(), [action, action], [detached, connected]) is True
    with pytest.raises(EnvContractError, match="object.step.. broke the env contract: reward: no "
                       "reward of the first 2 steps has a gradient path"):  # fmt: skip
        check_reward_path(object(), [action, action], [detached, detached])
    assert check_reward_path(object(), [action.detach()], [detached]) is False  # nothing to ask
    with torch.no_grad():
        assert check_reward_path(object(), [action], [detached]) is False


@pytest.mark.parametrize("width", [2.0, "2", 0, True, None])
def test_an_observation_dim_that_is_not_a_positive_integer_is_named(width):
    from pathgrad.core.env_contract import EnvContractError
    from pathgrad.envs import PointMass

    Wide = type("Wide", (PointMass,), {"observation_dim": width})
    with pytest.raises(EnvContractError) as raised:
        Wide(2, seed=0)
    assert str(raised.value) == (
        "Wide.observation_dim must be an integer of at least 1 (the width of one observation), "
        f"got {width!r}."
    )
