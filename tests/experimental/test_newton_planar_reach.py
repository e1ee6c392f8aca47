"""pathgrad.experimental.newton: the reference's planar reach on Newton's forward kinematics.

Spaces and observation layout, the clamps, the reward against a float64 twin of the
arm's closed-form kinematics, termination, truncation and auto-reset, the env
contract (``check_env``), the training function and the shipped config.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

pytest.importorskip("newton", reason="the Newton backend needs pathgrad[newton]")

import pathgrad  # noqa: E402
from pathgrad.env import DifferentiableVecEnv, build_learning_env  # noqa: E402
from pathgrad.experimental.newton import NewtonPlanarReachEnv, NewtonPlanarReachEnvCfg  # noqa: E402
from pathgrad.experimental.newton.train_planar_reach import (  # noqa: E402
    NewtonPlanarReachTrainingCfg,
    train_planar_reach,
)
from pathgrad.runs.builtin_configs import CONFIG_FOLDER  # noqa: E402
from pathgrad.runs.config import load_config  # noqa: E402
from pathgrad.testing import check_env  # noqa: E402

pytestmark = pytest.mark.xdist_group("newton")  # one worker compiles the Warp kernels


def make_env(**settings) -> NewtonPlanarReachEnv:
    return NewtonPlanarReachEnv(NewtonPlanarReachEnvCfg(**{"num_envs": 3, **settings}))


def end_xy(cfg: NewtonPlanarReachEnvCfg, joint_q: torch.Tensor) -> torch.Tensor:
    """The arm's closed-form forward kinematics (hanging along -y at zero angles)."""
    first, both = joint_q[..., 0], joint_q.sum(-1)
    x = cfg.first_link_length * torch.sin(first) + cfg.second_link_length * torch.sin(both)
    y = -cfg.first_link_length * torch.cos(first) - cfg.second_link_length * torch.cos(both)
    return torch.stack([x, y], dim=-1)


def twin_reward(cfg, joint_q, target, action):
    """The step's reward from its inputs, in whatever dtype they come (the float64 twin)."""
    limit = cfg.joint_limit
    next_q = (joint_q + action.clamp(-1.0, 1.0) * cfg.action_scale).clamp(-limit, limit)
    return -(end_xy(cfg, next_q) - target).square().sum(-1), next_q


def test_config_defaults_are_the_references():
    assert dataclasses.asdict(NewtonPlanarReachEnvCfg()) == {
        "num_envs": 4, "device": "cpu", "action_scale": 0.2, "joint_limit": math.pi,
        "max_episode_steps": 32, "success_threshold": 0.05, "first_link_length": 1.0,
        "second_link_length": 0.8, "initial_joint_scale": 0.5, "target_joint_scale": 1.0,
    }  # fmt: skip
    assert dataclasses.asdict(NewtonPlanarReachTrainingCfg()) == {
        "device": "cpu", "seed": 29, "eval_seed": 10029, "eval_batches": 4, "num_envs": 128,
        "num_updates": 600, "horizon": 32, "segment_length": None, "learning_rate": 3e-3,
        "action_scale": 0.25, "success_threshold": 0.05, "initial_joint_scale": 0.5,
        "target_joint_scale": 1.0,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: make_env(num_envs=0), "num_envs must be positive."),
        (lambda: make_env(max_episode_steps=0), "max_episode_steps must be positive."),
        (lambda: make_env(joint_limit=-1.0), "joint_limit must be positive and finite, got -1.0."),
        (lambda: train_planar_reach(NewtonPlanarReachTrainingCfg(eval_batches=0)),
         "eval_batches must be positive."),
        (lambda: train_planar_reach(NewtonPlanarReachTrainingCfg(num_updates=-1)),
         "num_updates cannot be negative."),
        (lambda: train_planar_reach(NewtonPlanarReachTrainingCfg(horizon=0)),
         "horizon must be positive."),
    ],
)  # fmt: skip
def test_invalid_settings_are_refused_naming_the_field(build, message):
    with pytest.raises(ValueError, match=f"^{message}$".replace(".", r"\.")):
        build()


def test_spaces_and_the_first_observation():
    env = make_env()
    observation, info = env.reset(seed=3)
    assert isinstance(env, DifferentiableVecEnv) and info == {}
    assert env.single_observation_space.shape == (8,)
    assert env.single_observation_space.dtype == np.float32
    action_space = env.single_action_space
    assert action_space.shape == (2,) and action_space.dtype == np.float32
    assert (action_space.low == -1.0).all() and (action_space.high == 1.0).all()
    assert env.max_episode_steps == 32 and env.device == torch.device("cpu")
    assert observation.shape == (3, 8) and observation.dtype == torch.float32
    joint_q, tip, target, last_action = observation.split(2, dim=-1)
    assert joint_q.abs().max() <= 0.5 * math.pi  # initial_joint_scale * joint_limit
    assert torch.allclose(tip, end_xy(env.cfg, joint_q), atol=1e-5)  # Newton's FK
    assert (target.norm(dim=-1) <= 1.8 + 1e-6).all()  # reachable targets
    assert torch.equal(last_action, torch.zeros(3, 2))
    again, _ = env.reset(seed=3)
    assert torch.equal(again, observation)
    with pytest.raises(ValueError, match=r"^Expected action shape \(3, 2\), got \(3, 3\)\.$"):
        env.step(torch.zeros(3, 3))


def test_actions_are_clamped_to_one_and_angles_to_the_joint_limit():
    env = make_env(joint_limit=0.3, action_scale=1.0, success_threshold=0.0)
    env.reset(seed=1)
    action = torch.tensor([[5.0, -5.0], [0.05, -0.05], [-2.0, 0.0]], requires_grad=True)
    observation, reward, *_ = env.step(action)
    joint_q, _, _, last_action = observation.split(2, dim=-1)
    assert torch.equal(last_action, action.detach().clamp(-1.0, 1.0))
    assert torch.equal(joint_q[0], torch.tensor([0.3, -0.3]))  # the limits
    assert joint_q[1].abs().max() < 0.3 and joint_q[2, 0] == -0.3
    (gradient,) = torch.autograd.grad(reward.sum(), action)
    assert torch.equal(gradient[0], torch.zeros(2)) and gradient[2, 0] == 0.0  # clamped
    assert (gradient[1] != 0.0).all()


def test_reward_is_minus_the_squared_distance_and_its_gradient_matches_float64():
    env = make_env(success_threshold=0.0)
    start, _ = env.reset(seed=7)
    action = torch.tensor([[0.1, -0.2], [0.05, 0.15], [-0.7, 0.4]], requires_grad=True)
    observation, reward, terminated, truncated, info = env.step(action)
    joint_q, tip, target, _ = observation.split(2, dim=-1)
    assert not (terminated | truncated).any()
    assert torch.allclose(reward, -(tip - target).square().sum(-1), atol=1e-6)
    assert torch.allclose(info["distance"], (tip - target).norm(dim=-1), atol=1e-6)
    assert torch.equal(info["final_observation"], observation)

    state = start.double()
    twin_action = action.detach().double().requires_grad_()
    expected, next_q = twin_reward(env.cfg, state[:, :2], state[:, 4:6], twin_action)
    assert torch.allclose(joint_q.double(), next_q, atol=1e-6)
    assert torch.allclose(reward.double(), expected, atol=1e-5)
    (gradient,) = torch.autograd.grad(reward.sum(), action)
    (twin,) = torch.autograd.grad(expected.sum(), twin_action)
    epsilon, central = 1e-6, torch.zeros_like(twin)
    for index in np.ndindex(*twin.shape):  # the twin's own gradient, by central differences
        step = torch.zeros_like(twin)
        step[index] = epsilon
        up = twin_reward(env.cfg, state[:, :2], state[:, 4:6], twin_action.detach() + step)[0]
        down = twin_reward(env.cfg, state[:, :2], state[:, 4:6], twin_action.detach() - step)[0]
        central[index] = (up - down).sum() / (2.0 * epsilon)
    assert torch.allclose(twin, central, atol=1e-6)
    assert torch.allclose(gradient.double(), twin, rtol=1e-4, atol=1e-4)


def test_gradients_flow_through_the_carried_joints_until_detach_state():
    env = make_env(success_threshold=0.0)
    start, _ = env.reset(seed=11)
    first = torch.full((3, 2), 0.3, requires_grad=True)
    second = torch.full((3, 2), -0.2, requires_grad=True)
    env.step(first)
    _, reward, _, _, _ = env.step(second)
    gradient = torch.autograd.grad(reward.sum(), (first, second))

    state = start.double()
    actions = [a.detach().double().requires_grad_() for a in (first, second)]
    _, joint_q = twin_reward(env.cfg, state[:, :2], state[:, 4:6], actions[0])
    expected, _ = twin_reward(env.cfg, joint_q, state[:, 4:6], actions[1])
    twin = torch.autograd.grad(expected.sum(), actions)
    for got, want in zip(gradient, twin, strict=True):
        assert torch.allclose(got.double(), want, rtol=1e-4, atol=1e-4)

    env.detach_state()
    _, later, _, _, _ = env.step(torch.zeros(3, 2, requires_grad=True))
    assert torch.autograd.grad(later.sum(), first, allow_unused=True) == (None,)


def test_success_terminates_and_the_row_starts_a_new_episode():
    env = make_env(num_envs=2, success_threshold=float("inf"))
    env.reset(seed=5)
    observation, reward, terminated, truncated, info = env.step(torch.ones(2, 2))
    assert terminated.all() and not truncated.any()
    assert torch.equal(info["success"], terminated) and info["metrics"]["success"].all()
    assert torch.equal(observation, env.detach_state())  # the next episode's first
    assert torch.equal(observation[:, 6:8], torch.zeros(2, 2))
    assert torch.equal(info["final_observation"][:, 6:8], torch.ones(2, 2))  # before the reset
    finished = info["final_observation"]
    assert torch.allclose(reward, -(finished[:, 2:4] - finished[:, 4:6]).square().sum(-1))


def test_episodes_truncate_at_max_episode_steps_and_reset():
    env = make_env(num_envs=2, max_episode_steps=3, success_threshold=0.0)
    env.reset(seed=2)
    flags = []
    for _ in range(7):
        observation, _, terminated, truncated, info = env.step(torch.full((2, 2), 0.5))
        assert not terminated.any() and truncated.any() == truncated.all()
        flags.append(bool(truncated.all()))
        if truncated.any():
            assert torch.equal(observation[:, 6:8], torch.zeros(2, 2))  # a fresh episode
            assert not torch.equal(info["final_observation"], observation)
    assert flags == [False, False, True, False, False, True, False]


def test_the_registered_env_passes_check_env():
    env = build_learning_env(
        "NewtonPlanarReach", num_envs=2, device="cpu", seed=0, max_episode_steps=8
    )
    assert isinstance(env, NewtonPlanarReachEnv) and env.max_episode_steps == 8
    result = check_env(env, seed=0)
    assert result.passed, str(result)
    assert not result["state_dict"].skipped and not result["gradients"].skipped


def test_the_training_function_trains_and_reports_its_result():
    result = train_planar_reach(
        NewtonPlanarReachTrainingCfg(num_envs=16, horizon=8, num_updates=8, eval_batches=1)
    )
    assert result["num_updates"] == 8 and result["global_step"] == 8 * 8 * 16
    assert result["segment_length"] == 8 and result["eval_samples"] == 16
    assert result["skipped_updates"] == 0
    assert result["final_return"] > result["initial_return"]
    assert 0.0 <= result["final_success_rate"] <= 1.0
    assert result["final_mean_min_distance"] <= result["final_distance"]


def test_the_shipped_config_trains_the_references_settings_with_a_final_evaluation(tmp_path):
    path = CONFIG_FOLDER / "newton_planar_reach.yaml"
    config = load_config(path)
    defaults = NewtonPlanarReachTrainingCfg()
    assert config.env.name == "NewtonPlanarReach" and config.env.num_envs == defaults.num_envs
    assert config.env.cfg["action_scale"] == defaults.action_scale
    assert config.env.cfg["max_episode_steps"] == config.trainer.segment_length == 32
    assert config.trainer.seed == defaults.seed and config.eval.seed == defaults.eval_seed
    assert config.eval.frequency_steps > 0 and config.eval.final  # else no evaluation env
    quick = ["trainer.total_updates=2", "env.num_envs=8", "eval.num_envs=8", "eval.episodes=8",
             "logging.tensorboard=false", f"logging.runs_dir={tmp_path}"]  # fmt: skip
    result = pathgrad.train(path, quick)
    evaluation = result.summary["last_eval_metrics"]
    assert result.summary["num_updates"] == 2
    assert evaluation["global_step"] == 2 * 32 * 8 and math.isfinite(evaluation["eval/avg_reward"])
