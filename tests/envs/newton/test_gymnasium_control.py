"""Gymnasium's v5 control tasks on Newton keep v5's definitions (Gymnasium's own env, on
MuJoCo, is the oracle of the observation, the reward, the termination and the spaces), and
the swimmer's fluid is MuJoCo's inertia-box model."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("newton")
mujoco = pytest.importorskip("mujoco")
gymnasium = pytest.importorskip("gymnasium")

from pathgrad.envs.newton.engine.bridge import NewtonSimulation  # noqa: E402
from pathgrad.envs.newton.robots.gymnasium_control import (  # noqa: E402
    GymnasiumInvertedDoublePendulum,
    GymnasiumInvertedPendulum,
    GymnasiumReacher,
    GymnasiumSwimmer,
)

TASKS = [(GymnasiumInvertedPendulum, "InvertedPendulum-v5"),
         (GymnasiumInvertedDoublePendulum, "InvertedDoublePendulum-v5"),
         (GymnasiumReacher, "Reacher-v5"), (GymnasiumSwimmer, "Swimmer-v5")]  # fmt: skip


def build(task, rows: int = 4):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the file's integrator, the substeps chosen
        return task(rows, seed=0, capture=False)


def v5_reward(reference, gym_id: str, before_qpos, action, dt: float) -> tuple[float, bool]:
    """v5's reward and termination of the transition into the reference's current state."""
    if gym_id == "InvertedPendulum-v5":
        observation = reference._get_obs()
        terminated = bool(not np.isfinite(observation).all() or abs(observation[1]) > 0.2)
        return float(not terminated), terminated
    if gym_id == "InvertedDoublePendulum-v5":
        x, _, y = reference.data.site_xpos[0]
        return reference._get_rew(x, y, bool(y <= 1))[0], bool(y <= 1)
    if gym_id == "Reacher-v5":
        return reference._get_rew(action)[0], False
    x_velocity = (reference.data.qpos[0] - before_qpos[0]) / dt
    return reference._get_rew(x_velocity, action)[0], False


@pytest.mark.parametrize(("task", "gym_id"), TASKS, ids=[t[1] for t in TASKS])
def test_observation_reward_termination_and_spaces_are_v5s(task, gym_id):
    env = build(task)
    reference = gymnasium.make(gym_id).unwrapped
    assert env.observation_dim == reference.observation_space.shape[0]
    assert env.action_dim == reference.action_space.shape[0]
    np.testing.assert_allclose(env.single_action_space.low, reference.action_space.low)
    np.testing.assert_allclose(env.single_action_space.high, reference.action_space.high)
    assert env.dt == pytest.approx(reference.dt)  # frame_skip x the file's timestep
    assert env.max_episode_steps == gymnasium.spec(gym_id).max_episode_steps
    observation, _ = env.reset(seed=0)
    qpos, qvel = env.qpos_qvel(env.state)
    for row in range(4):  # the observation of a state, v5's
        reference.set_state(qpos[row].double().numpy(), qvel[row].double().numpy())
        np.testing.assert_allclose(observation[row].numpy(), reference._get_obs(), atol=1e-5)
    high = env.single_action_space.high
    action = torch.tensor(np.random.default_rng(0).uniform(-high, high, (4, env.action_dim)),
                          dtype=torch.float32)  # fmt: skip
    _, reward, terminated, truncated, _ = env.step(action)
    assert not bool((terminated | truncated).any())  # one step from the reset: all go on
    after_qpos, after_qvel = env.qpos_qvel(env.state)
    for row in range(4):  # the reward of the transition, v5's terms
        reference.set_state(after_qpos[row].double().numpy(), after_qvel[row].double().numpy())
        expected, ended = v5_reward(reference, gym_id, qpos[row].double().numpy(),
                                    action[row].double().numpy(), reference.dt)  # fmt: skip
        assert not ended
        assert float(reward[row]) == pytest.approx(expected, rel=1e-4, abs=1e-4)


def test_termination_is_v5s():
    pendulum = build(GymnasiumInvertedPendulum, 3)
    qpos, qvel = pendulum.qpos_qvel(pendulum.state)
    qpos, qvel = qpos.clone(), qvel.clone()
    qpos[1, 1] = 0.25  # the pole past 0.2 rad
    qvel[2, 0] = float("nan")  # a non-finite observation
    state = pendulum._from_mujoco(qpos, qvel)
    assert pendulum._terminated(state).tolist() == [False, True, True]
    assert pendulum._reward(state, torch.zeros(3, 1), state).tolist() == [1.0, 0.0, 0.0]
    double = build(GymnasiumInvertedDoublePendulum, 2)
    qpos, qvel = double.qpos_qvel(double.state)
    qpos = qpos.clone()
    qpos[1, 1] = 1.2  # the poles tipped over: the tip below y = 1
    state = double._from_mujoco(qpos, qvel)
    reference = gymnasium.make("InvertedDoublePendulum-v5").unwrapped
    reference.set_state(qpos[1].double().numpy(), qvel[1].double().numpy())
    assert reference.data.site_xpos[0][2] <= 1.0  # v5 ends it too
    np.testing.assert_allclose(double.tip_position(state)[1].numpy(),
                               reference.data.site_xpos[0], atol=1e-5)  # fmt: skip
    assert double._terminated(state).tolist() == [False, True]
    for task in (GymnasiumReacher, GymnasiumSwimmer):  # no termination, only the time limit
        assert not build(task, 1)._can_terminate


def test_double_pendulum_constraint_force_is_mujocos_inside_the_range_only():
    env = build(GymnasiumInvertedDoublePendulum, 1)
    reference = gymnasium.make("InvertedDoublePendulum-v5").unwrapped
    found = {}
    for x in (0.0, 0.5, -0.98, 0.995, 1.002, -1.003):
        qpos, qvel = np.array([x, 0.05, -0.02]), np.array([0.1, 0.1, 0.0])
        reference.set_state(qpos, qvel)
        state = env._from_mujoco(torch.tensor(qpos)[None].float(), torch.tensor(qvel)[None].float())
        found[x] = (float(reference.data.qfrc_constraint[0]), float(env.constraint_force(state)[0]))
    for x in (0.0, 0.5, -0.98):  # no limit acts: both 0
        assert found[x] == (0.0, 0.0)
    assert found[0.995][1] == 0.0 and found[0.995][0] < -100.0  # MuJoCo's margin 0.01
    for x in (1.002, -1.003):  # past the bound both push back, with other magnitudes
        mujoco_force, newton_force = found[x]
        assert np.sign(mujoco_force) == np.sign(newton_force) == -np.sign(x)
        assert abs(newton_force) < abs(mujoco_force)


def test_reacher_reset_is_v5s():
    env = build(GymnasiumReacher, 2)
    state = env._sample_initial_state(4000)
    qpos, qvel = env.qpos_qvel(state)
    goal = qpos[:, 2:]
    radius = goal.norm(dim=-1)
    assert bool((radius < 0.2).all())
    assert float(radius.square().mean()) == pytest.approx(0.02, rel=0.05)  # uniform: R^2 / 2
    assert float((radius < 0.1).float().mean()) == pytest.approx(0.25, abs=0.03)
    for quadrant in ((1, 1), (-1, 1), (-1, -1), (1, -1)):  # every direction alike
        share = ((goal[:, 0] * quadrant[0] > 0) & (goal[:, 1] * quadrant[1] > 0)).float().mean()
        assert float(share) == pytest.approx(0.25, abs=0.03)
    assert bool((qpos[:, :2].abs() <= 0.1).all()) and bool((qvel[:, :2].abs() <= 0.005).all())
    assert bool((qvel[:, 2:] == 0).all())  # the target at rest
    env.generator.manual_seed(5)  # a window's resets drawn at once: the steps' own, bit for bit
    window = env.draw_reset_window(3)
    env.generator.manual_seed(5)
    serial = [env.draw_reset_states() for _ in range(3)]
    for key in ("joint_q", "joint_qd"):
        assert torch.equal(window[key], torch.stack([draw[key] for draw in serial]))


def random_swimmer_state(rng):
    return rng.uniform(-1.0, 1.0, 5), rng.normal(0.0, 1.0, 5)


def test_swimmer_fluid_forces_are_mujocos():
    env = build(GymnasiumSwimmer, 4)
    model = mujoco.MjModel.from_xml_path(env.model_file)
    assert model.opt.density == 4000.0 and model.opt.viscosity == 0.1
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    states = [random_swimmer_state(rng) for _ in range(4)]
    qpos = torch.tensor(np.array([s[0] for s in states]), dtype=torch.float32)
    qvel = torch.tensor(np.array([s[1] for s in states]), dtype=torch.float32)
    state = env._from_mujoco(qpos, qvel)
    _, forces = env.mujoco_from_joint_state(state["joint_q"], env.extra_joint_forces(state))
    for row, (position, velocity) in enumerate(states):
        data.qpos[:], data.qvel[:] = position, velocity
        mujoco.mj_forward(model, data)  # the swimmer's only passive force is the fluid's
        np.testing.assert_allclose(forces[row].numpy(), data.qfrc_passive, rtol=1e-4, atol=1e-3)


def test_swimmer_accelerates_as_mujoco_does():
    # One short step with the fluid and a control: MuJoCo's qacc (mj_forward) within 1%.
    env = build(GymnasiumSwimmer, 1)
    env.simulation = NewtonSimulation(env.simulation.model, dt=1e-4, capture=False)
    env.actuator_steps = 1  # one simulation step of 1e-4 s
    model = mujoco.MjModel.from_xml_path(env.model_file)
    data = mujoco.MjData(model)
    rng = np.random.default_rng(1)
    for _ in range(3):
        position, velocity = random_swimmer_state(rng)
        position[3:] *= 0.5  # inside the hinges' ranges (±100 degrees): no limit acts
        data.qpos[:], data.qvel[:] = position, velocity
        data.ctrl[:] = ctrl = rng.uniform(-1.0, 1.0, 2)
        mujoco.mj_forward(model, data)
        env.state = env._from_mujoco(torch.tensor(position)[None].float(),
                                     torch.tensor(velocity)[None].float())  # fmt: skip
        after = env._dynamics(env.state, torch.tensor(ctrl)[None].float())
        _, qvel = env.qpos_qvel(after)
        qacc = (qvel[0].double().numpy() - velocity) / 1e-4
        scale = float(np.abs(data.qacc).max())
        assert np.abs(qacc - data.qacc).max() <= 0.01 * scale, (qacc, data.qacc)


def test_swimmer_swims_as_mujocos_does():
    # A travelling wave for 2 s that keeps the hinges inside their ranges (where no limit
    # acts): the course of MuJoCo's (RK4, its fluid) within 3 cm over some 70 cm.
    env = build(GymnasiumSwimmer, 1)
    assert env.actuator_steps == 4 and env.dt == pytest.approx(0.04)  # the fluid each frame
    reference = gymnasium.make("Swimmer-v5").unwrapped
    env.reset(seed=0)
    qpos, qvel = env.qpos_qvel(env.state)
    reference.set_state(qpos[0].double().numpy(), qvel[0].double().numpy())
    for step in range(50):
        phase = 2.0 * np.pi * step * env.dt
        action = 0.3 * np.array([np.sin(phase), np.sin(phase - np.pi / 2)])
        reference.do_simulation(action, reference.frame_skip)
        env.step(torch.tensor(action)[None].float())
    newton_qpos, _ = env.qpos_qvel(env.state)
    assert np.linalg.norm(reference.data.qpos[:2] - qpos[0, :2].numpy()) > 0.5  # it swam
    assert np.abs(reference.data.qpos[3:]).max() < 1.5  # the hinges' limits are ±1.745
    np.testing.assert_allclose(newton_qpos[0].numpy(), reference.data.qpos, atol=0.03)
