"""A window's random draws in one call, where that gives the numbers of step-by-step draws.

An eager update draws its policy noise and its reset states step by step; a
compiled one takes the whole window's draws up front (so that both sample the
same actions and resets). One call per window instead of one per step saves the
per-call cost (about 25 microseconds per reset draw on the CPU: 0.8 ms of a
32-step update, an eighth of it at 16 envs), but only where it yields the very
same numbers and leaves the generator where the steps would. :class:`WindowDraws`
checks that once per window length, on the first window (drawing both ways from
the same generator state), and draws step by step from then on wherever it does
not hold (CUDA's generators, an env drawing other than through its uniform
helper, noise sizes the CPU's normal sampler, which fills blocks of 16, splits
differently). Policies draw their noise from torch's global RNG (the state saved
and restored here).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["StepInputDraws", "WindowDraws", "chunk_draws"]


def _stack(draws: list[Any]) -> Any:
    """Steps' draws ``[N, ...]`` (tensors, dicts of them, or ``None``) as ``[K, N, ...]``."""
    first = draws[0]
    if first is None:
        return None
    if isinstance(first, dict):
        return {key: torch.stack([draw[key] for draw in draws]) for key in first}
    return torch.stack(draws)


def _same(left: Any, right: Any) -> bool:
    """Bit-equal draws (same structure, dtypes, shapes and values)."""
    if left is None or right is None:
        return left is None and right is None
    if isinstance(left, dict):
        return (
            isinstance(right, dict)
            and left.keys() == right.keys()
            and all(_same(left[key], right[key]) for key in left)
        )
    return (
        isinstance(right, torch.Tensor)
        and left.dtype == right.dtype
        and left.shape == right.shape
        and torch.equal(left, right)
    )


class WindowDraws:
    """Draws of ``count`` steps, in one call once shown equal to ``count`` single calls.

    Args:
        step_draw: One step's draw from the generator (``*args`` passed on).
        window_draw: ``count`` steps' draws in one call, ``[count, N, ...]``.
        get_state: The generator's state (a tensor).
        set_state: Restores a state from ``get_state``.
        batch: Whether one-call draws may be used at all (``False``: always step by step).
    """

    def __init__(
        self,
        step_draw: Callable[..., Any],
        window_draw: Callable[..., Any],
        get_state: Callable[[], torch.Tensor],
        set_state: Callable[[torch.Tensor], None],
        batch: bool = True,
    ) -> None:
        self._step_draw = step_draw
        self._window_draw = window_draw
        self._get_state = get_state
        self._set_state = set_state
        self._batch = bool(batch)
        self.verified: dict[int, bool] = {}  # window length -> one call gives the same draws

    def draw(self, count: int, *args: Any) -> Any:
        """The draws of ``count`` steps, ``[count, N, ...]``."""
        if self.verified.get(count):
            return self._window_draw(count, *args)
        if not self._batch or count in self.verified:
            return self._stepwise(count, *args)
        before = self._get_state()
        stepwise = self._stepwise(count, *args)
        after = self._get_state()
        self.verified[count] = self._one_call_matches(count, before, after, stepwise, *args)
        return stepwise

    def _stepwise(self, count: int, *args: Any) -> Any:
        return _stack([self._step_draw(*args) for _ in range(count)])

    def _one_call_matches(
        self, count: int, before: torch.Tensor, after: torch.Tensor, stepwise: Any, *args: Any
    ) -> bool:
        """Whether one call from ``before`` gives ``stepwise`` and ends at ``after``."""
        try:
            self._set_state(before)
            window = self._window_draw(count, *args)
            return _same(window, stepwise) and torch.equal(self._get_state(), after)
        except Exception:  # noqa: BLE001 - any failure means: draw step by step
            return False
        finally:
            self._set_state(after)


class StepInputDraws:
    """A chunk's random inputs: policy noise (torch's global RNG) then reset states (the env's
    generator), in an eager rollout's order, each ``[K, ...]`` and in one call where shown
    equal (on the CPU; CUDA's generators advance differently for one large draw)."""

    def __init__(self, env: Any, policy: Any, deterministic: bool) -> None:
        cpu = torch.device(env.device).type == "cpu"

        def noise_window(count: int, observation: torch.Tensor) -> torch.Tensor | None:
            return policy.sample_noise(observation.expand(count, *observation.shape), deterministic)

        self.noises = WindowDraws(
            lambda observation: policy.sample_noise(observation, deterministic),
            noise_window,
            torch.get_rng_state,
            torch.set_rng_state,
            batch=cpu,
        )
        reset_window = getattr(env, "draw_reset_window", None)
        self.resets = WindowDraws(
            env.draw_reset_states,
            reset_window,
            lambda: env.generator.get_state(),
            lambda state: env.generator.set_state(state),
            batch=cpu and reset_window is not None,
        )

    def draw(
        self, observation: torch.Tensor, count: int
    ) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        """``count`` steps' noise ``[K, N, A]`` (``None``: the mean) and reset states."""
        # Every noise draw of a step comes before its reset draw in the eager step too,
        # and the two generators are independent.
        return self.noises.draw(count, observation.detach()), self.resets.draw(count)


def chunk_draws(
    noises: torch.Tensor | None, resets: dict[str, torch.Tensor], start: int, count: int
) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
    """Steps ``start`` to ``start + count`` of a segment's draws (views)."""
    span = slice(start, start + count)
    return (None if noises is None else noises[span]), {k: v[span] for k, v in resets.items()}
