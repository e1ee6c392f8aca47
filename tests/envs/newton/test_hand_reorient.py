"""HandReorient: the hand file means what MuJoCo reads in it, and Rewarped's task definition
(observation, reward, goals, resets, termination) holds on Newton."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("newton", reason="the Newton backend needs pathgrad[newton]")

from pathgrad.envs.newton.engine.kinematics import quat_multiply  # noqa: E402
from pathgrad.envs.newton.robots.hand_reorient import (  # noqa: E402
    HandReorient,
    rotation_distance,
    turned,
)

pytestmark = pytest.mark.xdist_group("hand_reorient")


@pytest.fixture(scope="module")
def env() -> HandReorient:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return HandReorient(2, seed=0)


def test_forward_kinematics_are_mujocos(env):
    mujoco = pytest.importorskip("mujoco")
    model = mujoco.MjModel.from_xml_path(env.model_file)
    data = mujoco.MjData(model)
    generator = torch.Generator().manual_seed(0)
    hand = env.lower + (env.upper - env.lower) * torch.rand(2, 16, generator=generator)
    quat = torch.nn.functional.normalize(torch.randn(2, 4, generator=generator), dim=-1)
    qpos = torch.cat([hand, torch.tensor([[0.01, -0.12, 0.58]] * 2), quat], -1)
    joint_q, joint_qd = env.joint_state_from_mujoco(qpos, torch.zeros(2, 22))
    positions = env.body_poses({"joint_q": joint_q, "joint_qd": joint_qd})[0]
    for row in range(2):
        data.qpos[:] = qpos[row].double().numpy()
        mujoco.mj_kinematics(model, data)
        names = [model.body(i).name for i in range(1, model.nbody)]
        expected = np.stack([data.body(name).xpos for name in names])
        got = positions[row, [env.body_index(name) for name in names]].numpy()
        np.testing.assert_allclose(got, expected, atol=1e-4)


def test_spaces_and_the_reset_distribution(env):
    assert (env.observation_dim, env.action_dim) == (72, 16)
    assert env.simulation_options["substeps"] == 64 and env.dt == pytest.approx(1 / 120)
    state = env._sample_initial_state(256)
    hand = state["joint_q"][:, :16]
    assert bool((hand >= 0.2 * env.lower - 1e-6).all() and (hand <= 0.2 * env.upper + 1e-6).all())
    cube = state["joint_q"][:, 16:19]
    assert float((cube - torch.tensor([0.0, -0.1, 0.6])).abs().max()) <= 0.01
    assert float(cube[:, 0].std()) > 0.004  # spread over +-0.01
    turn = rotation_distance(state["joint_q"][:, 19:23], torch.tensor([[0.0, 0.0, 0.0, 1.0]]))
    assert float(turn.max()) > 2.5 and float(turn.min()) < 0.5  # turned by up to pi about x, y
    observation = env._observe(state)
    assert observation.shape == (256, 72)
    # Joint angles over their limits in [-1, 1], but the thumb's joint_12: its reset range
    # 0.2 x [0.263, 1.396] lies mostly below its lower limit 0.263, as in Rewarped
    others = [joint for joint in range(16) if joint != 12]
    assert bool(observation[:, others].abs().max() <= 1.0)
    assert float(observation[:, 12].min()) < -1.0
    np.testing.assert_allclose(observation[:, 45:48].numpy(), [[0.0, -0.1, 0.56]] * 256, atol=1e-6)


def test_rotation_distance_and_the_goal_orientation():
    identity = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    quarter = turned(torch.tensor([[0.5, 0.0]]))  # a quarter turn about x
    np.testing.assert_allclose(quarter.numpy(), [[math.sin(math.pi / 4), 0, 0,
                                                  math.cos(math.pi / 4)]], atol=1e-6)  # fmt: skip
    assert float(rotation_distance(quarter, identity)) == pytest.approx(math.pi / 2, abs=1e-5)
    assert float(rotation_distance(quarter, quarter)) == pytest.approx(0.0, abs=1e-3)
    both = turned(torch.tensor([[0.5, 0.5]]))  # about x first, then about the turned y
    about_y = turned(torch.tensor([[0.0, 0.5]]))
    np.testing.assert_allclose(both.numpy(), quat_multiply(quarter, about_y).numpy(), atol=1e-6)


def _state_with_cube(env, quat: torch.Tensor, position=(0.0, -0.1, 0.56)) -> dict:
    state = env._sample_initial_state(1)
    state["joint_q"][:, 16:19] = torch.tensor([position])
    state["joint_q"][:, 19:23] = quat
    return state


def test_the_reward_near_the_goal_and_away(env):
    draws = torch.tensor([[0.3, -0.2]])
    goal = turned(draws)
    action = torch.zeros(1, 16)
    at_goal = _state_with_cube(env, goal)
    at_goal["goal_draws"] = draws
    # At the goal: 1 / (0 + 0.1) and half the bonus of 250 (Rewarped's smoothed gate)
    assert float(env._reward(at_goal, action, at_goal)) == pytest.approx(10.0 + 125.0, abs=0.2)
    away = _state_with_cube(env, turned(torch.tensor([[0.3, -0.2 + 1.0 / math.pi]])),
                            position=(0.0, -0.1, 0.66))  # fmt: skip
    away["goal_draws"] = draws
    angle = float(rotation_distance(away["joint_q"][:, 19:23], goal))
    assert angle == pytest.approx(1.0, abs=1e-4)  # 1 rad about the turned y
    full = torch.ones(1, 16) * 3.0  # clipped to 1: a penalty of 0.0002 x 16
    expected = -10.0 * 0.1 + 1.0 / (1.0 + 0.1) - 0.0002 * 16
    assert float(env._reward(away, full, away)) == pytest.approx(expected, abs=1e-4)


def test_a_reached_goal_is_replaced_and_counted_and_a_drop_terminates(env):
    goal = turned(torch.tensor([[0.3, -0.2]]))
    state = _state_with_cube(env, goal)
    state["goal_draws"] = torch.tensor([[0.3, -0.2]])
    state = {key: value.expand(2, *value.shape[1:]).clone() for key, value in state.items()}
    state["goal_draws"][1] = torch.tensor([-0.9, 0.9])  # row 1 is far from its goal
    following = env._dynamics(state, torch.zeros(2, 16))
    assert following["goals_reached"].tolist() == [1.0, 0.0]
    new_goal = turned(following["goal_draws"][:1])
    assert float(rotation_distance(new_goal, goal)) > 0.5  # a new goal, within the ranges
    assert bool(following["goal_draws"].abs().max() <= 1.0)
    assert torch.equal(following["goal_draws"][1], state["goal_draws"][1])
    again = env._dynamics(state, torch.zeros(2, 16))
    assert torch.equal(again["goal_draws"], following["goal_draws"])  # no random numbers
    dropped = _state_with_cube(env, goal, position=(0.0, -0.1, 0.56 - 0.25))
    assert env._terminated(dropped).tolist() == [True]
    assert env._terminated(_state_with_cube(env, goal)).tolist() == [False]


def test_the_action_jacobian_in_sustained_contact_matches_central_differences(env):
    """The cube dropped on the fingers (inside their limits, the thumb off its limit) slides
    over them from the 9th step on; at the 16th, one step's Jacobian of the cube's velocity
    with respect to the 16 torques agrees with central differences (measured 1.3%). Not
    checked: the Jacobian with respect to positions, where box contacts make the step
    discontinuous (the differences grow as their step shrinks: Newton's contact points
    between two boxes change with the pose)."""
    from pathgrad.testing.jacobians import finite_differences, jacobians

    state = env._sample_initial_state(2)
    joint_q = state["joint_q"].clone()
    joint_q[:, :16] = 0.15 * (env.lower + env.upper)
    joint_q[:, 12] = 0.4
    joint_q[:, 16:23] = torch.tensor([0.0, -0.08, 0.56, 0.0, 0.0, 0.0, 1.0])
    state = {**state, "joint_q": joint_q, "joint_qd": torch.zeros_like(state["joint_qd"])}
    with torch.no_grad():
        for _ in range(16):
            state = env._dynamics(state, torch.zeros(2, 16))
    start = torch.zeros(16)

    def cube_velocity(action: torch.Tensor) -> tuple[torch.Tensor]:  # row 0's
        actions = torch.stack([action, torch.zeros_like(action)])
        return (env._dynamics(state, actions)["joint_qd"][0, 16:],)

    (analytic,) = jacobians(cube_velocity, (start.clone().requires_grad_(),))
    (numeric,) = finite_differences(cube_velocity, (start,), 1e-3)
    assert float(numeric.norm()) > 1.0  # the fingers move the cube: in contact
    assert float((analytic - numeric).norm() / numeric.norm()) < 0.03
