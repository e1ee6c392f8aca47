"""AnymalVelocity: legged_gym's flat velocity-tracking task on ANYmal C (commands,
observation, reward terms, termination) on Newton."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("newton", reason="the Newton backend needs pathgrad[newton]")

from pathgrad.envs.newton.robots.anymal_velocity import (  # noqa: E402
    DEFAULT_STANCE,
    RESAMPLE_STEPS,
    SCALES,
    AnymalVelocity,
)

pytestmark = pytest.mark.xdist_group("anymal_velocity")


@pytest.fixture(scope="module")
def env() -> AnymalVelocity:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AnymalVelocity(2, seed=0)


def standing(env, num: int = 2, height: float = 0.6) -> dict:
    state = env._sample_initial_state(num)
    qpos = torch.zeros(num, 19)
    qpos[:, 2], qpos[:, 3], qpos[:, 7:] = height, 1.0, torch.tensor(DEFAULT_STANCE)
    state["joint_q"], state["joint_qd"] = env.joint_state_from_mujoco(qpos, torch.zeros(num, 18))
    return state


def test_commands_follow_legged_gyms_ranges_and_are_resampled(env):
    draws = torch.rand(4096, 3) * 2 - 1
    commands = env._commands(draws)
    planar = commands[:, :2].norm(dim=-1)
    assert bool(((planar == 0) | (planar > 0.2)).all()) and float(planar.max()) <= 2**0.5
    assert float(commands[:, 2].abs().max()) <= 1.5 and float(commands[:, 2].abs().max()) > 1.4
    state = standing(env)
    state["steps"] = torch.tensor([RESAMPLE_STEPS - 1.0, 5.0])
    following = env._dynamics(state, torch.zeros(2, 12))
    assert not torch.equal(following["command_draws"][0], state["command_draws"][0])
    assert torch.equal(following["command_draws"][1], state["command_draws"][1])
    assert bool(following["command_draws"].abs().max() <= 1.0)


def test_observation_of_a_level_base_at_rest(env):
    state = standing(env)
    observation = env._observe(state)
    assert observation.shape == (2, 48)
    assert torch.allclose(observation[:, 6:9], torch.tensor([0.0, 0.0, -1.0]), atol=1e-6)
    assert torch.allclose(observation[:, 12:24], torch.zeros(2, 12), atol=1e-6)  # the stance
    command = env._commands(state["command_draws"])
    assert torch.allclose(observation[:, 9:12], command * torch.tensor([2.0, 2.0, 0.25]))


def test_reward_terms_at_rest_under_a_zero_command(env):
    """At rest in the stance under a zero command: the full tracking reward (1.0 + 0.5,
    times dt) and no penalty (the PD law gives no torque with its targets at the stance)."""
    state = standing(env)
    state["command_draws"] = torch.zeros(2, 3)
    terms = env.reward_terms(state, torch.zeros(2, 12), state)
    assert terms["tracking_lin_vel"].tolist() == [1.0, 1.0]
    assert terms["tracking_ang_vel"].tolist() == [1.0, 1.0]
    for name in ("lin_vel_z", "ang_vel_xy", "orientation", "torques", "dof_acc", "action_rate"):
        assert terms[name].abs().max() < 1e-9, name
    reward = env._reward(state, torch.zeros(2, 12), state)
    assert torch.allclose(reward, torch.full((2,), 0.02 * 1.5))


def test_the_base_on_the_ground_terminates_and_a_fixed_command_holds(env):
    assert env._terminated(standing(env, height=0.6)).tolist() == [False, False]
    assert env._terminated(standing(env, height=0.05)).tolist() == [True, True]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        driven = AnymalVelocity(2, seed=0, command=(0.5, 0.0, 0.2))
    state = driven._sample_initial_state(2)
    held = driven._commands(state["command_draws"])
    assert torch.allclose(held, torch.tensor([[0.5, 0.0, 0.2]] * 2))
    with pytest.raises(ValueError, match=r"command must be \(vx, vy, yaw_rate\)"):
        AnymalVelocity(2, command=(1.0, 0.0))


def test_a_fall_costs_the_termination_scale_and_bad_scales_are_named(env):
    """The termination term is 1 on a step that ends on the ground (0 by default, as on
    ANYmal C); ``reward_scales`` replaces scales by name and names a bad entry."""
    fallen, upright = standing(env, height=0.05), standing(env, height=0.6)
    assert env.reward_terms(upright, torch.zeros(2, 12), fallen)["termination"].tolist() == [
        1.0, 1.0]  # fmt: skip
    assert env.reward_terms(upright, torch.zeros(2, 12), upright)["termination"].tolist() == [
        0.0, 0.0]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        penalised = AnymalVelocity(2, seed=0, reward_scales={"termination": -250.0},
                                   only_positive_rewards=False)  # fmt: skip
    action = torch.zeros(2, 12)
    plain = penalised._reward(upright, action, fallen)
    penalised.reward_scales = {**penalised.reward_scales, "termination": 0.0}
    difference = plain - penalised._reward(upright, action, fallen)
    assert torch.allclose(difference, torch.full((2,), -250.0 * 0.02))
    with pytest.raises(ValueError, match="reward_scales has no term 'falls'; terms: "):
        AnymalVelocity(2, reward_scales={"falls": -1.0})
    with pytest.raises(ValueError, match="reward_scales.termination must be a finite number"):
        AnymalVelocity(2, reward_scales={"termination": float("nan")})


def test_the_friction_slope_is_a_stiff_term_that_names_the_foot(env):
    """Newton's slope (1000) on the bare foot's 0.16 kg is above its bound at the env's
    1.25 ms substeps (its window gradient overflows); on the foot with its drives' armature
    (1.14 kg) it is below it."""
    from pathgrad.envs.newton.engine.stability import stiff_terms

    terms = [(bound, text) for bound, text in stiff_terms(env) if "friction slope" in text]
    assert len(terms) == 1
    bound, text = terms[0]
    assert "contact friction slope 1000 " in text and "_SHANK" in text and "below it" in text
    assert 0.0021 < bound < 0.0025  # 2 x 1.14 kg / 1000 N s/m
    assert env.steps_are_stable()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stiff = AnymalVelocity(2, seed=0, contact_kf=1000.0, armature=0.0)
    assert not stiff.steps_are_stable()
    assert "contact friction slope 1000 " in stiff.instability_hint()
    assert "above it" in stiff.instability_hint()
    model = stiff.simulation.model  # frictionless (MJCF condim 1): no friction term
    model.shape_material_mu.assign(np.zeros(model.shape_count, dtype=np.float32))
    assert not [text for _, text in stiff_terms(stiff) if "friction slope" in text]
    assert stiff.steps_are_stable()


@pytest.fixture(scope="module")
def settled() -> tuple[AnymalVelocity, dict]:
    """The robot after 60 steps of zero actions from a reset: standing on its four feet."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = AnymalVelocity(2, seed=0, only_positive_rewards=False, command=(0.5, 0.0, 0.3))
    state = env._sample_initial_state(2)
    with torch.no_grad():
        for _ in range(60):
            state = env._dynamics(state, torch.zeros(2, 12))
    assert state["touching"].all()
    return env, state


def test_a_window_in_sustained_foot_contact_has_the_gradients_of_fd(settled):
    """Three steps standing on four feet (PD torques, ground contact and friction, every
    reward term): d(rewards + weighted observations)/d(actions) of row 0 against central
    differences (measured 0.8% at eps 3e-3 and 1e-2 in float32)."""
    from pathgrad.testing.jacobians import finite_differences, jacobians

    env, state = settled
    generator = torch.Generator().manual_seed(0)
    weights = torch.randn(3, 48, generator=generator)

    def window(actions: torch.Tensor) -> tuple[torch.Tensor]:
        current, total = state, torch.zeros(())
        for step, action in enumerate(actions.view(3, 12)):
            both = torch.stack([action, torch.zeros(12)])
            following = env._dynamics(current, both)
            observation = env._observe(following)[0]
            total = total + env._reward(current, both, following)[0]
            total = total + (observation * weights[step]).sum()
            current = following
        return (total.reshape(1),)

    start = 0.1 * torch.randn(36, generator=generator)
    (analytic,) = jacobians(window, (start.clone().requires_grad_(),))
    (numeric,) = finite_differences(window, (start,), 3e-3)
    assert float(numeric.norm()) > 1.0
    assert float((analytic - numeric).norm() / numeric.norm()) < 0.03


def test_a_chain_through_a_reset_has_the_gradients_of_fd(settled):
    """Four steps through ``step``: row 1 reaches its time limit at step 2 and restarts
    from a reset (the same draws in every evaluation). d(weighted rewards and
    observations)/d(first action) against central differences; the restarted row does not
    depend on it."""
    from pathgrad.testing.jacobians import finite_differences, jacobians

    env, state = settled
    generator = torch.Generator().manual_seed(1)
    actions = 0.1 * torch.randn(4, 2, 12, generator=generator)
    weights = torch.randn(4, 2, 49, generator=generator)
    seen = []

    def rows(first: torch.Tensor) -> list[torch.Tensor]:
        env.state = dict(state)
        env.elapsed_steps = torch.tensor([0, env.max_episode_steps - 2])
        env.generator.manual_seed(5)
        out, endings = [], []
        for step in range(4):
            observation, reward, _, truncated, _ = env.step(first if step == 0 else actions[step])
            endings.append(truncated.tolist())
            out.append(torch.cat([reward[:, None], observation], -1))
        seen.append(endings)
        return out

    def chain(first: torch.Tensor) -> tuple[torch.Tensor]:
        pairs = zip(rows(first.view(2, 12)), weights, strict=True)
        total = sum((row * weight).sum() for row, weight in pairs)
        return (total.reshape(1),)

    start = actions[0].reshape(-1)
    first = start.clone().requires_grad_()
    restarted = rows(first.view(2, 12))[3][1]
    assert not torch.autograd.grad(restarted.sum(), first, allow_unused=True)[0].any()
    (analytic,) = jacobians(chain, (start.clone().requires_grad_(),))
    (numeric,) = finite_differences(chain, (start,), 3e-3)
    assert all(endings[1] == [False, True] for endings in seen), seen
    assert float((analytic - numeric).norm() / numeric.norm()) < 0.03


def test_smooth_collisions_count_a_knee_by_its_depth_and_have_a_gradient(env):
    """Knees 2.5 cm above the ground (their drives, radius 5 cm, half sunk): legged_gym's
    count is 1 per knee with no gradient; ``smooth_collisions`` counts 0.5 per knee, and
    lifting the base lowers it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        smooth = AnymalVelocity(2, seed=0, smooth_collisions=True)
    low = standing(env, height=0.62 - 0.357 + 0.025)  # the knees' centres at 2.5 cm
    action = torch.zeros(2, 12)
    assert env.reward_terms(low, action, low)["collision"].tolist() == [4.0, 4.0]
    joint_q = low["joint_q"].clone().requires_grad_()
    lifted = {**low, "joint_q": joint_q}
    count = smooth.reward_terms(lifted, action, lifted)["collision"]
    assert count.detach().tolist() == pytest.approx([2.0, 2.0], abs=0.05)
    (gradient,) = torch.autograd.grad(count.sum(), joint_q)
    assert gradient[:, 2].tolist() == pytest.approx([-4.0 / 0.05] * 2, rel=1e-3)  # d/d(base z)


def test_the_metrics_are_the_episode_s_means_of_the_terms_and_the_errors(settled):
    """``info["metrics"]``: each term's scaled share of the reward (``reward_<term>``) and
    the tracking errors, as means over the episode's steps (legged_gym logs its terms per
    episode); without the clip the shares sum to the mean reward."""
    env, state = settled
    env.state = {**state, "steps": torch.zeros(2),
                 "episode_sums": torch.zeros_like(state["episode_sums"])}  # fmt: skip
    env.elapsed_steps = torch.zeros(2, dtype=torch.long)
    rewards, errors = [], []
    for _ in range(2):
        _, reward, _, _, info = env.step(0.1 * torch.ones(2, 12))
        rewards.append(reward.detach())
        errors.append(env._terms_and_errors(env.state, torch.zeros(2, 12), env.state)[1])
    metrics = info["metrics"]
    shares = [metrics[f"reward_{name}"] for name in SCALES]
    assert torch.allclose(sum(shares), (rewards[0] + rewards[1]) / 2, atol=1e-6)
    assert metrics["reward_tracking_lin_vel"].gt(0).all() and metrics["reward_torques"].lt(0).all()
    mean_error = (errors[0] + errors[1]) / 2
    assert torch.allclose(metrics["linear_velocity_error"], mean_error[:, 0], atol=1e-6)
    assert torch.allclose(metrics["yaw_rate_error"], mean_error[:, 1], atol=1e-6)
    assert not torch.allclose(errors[0], errors[1])  # a mean, not the last step's value
