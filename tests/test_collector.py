"""Collector: rollout layout, normalization, action clipping and adjoint clipping."""

from __future__ import annotations

import pytest
import torch
from gymnasium.spaces import Discrete

from helpers import LinearPolicy, ScalarEnv, make_rollout
from pathgrad.collector import DifferentiableCollector
from pathgrad.normalization import RunningObservationNormalizer


def test_rollout_layout_and_callbacks():
    env = ScalarEnv([1.0, -2.0], episode_steps=2)
    seen = []
    collector = DifferentiableCollector(env, LinearPolicy(0.5), "cpu")
    rollout = collector.collect(3, on_step_callback=seen.append)  # resets on first use
    assert rollout.num_steps == 3 and len(seen) == 3 and seen[0] is rollout.transitions[0]
    assert rollout.observations.shape == (3, 2, 1)
    assert rollout.rewards.shape == (3, 2) and rollout.rewards.requires_grad
    assert rollout.dones.tolist() == [[False, False], [True, True], [False, False]]
    # x' = 1.5 x: 1 -> 1.5 -> 2.25 (done, reset to 1) -> 1.5
    assert rollout.observations[:, 0, 0].tolist() == [1.0, 1.5, 1.0]
    assert rollout.rewards[:, 0].tolist() == pytest.approx([-2.25, -(2.25**2), -2.25])
    assert torch.equal(rollout.final_observation, collector.observation)
    assert rollout.transitions[1].info["final_observation"][0, 0].item() == 2.25


def test_alive_mask_is_true_through_the_first_done():
    rollout = make_rollout(
        rewards=[[1, 1, 1], [1, 1, 1], [1, 1, 1]],
        dones=[[False, True, False], [True, False, False], [False, True, False]],
    )
    assert rollout.alive_mask.tolist() == [
        [True, True, True],
        [True, False, True],
        [False, False, True],
    ]
    empty = make_rollout(rewards=[[0.0]], dones=[[False]])
    empty = type(empty)(empty.initial_observation, ())
    assert empty.alive_mask.shape == (0, 1) and empty.rewards.shape == (0, 1)
    assert empty.final_observation is empty.initial_observation


class RecordingPolicy(LinearPolicy):
    def __init__(self) -> None:
        super().__init__(0.0)
        self.inputs: list[torch.Tensor] = []

    def get_differentiable_action(self, obs, deterministic=False):
        self.inputs.append(obs.detach().clone())
        return super().get_differentiable_action(obs, deterministic)


def test_policy_sees_normalized_observations_and_rollout_keeps_raw_ones():
    normalizer = RunningObservationNormalizer(1, initial_count=0.0)
    normalizer.update(torch.tensor([[1.0], [3.0]], dtype=torch.float64))  # mean 2, var 1
    policy = RecordingPolicy()
    env = ScalarEnv([4.0, 0.0])
    rollout = DifferentiableCollector(
        env, policy, "cpu", observation_normalizer=normalizer
    ).collect(1)
    assert policy.inputs[0].flatten().tolist() == pytest.approx([2.0, -2.0])
    assert rollout.observations[0].flatten().tolist() == [4.0, 0.0]


def test_clip_actions_to_space_passes_gradient_inside_and_blocks_it_outside():
    # a = w x with w = 0.3: row 0 (x = 0.5) stays inside [-1, 1], row 1 (x = 5) is clipped.
    env = ScalarEnv([0.5, 5.0])
    policy = LinearPolicy(0.3)
    collector = DifferentiableCollector(env, policy, "cpu", clip_actions_to_space=True)
    rollout = collector.collect(1)
    assert rollout.transitions[0].action.flatten().tolist() == pytest.approx([0.15, 1.0])
    (gradient,) = torch.autograd.grad(rollout.rewards.sum(), policy.w)
    x = 0.5
    assert gradient.item() == pytest.approx(-2 * (x + 0.3 * x) * x)  # row 1 contributes 0


def test_adjoint_clipping_matches_a_hand_computation():
    # One step: r = -(x + a)^2, adjoint dr/da = -2 (x + a); rows are clipped to norm 0.5.
    x0 = [0.1, 2.0, -3.0]
    policy = LinearPolicy(0.3)
    collector = DifferentiableCollector(ScalarEnv(x0), policy, "cpu", action_adjoint_max_norm=0.5)
    rollout = collector.collect(1)
    rollout.rewards.sum().backward()
    adjoints = [-2 * (x + 0.3 * x) for x in x0]
    clipped = [max(-0.5, min(0.5, a)) for a in adjoints]
    assert policy.w.grad.item() == pytest.approx(
        sum(c * x for c, x in zip(clipped, x0, strict=True))
    )
    metrics = rollout.action_gradient_stats.metrics()
    assert metrics["action_adjoint_preclip_max_norm"] == pytest.approx(max(map(abs, adjoints)))
    assert metrics["action_adjoint_preclip_mean_norm"] == pytest.approx(sum(map(abs, adjoints)) / 3)
    assert metrics["action_adjoint_clipped_fraction"] == pytest.approx(2 / 3)
    assert metrics["action_adjoint_nonfinite_fraction"] == 0.0


def test_detach_state_starts_a_new_graph():
    collector = DifferentiableCollector(ScalarEnv([1.0]), LinearPolicy(0.5), "cpu")
    collector.collect(2)
    observation = collector.detach_state()
    assert not observation.requires_grad
    second = collector.collect(1)
    assert not second.initial_observation.requires_grad
    collector.clear_observation()
    assert collector.observation is None


def test_collector_errors():
    env = ScalarEnv([1.0])
    with pytest.raises(ValueError, match="action_adjoint_max_norm cannot be negative"):
        DifferentiableCollector(env, LinearPolicy(), "cpu", action_adjoint_max_norm=-1.0)
    with pytest.raises(ValueError, match="num_steps must be positive, got 0"):
        DifferentiableCollector(env, LinearPolicy(), "cpu").collect(0)
    env.single_action_space = Discrete(3)
    with pytest.raises(TypeError, match="requires an action space with low/high bounds"):
        DifferentiableCollector(env, LinearPolicy(), "cpu", clip_actions_to_space=True)
