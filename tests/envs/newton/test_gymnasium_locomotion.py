"""Gymnasium's v5 locomotion tasks on Newton keep v5's definitions (Gymnasium's own env,
on MuJoCo, is the oracle of the observation, the reward terms and the termination)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("newton")
pytest.importorskip("mujoco")
gymnasium = pytest.importorskip("gymnasium")

from pathgrad.envs.newton.robots.gymnasium_locomotion import (  # noqa: E402
    GymnasiumHalfCheetah,
    GymnasiumHopper,
    GymnasiumWalker2d,
)

TASKS = [(GymnasiumHopper, "Hopper-v5"), (GymnasiumWalker2d, "Walker2d-v5"),
         (GymnasiumHalfCheetah, "HalfCheetah-v5")]  # fmt: skip


@pytest.mark.parametrize(("task", "gym_id"), TASKS, ids=[t[1] for t in TASKS])
def test_observation_reward_and_termination_are_v5s(task, gym_id):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the file's unapplied options, the substeps chosen
        env = task(4, seed=0, capture=False)
    reference = gymnasium.make(gym_id).unwrapped
    assert env.observation_dim == reference.observation_space.shape[0]
    assert env.action_dim == reference.action_space.shape[0]
    np.testing.assert_allclose(env.single_action_space.low, reference.action_space.low)
    assert env.dt == pytest.approx(reference.dt)  # frame_skip x the file's timestep
    observation, _ = env.reset(seed=0)
    before = {key: value.clone() for key, value in env.state.items()}
    qpos, qvel = env.qpos_qvel(before)
    for row in range(4):  # the observation of a state, v5's
        reference.set_state(qpos[row].double().numpy(), qvel[row].double().numpy())
        np.testing.assert_allclose(observation[row].numpy(), reference._get_obs(), atol=1e-5)
    action = torch.tensor(np.random.default_rng(0).uniform(-1, 1, (4, env.action_dim)),
                          dtype=torch.float32)  # fmt: skip
    _, reward, terminated, truncated, _ = env.step(action)
    assert not bool((terminated | truncated).any())  # one step from the reset: all go on
    after_qpos, after_qvel = env.qpos_qvel(env.state)
    for row in range(4):  # the reward of the transition: v5's terms of its x velocity
        x_velocity = float(after_qpos[row, 0] - qpos[row, 0]) / env.dt
        reference.set_state(after_qpos[row].double().numpy(), after_qvel[row].double().numpy())
        expected, _ = reference._get_rew(x_velocity, action[row].double().numpy())
        assert float(reward[row]) == pytest.approx(expected, rel=1e-4, abs=1e-4)


def test_termination_follows_v5s_healthy_ranges():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = GymnasiumHopper(3, seed=0, capture=False)
    env.reset(seed=0)
    qpos, qvel = env.qpos_qvel(env.state)
    qpos = qpos.clone()
    qpos[1, 1] = 0.65  # below v5's healthy height 0.7
    qpos[2, 2] = 0.25  # the torso tilted past 0.2
    joint_q, joint_qd = env.joint_state_from_mujoco(qpos, qvel)
    assert env._terminated({"joint_q": joint_q, "joint_qd": joint_qd}).tolist() == [
        False, True, True
    ]  # fmt: skip
    cheetah_rows = torch.zeros(2, dtype=torch.bool)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cheetah = GymnasiumHalfCheetah(2, seed=0, capture=False)
    assert not cheetah._can_terminate
    assert torch.equal(cheetah._terminated(cheetah.state), cheetah_rows)
