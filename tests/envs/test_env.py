"""Env contracts, rollout specs and the registry."""

from __future__ import annotations

import pytest
import torch

from helpers import ScalarEnv, ScheduledScalarEnv
from pathgrad.env import (
    DifferentiableRolloutSpec,
    DifferentiableVecEnv,
    ScheduledDifferentiableVecEnv,
    build_learning_env,
    get_registered_learning_env_names,
    register_learning_env,
)
from pathgrad.envs import PointMass


def test_protocols_recognise_contract_implementations():
    assert isinstance(ScalarEnv([0.0]), DifferentiableVecEnv)
    assert not isinstance(ScalarEnv([0.0]), ScheduledDifferentiableVecEnv)
    assert isinstance(ScheduledScalarEnv([0.0]), ScheduledDifferentiableVecEnv)
    assert isinstance(PointMass(2), DifferentiableVecEnv)


def test_rollout_spec_defaults_and_validation():
    spec = DifferentiableRolloutSpec(num_steps=4)
    assert spec.objective_scale == 1.0 and dict(spec.metadata) == {}
    with pytest.raises(ValueError, match="num_steps must be positive"):
        DifferentiableRolloutSpec(num_steps=0)


def test_registry_builds_by_case_insensitive_name():
    names = get_registered_learning_env_names()
    assert {"PointMass", "Pendulum", "MountainCarContinuous", "CartPoleSwingUp"} <= set(names)
    assert {"Reacher", "Quadrotor"} <= set(names) and names == sorted(names, key=str.lower)
    env = build_learning_env("POINTMASS", num_envs=3, device="cpu", max_episode_steps=7)
    assert isinstance(env, PointMass)
    assert env.num_envs == 3 and env.max_episode_steps == 7
    assert env.device == torch.device("cpu")


def test_registry_rejects_unknown_names_and_duplicates():
    with pytest.raises(
        ValueError, match="Learning environment 'Nope' is not registered. Available: "
    ):
        build_learning_env("Nope", num_envs=1, device="cpu")

    def factory(num_envs, device, **cfg):
        return ScalarEnv([0.0] * num_envs)

    def other_factory(num_envs, device, **cfg):
        return ScalarEnv([1.0] * num_envs)

    register_learning_env("TestScalarEnv", factory)
    try:
        register_learning_env("testscalarenv", factory)  # the same factory again is fine
        with pytest.raises(ValueError, match="'TestScalarEnv' is already registered"):
            register_learning_env("TestScalarEnv", other_factory)
        register_learning_env("TestScalarEnv", override=True)(other_factory)
        env = build_learning_env("TestScalarEnv", num_envs=2, device="cpu")
        assert env.x0.flatten().tolist() == [1.0, 1.0]
    finally:
        from pathgrad.core import env_registry

        env_registry._REGISTRY.pop("testscalarenv")
        env_registry._DISPLAY_NAMES.pop("testscalarenv")


def test_step_info_is_computed_when_read_and_equals_the_transition_extras():
    from pathgrad.envs.base import StepInfo

    env = PointMass(3, dtype="float64", max_episode_steps=2, seed=0)
    twin = PointMass(3, dtype="float64", max_episode_steps=2, seed=0)
    action = torch.full((3, 2), 0.5, dtype=torch.float64, requires_grad=True)
    for _ in range(2):  # the second step resets every row
        *_, info = env.step(action)
        expected = twin.transition(twin.state, action, twin.draw_reset_states(), twin.elapsed_steps)
        twin.state, twin.elapsed_steps = expected[6], expected[7]
        assert isinstance(info, StepInfo) and not info._values
        assert "metrics" in info and set(info) == {"final_observation", "metrics"}
        assert not info._values  # membership and keys compute nothing
        assert torch.equal(info["final_observation"], expected[4])
        assert info["metrics"].keys() == expected[5].keys()
        for key, value in expected[5].items():
            assert torch.equal(info["metrics"][key], value), key
        assert dict(info).keys() == {"final_observation", "metrics"}
        with pytest.raises(KeyError):
            info["other"]
    (gradient,) = torch.autograd.grad(info["final_observation"].sum(), action)
    assert gradient.abs().sum() > 0  # the lazily computed entry keeps the graph
