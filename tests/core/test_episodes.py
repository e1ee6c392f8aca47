"""Vectorized done bookkeeping against plain per-step loops."""

from __future__ import annotations

import pytest
import torch

from pathgrad.core.episodes import EpisodeTracker, last_done_before, restarting_discounts


def random_dones(steps: int, envs: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(steps, envs, generator=generator) < 0.3


def test_last_done_before_on_a_hand_example():
    dones = torch.tensor([[False, True], [True, False], [False, False]])
    assert last_done_before(dones).tolist() == [[-1, -1], [-1, 0], [1, 0], [1, 0]]


@pytest.mark.parametrize("seed", range(5))
def test_restarting_discounts_follow_the_recurrence(seed):
    dones = random_dones(9, 4, seed)
    initial = torch.rand(4, dtype=torch.float64) + 0.5
    discounts, carried = restarting_discounts(dones, 0.9, initial)
    expected = []
    discount = initial.clone()
    for step in range(dones.shape[0]):
        expected.append(discount)
        discount = torch.where(dones[step], torch.ones_like(discount), discount * 0.9)
    assert torch.allclose(discounts, torch.stack(expected), rtol=1e-12)
    assert torch.allclose(carried, discount, rtol=1e-12)
    plain, _ = restarting_discounts(dones, 0.5)
    assert plain.dtype == torch.float64 and plain[0].tolist() == [1.0] * 4


def test_episode_tracker_matches_step_by_step_accounting():
    tracker = EpisodeTracker(3, "cpu", window=50)
    generator = torch.Generator().manual_seed(0)
    running = torch.zeros(3, dtype=torch.float64)
    length = torch.zeros(3, dtype=torch.long)
    expected_returns, expected_lengths = [], []
    for segment in range(6):  # flushes between segments carry the running sums
        for _ in range(1 + segment):
            reward = torch.randn(3, generator=generator)
            done = torch.rand(3, generator=generator) < 0.4
            tracker.record(reward, done)
            running += reward.double()
            length += 1
            for env in range(3):
                if done[env]:
                    expected_returns.append(running[env].item())
                    expected_lengths.append(float(length[env]))
            running[done] = 0.0
            length[done] = 0
        tracker.flush()
    assert list(tracker.returns) == pytest.approx(expected_returns, rel=1e-12)
    assert list(tracker.lengths) == expected_lengths
    assert torch.allclose(tracker.running_return, running)


def test_episode_tracker_state_round_trip_and_window():
    tracker = EpisodeTracker(2, "cpu", window=2)
    for value in (1.0, 2.0, 3.0):
        tracker.record(torch.tensor([value, 0.5]), torch.tensor([True, False]))
    tracker.record(torch.tensor([1.0, 1.0]), torch.tensor([False, False]))
    state = tracker.state_dict()
    assert state["returns"] == [2.0, 3.0]  # only the window is kept
    assert state["running_return"].tolist() == [1.0, 2.5]
    restored = EpisodeTracker(2, "cpu", window=2)
    restored.load_state_dict(state)
    restored.record(torch.tensor([0.0, 0.5]), torch.tensor([True, True]))
    restored.flush()
    assert list(restored.returns) == [1.0, 3.0] and list(restored.lengths) == [2.0, 5.0]


def test_steps_recorded_one_at_a_time_or_in_runs_give_the_same_episodes():
    torch.manual_seed(0)
    rewards = torch.randn(9, 3)
    dones = torch.rand(9, 3) < 0.3
    single, runs = EpisodeTracker(3, "cpu"), EpisodeTracker(3, "cpu")
    for step in range(9):
        single.record(rewards[step], dones[step])
    runs.record_steps(rewards[:4], dones[:4])
    runs.record(rewards[4], dones[4])
    runs.record_steps(rewards[5:], dones[5:])
    single.flush(), runs.flush()
    assert dones.any() and list(runs.returns) == list(single.returns)
    assert list(runs.lengths) == list(single.lengths)
    assert torch.equal(runs.running_return, single.running_return)
