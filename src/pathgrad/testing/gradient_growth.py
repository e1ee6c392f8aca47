"""How the gradient of a window's return in its first action grows with the window.

Through contacts and stiff dynamics, ``d(return of a W-step window) / d(first
action)`` can grow by orders of magnitude with ``W`` (the SHAC benchmark's Ant:
at most 0.13 for one step, 5e11 for 16, in a few envs of 16). A training window
that long gives updates dominated by those envs, or a gradient that
overflows. ``pathgrad check-env`` prints the growth with what bounds it
(``trainer.action_adjoint_max_norm``, ``trainer.segment_length``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from pathgrad.testing.behaviour import random_actions

__all__ = ["WINDOWS", "describe_gradient_growth", "window_gradient_norms"]

WINDOWS = (1, 4, 16, 32)
# The largest norm at the longest window over that at the second (4 steps): a pendulum's
# swings give 120x, NewtonAnt 1200x (both train), DiffRLAnt 7e7x (per-env clipping needed).
_GROWTH_WORTH_SAYING = 1e4


def window_gradient_norms(
    env: Any, *, seed: int = 0, windows: Sequence[int] = WINDOWS, warmup: int = 20
) -> dict[int, torch.Tensor]:
    """Per env, the norm of ``d(window return)/d(first action)`` for each window length.

    Every window starts from the same state: ``reset(seed)`` then ``warmup``
    random steps without gradients (a robot dropped from its start pose meets
    the ground there), replayed from the reset for each window; the window's
    actions are seeded random actions too. The env is left reset with ``seed``.
    """
    warmup_actions = random_actions(env, warmup, seed)
    norms = {}
    for window in windows:
        env.reset(seed=seed)
        with torch.no_grad():
            for action in warmup_actions:
                env.step(action)
        env.detach_state()
        actions = random_actions(env, int(window), seed + 1)
        first = actions[0].clone().requires_grad_(True)
        total = torch.zeros((), dtype=first.dtype, device=first.device)
        for step, action in enumerate(actions):
            reward = env.step(first if step == 0 else action)[1]
            total = total + reward.sum()
        (gradient,) = torch.autograd.grad(total, first, allow_unused=True)
        if gradient is None:
            gradient = torch.zeros_like(first)
        norms[int(window)] = torch.linalg.vector_norm(gradient.detach().double(), dim=-1).cpu()
    env.reset(seed=seed)
    return norms


def describe_gradient_growth(norms: dict[int, torch.Tensor]) -> str:
    """One line: median (max) over envs per window, and what bounds a large growth."""
    parts = []
    for window, values in norms.items():
        finite = values[torch.isfinite(values)]
        if finite.numel() < values.numel():
            missing = values.numel() - finite.numel()
            parts.append(
                f"{window} {_steps(window)} not finite in {missing} of {values.numel()} envs"
            )
            continue
        parts.append(f"{window} {_steps(window)} {values.median():.2g} ({values.max():.2g})")
    line = (
        f"window gradients: norm of d(window return)/d(first action), median (max) of "
        f"{next(iter(norms.values())).numel()} envs: " + "; ".join(parts)
    )
    lengths = sorted(norms)
    start = lengths[1] if len(lengths) > 2 else lengths[0]  # one step can barely act yet
    base, longest = float(norms[start].max()), norms[lengths[-1]]
    if not torch.isfinite(longest).all():
        how = "past the float range"
    elif base > 0.0 and float(longest.max()) / base >= _GROWTH_WORTH_SAYING:
        how = f"{float(longest.max()) / base:.2g}x"
    else:
        return line
    return line + (
        f". The largest grows {how} from {start} to {lengths[-1]} steps: windows that "
        "long give updates dominated by a few envs, or overflow; bound them with "
        "trainer.action_adjoint_max_norm (each env's action adjoint clipped, about 10x its "
        "median) or a shorter trainer.segment_length"
    )


def _steps(window: int) -> str:
    return "step" if window == 1 else "steps"
