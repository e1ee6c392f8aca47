"""The Gymnasium and Stable-Baselines3 adapters, per-row seeds and reset masks."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.vector import NormalizeObservation, TransformObservation

from pathgrad.envs import (
    CartPoleSwingUp,
    HorizonCurriculum,
    MountainCarContinuous,
    Pendulum,
    PointMass,
    Quadrotor,
    Reacher,
    to_gymnasium,
    to_gymnasium_env,
    to_sb3,
)

BUILT_IN = [PointMass, Pendulum, Reacher, Quadrotor, CartPoleSwingUp, MountainCarContinuous]


def _actions(steps: int, num_envs: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (steps, num_envs, 2)).astype(np.float32)


def test_same_step_adapter_steps_exactly_the_same_dynamics():
    direct = PointMass(4, max_episode_steps=5, seed=0)
    expected_obs, _ = direct.reset(seed=3)
    vector = to_gymnasium(PointMass(4, max_episode_steps=5, seed=0), AutoresetMode.SAME_STEP)
    assert vector.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert vector.observation_space.shape == (4, 6) and vector.action_space.shape == (4, 2)
    obs, _ = vector.reset(seed=3)
    assert np.array_equal(obs, expected_obs.numpy())
    finished = 0
    for step_actions in _actions(12, 4):
        expected = direct.step(torch.from_numpy(step_actions))
        obs, reward, terminated, truncated, infos = vector.step(step_actions)
        assert isinstance(obs, np.ndarray) and obs.dtype == np.float32
        assert np.array_equal(obs, expected[0].numpy())
        assert np.array_equal(reward, expected[1].numpy().astype(np.float64))
        assert np.array_equal(truncated, expected[3].numpy()) and not terminated.any()
        assert np.array_equal(infos["final_obs"], expected[4]["final_observation"].numpy())
        assert np.array_equal(infos["_final_obs"], expected[3].numpy())
        assert np.array_equal(infos["_final_info"], truncated)
        metrics = expected[4]["metrics"]
        for name in ("final_distance", "success"):
            assert np.array_equal(infos["final_info"][name], metrics[name].numpy())
            assert np.array_equal(infos["final_info"][f"_{name}"], truncated)
            assert np.array_equal(infos[name], metrics[name].numpy())
        finished += int(truncated.sum())
    assert finished == 8  # two episodes per row
    vector.close()


def test_next_step_is_the_default_and_reproduces_same_step_one_step_later():
    same = to_gymnasium(PointMass(3, max_episode_steps=3, seed=0), "SameStep")
    nxt = to_gymnasium(PointMass(3, max_episode_steps=3, seed=0))
    assert nxt.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    actions = _actions(6, 3)
    same_obs, _ = same.reset(seed=1)
    next_obs, _ = nxt.reset(seed=1)
    assert np.array_equal(same_obs, next_obs)
    same_steps = [same.step(action) for action in actions]
    # Next-step mode: the same actions, with one (ignored) action after the episode ends.
    next_actions = [*actions[:3], np.full((3, 2), 7.0, np.float32), *actions[3:]]
    next_steps = [nxt.step(action) for action in next_actions]
    for k in range(3):  # the first episode, the finishing step included
        obs, reward, terminated, truncated, infos = next_steps[k]
        s_obs, s_reward, s_terminated, s_truncated, s_infos = same_steps[k]
        assert np.array_equal(reward, s_reward) and np.array_equal(truncated, s_truncated)
        assert np.array_equal(obs, s_infos["final_obs"]) and "final_obs" not in infos
    assert same_steps[2][3].all()
    obs, reward, terminated, truncated, infos = next_steps[3]  # the autoreset step
    assert np.array_equal(obs, same_steps[2][0]) and not (reward.any() or truncated.any())
    assert not infos["_success"].any()
    for k in range(3, 6):  # the second episode, one step later
        obs, reward, _, truncated, _ = next_steps[k + 1]
        s_obs, s_reward, _, s_truncated, s_infos = same_steps[k]
        assert np.array_equal(reward, s_reward) and np.array_equal(truncated, s_truncated)
        assert np.array_equal(obs, s_infos["final_obs"])


def test_next_step_row_by_row_against_the_raw_env():
    env = PointMass(3, max_episode_steps=3, seed=0)
    vector = to_gymnasium(env)
    reference = PointMass(3, max_episode_steps=3, seed=0)
    vector.reset(seed=2)
    vector.step(np.zeros((3, 2), np.float32))
    vector.reset(options={"reset_mask": np.array([True, False, False])})  # rows out of phase
    pending = np.zeros(3, bool)
    last_raw_obs = None
    seen_pending = set()
    for action in _actions(9, 3, seed=1):
        before = env.state_dict()
        reference.load_state_dict(before)
        raw_obs, raw_reward, raw_term, raw_trunc, raw_info = reference.step(
            torch.from_numpy(action)
        )
        obs, reward, terminated, truncated, _ = vector.step(action)
        for row in range(3):
            if pending[row]:  # reset observation, nothing else, state not advanced
                seen_pending.add(row)
                assert np.array_equal(obs[row], last_raw_obs[row])
                assert reward[row] == 0 and not terminated[row] and not truncated[row]
                for key, value in env.state.items():
                    assert torch.equal(value[row], before["state"][key][row])
                assert env.elapsed_steps[row] == 0
            else:  # exactly the raw step; the observation before any reset
                done = bool(raw_term[row] | raw_trunc[row])
                expected = raw_info["final_observation"] if done else raw_obs
                assert np.array_equal(obs[row], expected[row].numpy())
                assert reward[row] == raw_reward[row].item()
                assert truncated[row] == raw_trunc[row].item()
                for key, value in env.state.items():
                    assert torch.equal(value[row], reference.state[key][row])
        pending = terminated | truncated
        last_raw_obs = raw_obs.numpy()
    assert seen_pending == {0, 1, 2}


def test_next_step_needs_per_row_state_and_works_through_wrappers():
    class Opaque:  # a contract env that hides its state
        def __init__(self) -> None:
            self._inner = PointMass(2, seed=0)
            self.num_envs, self.device = 2, self._inner.device
            self.single_observation_space = self._inner.single_observation_space
            self.single_action_space = self._inner.single_action_space

        def reset(self, *, seed=None, options=None):
            return self._inner.reset(seed=seed, options=options)

        def step(self, action):
            return self._inner.step(action)

        def detach_state(self):
            return self._inner.detach_state()

    with pytest.raises(ValueError, match="elapsed_steps.*SAME_STEP"):
        to_gymnasium(Opaque())
    to_gymnasium(Opaque(), AutoresetMode.SAME_STEP).reset(seed=0)
    with pytest.raises(ValueError, match="autoreset_mode"):
        to_gymnasium(PointMass(2), AutoresetMode.DISABLED)
    curriculum = HorizonCurriculum(PointMass(2, max_episode_steps=2, seed=0), 2, 4, 2)
    vector = to_gymnasium(curriculum)
    vector.reset(seed=0)
    for _ in range(2):
        vector.step(np.ones((2, 2), np.float32))
    obs, reward, _, truncated, _ = vector.step(np.ones((2, 2), np.float32))
    assert not reward.any() and not truncated.any()
    assert np.array_equal(obs, curriculum.env.detach_state().numpy())


def test_per_row_seeds():
    env = PointMass(3, max_episode_steps=2, seed=0)  # resets within the steps compared
    obs, _ = env.reset(seed=[5, 5, 7])
    assert torch.equal(obs[0], obs[1]) and not torch.equal(obs[0], obs[2])
    action = torch.rand(3, 2, generator=torch.Generator().manual_seed(0))
    first = [env.step(action)[0] for _ in range(3)]
    again, _ = PointMass(3, seed=9).reset(seed=[7, 5, 5])
    assert torch.equal(again[0], obs[2]) and torch.equal(again[2], obs[1])
    assert torch.equal(env.reset(seed=[5, 5, 7])[0], obs)  # repeated resets reproduce the run
    assert all(torch.equal(env.step(action)[0], step) for step in first)
    mixed, _ = env.reset(seed=[5, None, 5])
    assert torch.equal(mixed[0], mixed[2]) and torch.equal(mixed[0], obs[0])
    with pytest.raises(ValueError, match="3 seeds"):
        env.reset(seed=[1, 2])
    vector = to_gymnasium(PointMass(3, seed=1))
    assert np.array_equal(vector.reset(seed=[5, 5, 7])[0], obs.numpy())


def test_reset_mask_and_refused_options():
    env = PointMass(3, seed=0)
    env.reset(seed=0)
    action = torch.full((3, 2), 0.5)
    env.step(action)
    before = env.state_dict()
    obs, _ = env.reset(options={"reset_mask": np.array([False, True, False])})
    assert env.elapsed_steps.tolist() == [1, 0, 1]
    for key, value in env.state.items():
        assert torch.equal(value[[0, 2]], before["state"][key][[0, 2]])
        starts_at_zero = ("velocity", "max_penetration", "collision_steps")  # as it may be
        assert not torch.equal(value[1], before["state"][key][1]) or key in starts_at_zero
    assert torch.equal(obs, env.detach_state())
    seeded, _ = env.reset(seed=[4, 4, 4], options={"reset_mask": torch.tensor([True, False, True])})
    assert torch.equal(seeded[0], seeded[2]) and torch.equal(seeded[1], obs[1])
    with pytest.raises(ValueError, match="reset_mask must have shape"):
        env.reset(options={"reset_mask": np.array([True, False])})
    with pytest.raises(ValueError, match="'difficulty'"):
        env.reset(options={"difficulty": 2})
    vector = to_gymnasium(PointMass(3, seed=0))
    with pytest.raises(ValueError, match="'difficulty'"):
        vector.reset(options={"difficulty": 2})
    env.reset(options={})  # an empty options dict is fine


def test_next_step_reset_mask_keeps_pending_rows():
    vector = to_gymnasium(PointMass(2, max_episode_steps=1, seed=0))
    vector.reset(seed=0)
    final, _, _, truncated, _ = vector.step(np.zeros((2, 2), np.float32))
    assert truncated.all()
    obs, _ = vector.reset(options={"reset_mask": np.array([True, False])})
    assert np.array_equal(obs[1], final[1])  # row 1 still waits for its autoreset step
    obs, reward, _, truncated, _ = vector.step(np.zeros((2, 2), np.float32))
    assert reward[0] != 0 and truncated[0] and reward[1] == 0 and not truncated[1]


def test_gymnasium_vector_wrappers_accept_next_step_mode():
    vector = to_gymnasium(PointMass(3, max_episode_steps=4, seed=0))
    normalized = NormalizeObservation(vector)
    obs, _ = normalized.reset(seed=0)
    for action in _actions(6, 3):
        obs, *_ = normalized.step(action)
    assert obs.shape == (3, 6) and np.isfinite(obs).all()
    shifted = TransformObservation(to_gymnasium(PointMass(3, seed=0)), lambda o: o + 1.0)
    obs, _ = shifted.reset(seed=0)
    raw, _ = PointMass(3, seed=0).reset(seed=0)
    assert np.allclose(obs, raw.numpy() + 1.0)
    shifted.step(_actions(1, 3)[0])
    with pytest.raises(ValueError, match="NEXT_STEP"):
        NormalizeObservation(to_gymnasium(PointMass(3), AutoresetMode.SAME_STEP))


@pytest.mark.parametrize("env_type", BUILT_IN, ids=lambda env_type: env_type.__name__)
def test_single_env_view_passes_both_env_checkers(env_type):
    from gymnasium.utils.env_checker import check_env as gymnasium_check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = to_gymnasium_env(env_type(1, seed=0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gymnasium_check_env(env)
        sb3_check_env(env)
    advice = ("infinity", "alternative render modes", "symmetric and normalized")
    for warning in caught:  # only advice: unbounded observations, no spec, Pendulum's torque
        assert any(text in str(warning.message) for text in advice), warning.message
    first, _ = env.reset(seed=4)
    assert np.array_equal(env.reset(seed=4)[0], first)
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    assert obs.shape == env.observation_space.shape and type(reward) is float
    assert type(terminated) is bool and type(truncated) is bool and "success" in info
    with pytest.raises(ValueError, match="num_envs=1"):
        to_gymnasium_env(env_type(2))


def test_single_env_view_returns_the_final_observation():
    env = to_gymnasium_env(PointMass(1, max_episode_steps=2, seed=0))
    raw = PointMass(1, max_episode_steps=2, seed=0)
    env.reset(seed=1)
    raw.reset(seed=1)
    for _ in range(2):
        obs, reward, _, truncated, info = env.step(np.array([0.3, -0.2], np.float32))
        expected = raw.step(torch.tensor([[0.3, -0.2]]))
    assert truncated and np.array_equal(obs, expected[4]["final_observation"][0].numpy())
    assert reward == expected[1].item()
    assert info["success"] == expected[4]["metrics"]["success"].item()


def test_sb3_adapter_infos_seeds_and_shared_attributes():
    vec_env = to_sb3(PointMass(3, max_episode_steps=2, seed=0))
    vec_env.seed(10)
    obs = vec_env.reset()
    assert np.array_equal(obs, PointMass(3).reset(seed=[10, 11, 12])[0].numpy())
    for _ in range(2):
        vec_env.step_async(np.zeros((3, 2), np.float32))
        obs, reward, dones, infos = vec_env.step_wait()
    assert dones.all() and reward.dtype == np.float32
    for info in infos:
        assert type(info["is_success"]) is bool and info["TimeLimit.truncated"]
        assert info["terminal_observation"].shape == (6,)
    assert vec_env.get_attr("max_episode_steps", indices=[1]) == [2]
    vec_env.set_attr("max_episode_steps", 5)
    vec_env.set_attr("max_episode_steps", 6, indices=[0, 1, 2])
    assert vec_env.get_attr("max_episode_steps") == [6, 6, 6]
    with pytest.raises(ValueError, match="shared by all 3"):
        vec_env.set_attr("max_episode_steps", 4, indices=[0])
    with pytest.raises(ValueError, match="shared by all 3"):
        vec_env.env_method("detach_state", indices=1)
    assert vec_env.get_attr("max_episode_steps") == [6, 6, 6]
    with pytest.raises(ValueError, match="same-step"):
        to_sb3(to_gymnasium(PointMass(2)))


def test_stable_baselines3_ppo_trains_through_the_adapter():
    from stable_baselines3 import PPO

    vec_env = to_sb3(PointMass(8, max_episode_steps=50, seed=0))
    model = PPO("MlpPolicy", vec_env, n_steps=64, batch_size=128, n_epochs=2, seed=0, device="cpu")
    model.learn(total_timesteps=2048)
    assert model.num_timesteps >= 2048
    assert len(model.ep_success_buffer) > 0  # is_success reaches SB3's episode statistics
    obs = vec_env.reset()
    action, _ = model.predict(obs, deterministic=True)
    assert action.shape == (8, 2)
    obs, reward, dones, infos = vec_env.step(action)
    assert obs.shape == (8, 6) and reward.shape == (8,) and dones.dtype == bool
