"""A window's draws in one call: the same numbers as step by step, or step by step."""

from __future__ import annotations

import pytest
import torch

import pathgrad
from pathgrad.compiled.window_draws import WindowDraws

TORCH_ENVS = [
    "CartPoleSwingUp", "DiffRLCartPoleSwingUp", "MountainCarContinuous", "Pendulum",
    "PointMass", "Quadrotor", "Reacher",
]  # fmt: skip


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", TORCH_ENVS)
def test_a_reset_window_equals_the_steps_draws(name, dtype):
    env = pathgrad.build_learning_env(name, num_envs=5, device="cpu", seed=3, dtype=dtype)
    before = env.generator.get_state()
    steps = [env.draw_reset_states() for _ in range(4)]
    after = env.generator.get_state()
    env.generator.set_state(before)
    window = env.draw_reset_window(4)
    assert torch.equal(env.generator.get_state(), after)
    assert window.keys() == steps[0].keys()
    for key, value in window.items():
        assert value.shape == (4, *steps[0][key].shape), key
        assert torch.equal(value, torch.stack([step[key] for step in steps])), key


class _Counted:
    """Step and window draws from one generator, counting the window calls."""

    def __init__(self, width: int, window_draw=None) -> None:
        self.generator = torch.Generator().manual_seed(0)
        self.width = width
        self.window_calls = 0
        self._window_draw = window_draw

    def step(self) -> torch.Tensor:
        return torch.randn(self.width, generator=self.generator, dtype=torch.float64)

    def window(self, count: int) -> torch.Tensor:
        self.window_calls += 1
        if self._window_draw is not None:
            return self._window_draw(self, count)
        return torch.randn(count, self.width, generator=self.generator, dtype=torch.float64)

    def draws(self) -> WindowDraws:
        return WindowDraws(
            self.step, self.window, self.generator.get_state, self.generator.set_state
        )


def _stepwise(width: int, counts: list[int]) -> list[torch.Tensor]:
    reference = _Counted(width)
    return [torch.stack([reference.step() for _ in range(count)]) for count in counts]


def test_windows_are_drawn_in_one_call_once_shown_equal():
    counts = [3, 3, 3, 2, 2]
    source = _Counted(16)  # the CPU's normal sampler fills blocks of 16 alike either way
    draws = source.draws()
    got = [draws.draw(count) for count in counts]
    for ours, theirs in zip(got, _stepwise(16, counts), strict=True):
        assert torch.equal(ours, theirs)
    assert draws.verified == {3: True, 2: True}
    assert source.window_calls == 2 + 3  # a check per length, then one call per later window


def test_windows_are_drawn_step_by_step_where_one_call_differs():
    counts = [3, 3, 3]
    source = _Counted(8)  # 24 normals in one call (blocks of 16) are not three calls of 8
    draws = source.draws()
    got = [draws.draw(count) for count in counts]
    for ours, theirs in zip(got, _stepwise(8, counts), strict=True):
        assert torch.equal(ours, theirs)
    assert draws.verified == {3: False}
    assert source.window_calls == 1  # the check only


def test_a_failing_or_misshapen_window_draw_means_step_by_step():
    def raises(source, count):
        raise RuntimeError("no window draws here")

    def misshapen(source, count):
        return torch.randn(count * source.width, generator=source.generator, dtype=torch.float64)

    for window_draw in (raises, misshapen):
        source = _Counted(16, window_draw)
        draws = source.draws()
        got = [draws.draw(2) for _ in range(3)]
        for ours, theirs in zip(got, _stepwise(16, [2, 2, 2]), strict=True):
            assert torch.equal(ours, theirs)
        assert draws.verified == {2: False}


def test_batching_off_never_draws_a_window():
    source = _Counted(16)
    draws = WindowDraws(
        source.step, source.window, source.generator.get_state, source.generator.set_state,
        batch=False,
    )  # fmt: skip
    got = [draws.draw(3) for _ in range(2)]
    for ours, theirs in zip(got, _stepwise(16, [3, 3]), strict=True):
        assert torch.equal(ours, theirs)
    assert source.window_calls == 0 and draws.verified == {}
