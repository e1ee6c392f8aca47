"""Gymnasium's v5 Ant, Humanoid and HumanoidStandup on Newton keep v5's definitions
(Gymnasium's own env, on MuJoCo, is the oracle of the observation, cinert, cvel and
qfrc_actuator included, the reward terms and the termination)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("newton")
pytest.importorskip("mujoco")
gymnasium = pytest.importorskip("gymnasium")

from gymnasium.envs.mujoco.humanoid_v5 import mass_center  # noqa: E402

from pathgrad.envs.newton.robots.gymnasium_floating_base import (  # noqa: E402
    GymnasiumAnt,
    GymnasiumHumanoid,
    GymnasiumHumanoidStandup,
)

TASKS = [(GymnasiumAnt, "Ant-v5", 27), (GymnasiumHumanoid, "Humanoid-v5", 270),
         (GymnasiumHumanoidStandup, "HumanoidStandup-v5", 270)]  # fmt: skip
ROWS = 3


def make(task, num_envs=ROWS, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the file's unapplied options, the substeps chosen
        return task(num_envs, seed=0, capture=False, **kwargs)


def _reference(gym_id):
    return gymnasium.make(gym_id, include_cfrc_ext_in_observation=False).unwrapped


def _set(reference, qpos, qvel, ctrl):
    reference.data.ctrl[:] = ctrl
    reference.set_state(qpos.double().numpy(), qvel.double().numpy())


def _v5_reward(reference, gym_id, before, after, action):
    """v5's reward of the transition ``before -> after`` (states set in MuJoCo), without
    its contact cost (cfrc_ext is left out on Newton)."""
    action = action.double().numpy()
    _set(reference, *before, action)
    if gym_id == "Ant-v5":
        start = reference.data.body(1).xpos[0]
    elif gym_id == "Humanoid-v5":
        start = mass_center(reference.model, reference.data)[0]
    _set(reference, *after, action)
    if gym_id == "HumanoidStandup-v5":
        reward, info = reference._get_rew(reference.data.qpos[2], action)
        return reward - info["reward_impact"]
    if gym_id == "Ant-v5":
        end = reference.data.body(1).xpos[0]
    else:
        end = mass_center(reference.model, reference.data)[0]
    reward, info = reference._get_rew((end - start) / reference.dt, action)
    return reward - info["reward_contact"]


@pytest.mark.parametrize(("task", "gym_id", "dim"), TASKS, ids=[t[1] for t in TASKS])
def test_observation_and_reward_are_v5s(task, gym_id, dim):
    env = make(task)
    reference = _reference(gym_id)
    assert env.observation_dim == reference.observation_space.shape[0] == dim
    assert env.action_dim == reference.action_space.shape[0]
    np.testing.assert_allclose(env.single_action_space.low, reference.action_space.low)
    np.testing.assert_allclose(env.single_action_space.high, reference.action_space.high)
    assert env.dt == pytest.approx(reference.dt)  # frame_skip x the file's timestep
    observation, _ = env.reset(seed=0)
    qpos, qvel = env.qpos_qvel(env.state)
    zero = np.zeros(env.action_dim)
    for row in range(ROWS):  # the observation of a reset state (ctrl 0), v5's
        _set(reference, qpos[row], qvel[row], zero)
        np.testing.assert_allclose(observation[row].numpy(), reference._get_obs(), atol=2e-4)
    low, high = (torch.as_tensor(bound) for bound in (reference.action_space.low,
                                                      reference.action_space.high))  # fmt: skip
    action = 1.5 * (low + (high - low) * torch.rand(ROWS, env.action_dim))  # some past ctrlrange
    observation, reward, terminated, truncated, _ = env.step(action)
    assert not bool((terminated | truncated).any())  # one step from the reset: all go on
    after = env.qpos_qvel(env.state)
    for row in range(ROWS):
        _set(reference, after[0][row], after[1][row], action[row].double().numpy())
        np.testing.assert_allclose(observation[row].numpy(), reference._get_obs(), atol=2e-4)
        expected = _v5_reward(reference, gym_id, (qpos[row], qvel[row]),
                              (after[0][row], after[1][row]), action[row])  # fmt: skip
        assert float(reward[row]) == pytest.approx(expected, rel=1e-4, abs=1e-3)


def test_termination_follows_v5s_healthy_ranges():
    ant = make(GymnasiumAnt, 4)
    qpos, qvel = (value.clone() for value in ant.qpos_qvel(ant.state))
    qpos[:, 2] = torch.tensor([0.5, 0.19, 1.01, 0.5])  # in, below, above v5's [0.2, 1]
    qvel[3, 0] = float("nan")  # v5: every state entry finite
    joint_q, joint_qd = ant.joint_state_from_mujoco(qpos, qvel)
    assert ant._terminated({"joint_q": joint_q, "joint_qd": joint_qd}).tolist() == [
        False, True, True, True
    ]  # fmt: skip
    humanoid = make(GymnasiumHumanoid, 3)
    qpos, qvel = (value.clone() for value in humanoid.qpos_qvel(humanoid.state))
    qpos[:, 2] = torch.tensor([1.4, 0.99, 2.01])  # in, below, above v5's (1, 2)
    joint_q, joint_qd = humanoid.joint_state_from_mujoco(qpos, qvel)
    state = {**humanoid.state, "joint_q": joint_q, "joint_qd": joint_qd}
    assert humanoid._terminated(state).tolist() == [False, True, True]
    narrow = make(GymnasiumHumanoid, 3, healthy_z_range=(1.5, 2.0))
    assert narrow._terminated(state).tolist() == [True, True, True]
    standup = make(GymnasiumHumanoidStandup, 2)
    assert not standup._can_terminate  # v5's HumanoidStandup never terminates


def test_options_and_the_left_out_contact_forces():
    with pytest.raises(ValueError, match="cfrc_ext"):
        make(GymnasiumAnt, include_cfrc_ext_in_observation=True)
    env = make(GymnasiumHumanoid, 2, include_cinert_in_observation=False,
               include_qfrc_actuator_in_observation=False, ctrl_cost_weight=0.2)  # fmt: skip
    reference = gymnasium.make("Humanoid-v5", include_cfrc_ext_in_observation=False,
                               include_cinert_in_observation=False,
                               include_qfrc_actuator_in_observation=False).unwrapped  # fmt: skip
    assert env.observation_dim == reference.observation_space.shape[0] == 45 + 78
    assert "ctrl" not in env.state and env.ctrl_cost_weight == 0.2
    qpos, qvel = env.qpos_qvel(env.state)
    _set(reference, qpos[0], qvel[0], np.zeros(env.action_dim))
    np.testing.assert_allclose(env._observe(env.state)[0].numpy(), reference._get_obs(), atol=2e-4)


def test_com_quantities_are_differentiable():
    """cinert and cvel through Newton's forward kinematics: their autograd directional
    derivatives equal central differences (exact in joint_qd, where cvel is linear)."""
    env = make(GymnasiumHumanoid, 2)
    state = {key: value.clone() for key, value in env.state.items()}
    generator = torch.Generator().manual_seed(0)
    weights = torch.randn(2, 208, generator=generator)

    def value(joint_q, joint_qd):
        observation = env._observe({**state, "joint_q": joint_q, "joint_qd": joint_qd})
        return (observation[:, 45:253] * weights).sum()

    joint_q = state["joint_q"].clone().requires_grad_(True)
    joint_qd = state["joint_qd"] + torch.randn(state["joint_qd"].shape, generator=generator)
    joint_qd.requires_grad_(True)
    grad_q, grad_qd = torch.autograd.grad(value(joint_q, joint_qd), (joint_q, joint_qd))
    direction_qd = torch.randn(joint_qd.shape, generator=generator)
    with torch.no_grad():
        step = 0.5
        difference = (value(joint_q, joint_qd + step * direction_qd)
                      - value(joint_q, joint_qd - step * direction_qd)) / (2 * step)  # fmt: skip
    assert float((grad_qd * direction_qd).sum()) == pytest.approx(float(difference), rel=1e-3)
    direction_q = torch.zeros(joint_q.shape)
    direction_q[:, 7:] = torch.randn(2, joint_q.shape[1] - 7, generator=generator)  # hinges
    direction_q[:, :3] = torch.randn(2, 3, generator=generator)  # the root's position
    with torch.no_grad():
        step = 1e-2
        difference = (value(joint_q + step * direction_q, joint_qd)
                      - value(joint_q - step * direction_q, joint_qd)) / (2 * step)  # fmt: skip
    assert float((grad_q * direction_q).sum()) == pytest.approx(float(difference), rel=2e-2)


@pytest.mark.parametrize("task", [GymnasiumAnt, GymnasiumHumanoid, GymnasiumHumanoidStandup])
def test_random_rollout_stays_finite(task):
    """20 steps of uniform random actions at the substeps ``"auto"`` chose: no blow-up, and
    the Ant, its ankles starting 30 degrees past their limits (v5's qpos0), is not flung
    out of its healthy range (its limits are damped critically)."""
    env = make(task, 2)
    env.reset(seed=1)
    generator = torch.Generator().manual_seed(1)
    low, high = (torch.as_tensor(b) for b in (env.single_action_space.low,
                                              env.single_action_space.high))  # fmt: skip
    with torch.no_grad():
        for _ in range(20):
            action = low + (high - low) * torch.rand(2, env.action_dim, generator=generator)
            observation, reward, terminated, *_ = env.step(action)
            assert torch.isfinite(observation).all() and torch.isfinite(reward).all()
            assert float(observation.abs().max()) < 1e4
            if task is GymnasiumAnt:
                assert not bool(terminated.any())
