"""PointMass: seeding, auto-reset, gradients against finite differences, exact state."""

from __future__ import annotations

import pytest
import torch

from pathgrad.envs import PointMass
from pathgrad.testing import check_env_gradients


def test_float64_on_request_and_bad_dtype():
    env = PointMass(2, dtype="float64")
    obs, _ = env.reset(seed=0)
    assert obs.dtype == torch.float64
    assert env.single_observation_space.dtype == "float64"
    with pytest.raises(ValueError, match="dtype must be 'float32' or 'float64'"):
        PointMass(2, dtype="float16")


def test_constructor_and_step_validation():
    with pytest.raises(ValueError, match="num_envs must be positive"):
        PointMass(0)
    with pytest.raises(ValueError, match="dt must be positive"):
        PointMass(1, dt=0.0)
    with pytest.raises(ValueError, match="damping cannot be negative"):
        PointMass(1, damping=-1.0)
    with pytest.raises(ValueError, match=r"action must have shape \(2, 2\)"):
        PointMass(2).step(torch.zeros(2, 3))


def test_dynamics_match_the_documented_equations():
    env = PointMass(1, dtype="float64", dt=0.1, mass=2.0, max_force=3.0, damping=0.5)
    env.reset(seed=0)
    position = torch.tensor([[0.2, -0.4]], dtype=torch.float64)
    velocity = torch.tensor([[1.0, 0.5]], dtype=torch.float64)
    goal = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    env.state = {"position": position, "velocity": velocity, "goal": goal}
    action = torch.tensor([[0.5, -1.0]], dtype=torch.float64)
    obs, reward, terminated, truncated, info = env.step(action)
    velocity_next = velocity + 0.1 * (3.0 * action / 2.0 - 0.5 * velocity)
    position_next = position + 0.1 * velocity_next
    distance = torch.sqrt(((goal - position_next) ** 2).sum() + 1e-4)
    expected_reward = -distance - 0.01 * (action**2).sum()
    assert torch.allclose(obs, torch.cat([position_next, velocity_next, goal - position_next], -1))
    assert torch.allclose(reward, expected_reward.reshape(1))
    assert not terminated.any() and not truncated.any()
    assert torch.allclose(info["metrics"]["final_distance"], (goal - position_next).norm(dim=-1))


@pytest.mark.parametrize(("steps", "episode"), [(1, 100), (5, 100), (5, 3)])
def test_gradcheck_reward_and_observation_in_action_and_initial_state(steps, episode):
    env = PointMass(3, dtype="float64", max_episode_steps=episode, seed=0)
    assert check_env_gradients(env, steps, seed=1)


def test_obstacle_penalty_matches_a_hand_computation_and_reports_penetration():
    env = PointMass(2, dtype="float64", obstacles=[(0.0, 0.0, 0.25)], obstacle_cost=20.0, seed=0)
    env.reset(seed=0)
    env.state = {
        "position": torch.tensor([[0.1, 0.0], [0.9, 0.9]], dtype=torch.float64),
        "velocity": torch.zeros(2, 2, dtype=torch.float64),
        "goal": torch.tensor([[0.5, 0.0], [0.9, 0.9]], dtype=torch.float64),
    }
    zero = torch.zeros(2, 2, dtype=torch.float64)
    _, reward, _, _, info = env.step(zero)
    free = PointMass(2, dtype="float64", obstacles=[], seed=0)
    free.reset(seed=0)
    free.state = {
        "position": torch.tensor([[0.1, 0.0], [0.9, 0.9]], dtype=torch.float64),
        "velocity": torch.zeros(2, 2, dtype=torch.float64),
        "goal": torch.tensor([[0.5, 0.0], [0.9, 0.9]], dtype=torch.float64),
    }
    _, free_reward, _, _, free_info = free.step(zero)
    assert reward[0].item() == pytest.approx(free_reward[0].item() - 20.0 * 0.15**2)
    assert reward[1].item() == free_reward[1].item()
    assert info["metrics"]["penetration"].tolist() == pytest.approx([0.15, 0.0])
    assert free_info["metrics"]["penetration"].tolist() == [0.0, 0.0]
    # The deepest penetration of the episode, not the last step's, and the steps inside.
    env.state = {**env.state, "position": torch.tensor([[0.9, 0.0], [0.9, 0.9]]).double()}
    _, _, _, _, info = env.step(zero)
    assert info["metrics"]["penetration"].tolist() == pytest.approx([0.15, 0.0])
    assert info["metrics"]["collision_steps"].tolist() == [1.0, 0.0]


def test_a_state_saved_before_the_episode_records_still_loads():
    env = PointMass(3, seed=0)
    env.reset(seed=0)
    old = env.state_dict()
    for key in ("max_penetration", "collision_steps"):
        del old["state"][key]
    env.step(torch.ones(3, 2))
    env.load_state_dict(old)
    assert env.state["max_penetration"].tolist() == [0.0, 0.0, 0.0]
    assert torch.equal(env.state["position"], old["state"]["position"])


def test_gradients_stay_finite_difference_exact_across_the_obstacle_boundary():
    start = {
        "position": torch.tensor([[0.3, 0.0], [0.0, -0.26], [-0.2, 0.1]], dtype=torch.float64),
        "velocity": torch.tensor([[-1.0, 0.0], [0.0, 0.5], [0.4, 0.0]], dtype=torch.float64),
        "goal": torch.tensor([[-0.5, 0.0], [0.0, 0.5], [0.5, 0.5]], dtype=torch.float64),
    }
    assert check_env_gradients(PointMass(3, dtype="float64"), 5, initial_state=start)


def test_starts_and_goals_are_pushed_out_of_obstacles():
    env = PointMass(4096, obstacles=[(0.0, 0.0, 0.5)], seed=0)
    env.reset(seed=1)
    for key in ("position", "goal"):
        assert env.state[key].norm(dim=-1).min() >= 0.55 - 1e-6
    with pytest.raises(ValueError, match="obstacles must be a list of"):
        PointMass(1, obstacles=[(0.0, 0.0, -1.0)])
    with pytest.raises(ValueError, match="obstacle_cost cannot be negative"):
        PointMass(1, obstacle_cost=-1.0)


def test_state_gradient_decay_scales_the_adjoint_as_computed_by_hand():
    def reward_gradients(decay: float) -> list[torch.Tensor]:
        env = PointMass(2, dtype="float64", obstacles=[], seed=0)
        env.state_gradient_decay = decay
        env.reset(seed=0)
        first_action = torch.full((2, 2), 0.3, dtype=torch.float64, requires_grad=True)
        rewards = [env.step(first_action)[1]]
        for _ in range(3):
            rewards.append(env.step(torch.zeros(2, 2, dtype=torch.float64))[1])
        return [torch.autograd.grad(r.sum(), first_action, retain_graph=True)[0] for r in rewards]

    exact, decayed = reward_gradients(1.0), reward_gradients(0.4)
    for steps_later, (g_exact, g_decayed) in enumerate(zip(exact, decayed, strict=True)):
        # The action reaches the reward k steps later through k carried states.
        assert torch.allclose(g_decayed, 0.4**steps_later * g_exact, rtol=1e-12)
    assert exact[3].abs().sum() > 0
    # The forward pass is unchanged.
    env = PointMass(2, dtype="float64", seed=0)
    env.state_gradient_decay = 0.4
    env.reset(seed=0)
    reference = PointMass(2, dtype="float64", seed=0)
    reference.reset(seed=0)
    action = torch.full((2, 2), 0.3, dtype=torch.float64, requires_grad=True)
    for _ in range(3):
        assert torch.equal(env.step(action)[0], reference.step(action)[0])
