"""Gymnasium's Pusher-v5 on Newton keeps v5's definition (Gymnasium's own env, on MuJoCo,
is the oracle of the observation, the reward terms and the reset distribution)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("newton")
pytest.importorskip("mujoco")
gymnasium = pytest.importorskip("gymnasium")

from pathgrad.envs.newton.engine.kinematics import rotate  # noqa: E402
from pathgrad.envs.newton.robots.gymnasium_pusher import GymnasiumPusher  # noqa: E402

GOAL = (0.45, -0.05, -0.323)  # the goal body's place in pusher_v5.xml (qpos 0)


def pusher(num_envs: int, **kwargs) -> GymnasiumPusher:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the file's unapplied options, the goal's inertia
        return GymnasiumPusher(num_envs, seed=0, **kwargs)


@pytest.fixture(scope="module")
def reference():
    return gymnasium.make("Pusher-v5").unwrapped


def test_spaces_observation_and_reward_are_v5s(reference):
    env = pusher(4, capture=False)
    assert env.observation_dim == reference.observation_space.shape[0] == 23
    assert env.action_dim == reference.action_space.shape[0] == 7
    np.testing.assert_allclose(env.single_action_space.low, reference.action_space.low)
    np.testing.assert_allclose(env.single_action_space.high, reference.action_space.high)
    assert env.dt == pytest.approx(reference.dt)  # frame skip 5 x the file's 0.01 s
    assert env.max_episode_steps == gymnasium.spec("Pusher-v5").max_episode_steps == 100
    assert all(int(c) == 1 for c in reference.model.geom_condim)  # frictionless, as here
    assert float(env.simulation.model.shape_material_mu.numpy().max()) == 0.0
    rng = np.random.default_rng(0)
    qpos = np.zeros((4, 11))
    qpos[:, :7] = rng.uniform(-0.5, 0.0, (4, 7))  # a turned arm
    qpos[:, 7:9] = rng.uniform(-0.2, 0.2, (4, 2))
    qvel = np.concatenate([rng.normal(0.0, 1.0, (4, 9)), np.zeros((4, 2))], -1)
    joint_q, joint_qd = env.joint_state_from_mujoco(
        torch.tensor(qpos, dtype=torch.float32), torch.tensor(qvel, dtype=torch.float32)
    )
    state = {"joint_q": joint_q, "joint_qd": joint_qd}
    observation = env._observe(state)
    for row in range(4):  # the observation of a state, v5's
        reference.set_state(qpos[row], qvel[row])
        np.testing.assert_allclose(observation[row].numpy(), reference._get_obs(), atol=2e-5)
    env.state = state
    action = torch.tensor(rng.uniform(-2.5, 2.5, (4, 7)), dtype=torch.float32)  # some past ±2
    _, reward, terminated, truncated, info = env.step(action)
    assert not bool((terminated | truncated).any())
    after_qpos, after_qvel = env.qpos_qvel(env.state)
    for row in range(4):  # the reward of the transition: v5's terms after the step
        reference.set_state(after_qpos[row].double().numpy(), after_qvel[row].double().numpy())
        expected, _ = reference._get_rew(action[row].double().numpy())
        assert float(reward[row]) == pytest.approx(expected, rel=1e-5, abs=1e-5)
    offset = env.tracked_positions(env.state)[:, 1].numpy() - GOAL
    distance, on_table = np.linalg.norm(offset, axis=-1), np.linalg.norm(offset[:, :2], axis=-1)
    np.testing.assert_allclose(info["metrics"]["object_goal_distance"].numpy(), distance, atol=1e-6)
    np.testing.assert_allclose(
        info["metrics"]["object_goal_planar_distance"].numpy(), on_table, atol=1e-6
    )
    assert info["metrics"]["success"].tolist() == (on_table < 0.05).astype(np.float32).tolist()


def test_success_is_the_object_over_the_goal_on_the_table(reference):
    """The object's centre sits 0.048 m above the goal's in the file (MuJoCo's xpos), so
    success is counted on the table: an object 2.2 cm from the goal succeeds, though its
    centre is 5.3 cm from the goal's."""
    env = pusher(3, capture=False)
    qpos = np.zeros((3, 11))
    qpos[:, 7:9] = [[0.01, 0.02], [0.0, 0.0], [0.03, -0.045]]  # obj_slidey, obj_slidex
    joint_q, joint_qd = env.joint_state_from_mujoco(
        torch.tensor(qpos, dtype=torch.float32), torch.zeros(3, 11)
    )
    metrics = env._metrics({"joint_q": joint_q, "joint_qd": joint_qd})
    object_id, goal_id = reference.model.body("object").id, reference.model.body("goal").id
    for row in range(3):
        reference.set_state(qpos[row], np.zeros(11))
        offset = reference.data.xpos[object_id] - reference.data.xpos[goal_id]
        assert offset[2] == pytest.approx(0.048, abs=1e-9)
        distance = float(metrics["object_goal_distance"][row])
        assert distance == pytest.approx(np.linalg.norm(offset), abs=1e-6)
        on_table = float(metrics["object_goal_planar_distance"][row])
        assert on_table == pytest.approx(np.linalg.norm(offset[:2]), abs=1e-6)
    assert float(metrics["object_goal_distance"][0]) > 0.05  # 3-D: not within 5 cm
    assert metrics["success"].tolist() == [1.0, 1.0, 0.0]  # on the table: 2.2, 0 and 5.4 cm


def test_reset_draws_v5s_distribution(reference):
    env = pusher(1, capture=False)
    state = env._sample_initial_state(4000)
    qpos, qvel = env.qpos_qvel(state)
    assert bool((qpos[:, :7] == 0).all()) and bool((qpos[:, 9:] == 0).all())  # arm, goal
    assert bool((qvel[:, :7].abs() <= 0.005).all()) and bool((qvel[:, 7:] == 0).all())
    y, x = qpos[:, 7], qpos[:, 8]
    assert bool(((y >= -0.3) & (y <= 0.0) & (x >= -0.2) & (x <= 0.2)).all())
    assert bool((qpos[:, 7:9].norm(dim=-1) > 0.17).all())  # v5 draws it again nearer
    goal = env.tracked_positions({"joint_q": state["joint_q"][:1]})[0, 2]  # (1 env: 1 row)
    np.testing.assert_allclose(goal.numpy(), GOAL, atol=1e-6)
    drawn = []
    for seed in range(1000):  # v5's own resets: the same distribution
        reference.reset(seed=seed)
        drawn.append(reference.data.qpos[7:9].copy())
    drawn = np.array(drawn)
    ours = qpos[:, 7:9].double().numpy()
    for statistic in (lambda p: p.mean(0), lambda p: (p[:, 0] < -0.17).mean(),
                      lambda p: (np.abs(p[:, 1]) < 0.1).mean()):  # fmt: skip
        np.testing.assert_allclose(statistic(ours), statistic(drawn), atol=0.04)
    generator = env.generator.get_state()  # a window of resets draws as step by step
    window = env.draw_reset_window(3)
    env.generator.set_state(generator)
    for step in range(3):
        assert torch.equal(window["joint_q"][step], env.draw_reset_states()["joint_q"])


def test_a_random_rollout_stays_finite_with_the_goal_in_place():
    env = pusher(2)
    env.reset(seed=0)
    generator = torch.Generator().manual_seed(0)
    for step in range(100):
        action = 4.0 * torch.rand(2, 7, generator=generator) - 2.0
        observation, reward, terminated, truncated, info = env.step(action)
        assert bool(torch.isfinite(observation).all()) and bool(torch.isfinite(reward).all())
        assert not bool(terminated.any())
        assert bool(truncated.all()) == (step == 99)  # 100 steps, then truncated
        if step < 99:  # the object keeps its height (slides), the goal its place
            np.testing.assert_allclose(observation[:, 19].numpy(), -0.275, atol=1e-6)
            np.testing.assert_allclose(observation[:, 20:].numpy(),
                                       np.broadcast_to(GOAL, (2, 3)), atol=1e-6)  # fmt: skip


def test_the_object_s_jacobian_in_sustained_contact_matches_central_differences():
    env = pusher(1)
    qpos = torch.zeros(1, 11)
    qpos[0, :7] = torch.tensor([0.7, 1.0, 0.0, -1.2, 0.0, 0.0, 0.0])  # the wrist at the table
    joint_q, joint_qd = env.joint_state_from_mujoco(qpos, torch.zeros(1, 11))
    positions, quaternions = env.body_poses({"joint_q": joint_q})
    wrist = env.body_index("r_wrist_roll_link")
    ahead = rotate(quaternions[:, wrist], torch.tensor([[1.0, 0.0, 0.0]]))[0] * torch.tensor(
        [1.0, 1.0, 0.0])  # fmt: skip
    centre = positions[0, wrist] + 0.0735 * ahead / ahead.norm()  # inside the gripper's U
    qpos[0, 7], qpos[0, 8] = centre[1] - GOAL[1], centre[0] - GOAL[0]
    joint_q, joint_qd = env.joint_state_from_mujoco(qpos, torch.zeros(1, 11))
    state = {"joint_q": joint_q.detach(), "joint_qd": joint_qd.detach()}
    push = torch.tensor([[-1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])  # the gripper's side sweeps it
    with torch.no_grad():
        for _ in range(8):  # in contact from the 6th step on
            state = env._dynamics(state, push)

    def object_xy(action: torch.Tensor) -> torch.Tensor:
        return env.tracked_positions(env._dynamics(state, action))[0, 1, :2]

    speed = float(env.qpos_qvel(state)[1][0, 7:9].norm())
    assert speed > 0.1  # pushed along
    action = push.clone().requires_grad_(True)
    rows = [torch.autograd.grad(object_xy(action)[k], action)[0][0] for k in range(2)]
    analytic = torch.stack(rows).double()
    numeric = torch.zeros(2, 7, dtype=torch.float64)
    with torch.no_grad():
        for column in range(7):
            step = torch.zeros(1, 7)
            step[0, column] = 1e-2
            plus, minus = object_xy(push + step).double(), object_xy(push - step).double()
            numeric[:, column] = (plus - minus) / 2e-2
    assert float(numeric.norm()) > 1e-3
    assert float((analytic - numeric).norm() / numeric.norm()) < 0.02  # measured 0.005
