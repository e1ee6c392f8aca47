"""Bounding actions to a Box action space: the clamp used in training, evaluation and export."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["Bounds", "action_space_bounds", "clamp_action"]

Bounds = tuple[torch.Tensor, torch.Tensor]


def action_space_bounds(space: Any, device: torch.device | str) -> Bounds:
    """Lower and upper bounds of a Box action space as tensors on ``device``.

    Raises:
        TypeError: If the space has no ``low``/``high`` bounds.
    """
    if not hasattr(space, "low") or not hasattr(space, "high"):
        raise TypeError("clip_actions_to_space requires an action space with low/high bounds.")
    return torch.as_tensor(space.low, device=device), torch.as_tensor(space.high, device=device)


def clamp_action(action: torch.Tensor, bounds: Bounds) -> torch.Tensor:
    """Clamp ``action`` to ``bounds`` (the adjoint passes inside them and stops outside)."""
    low, high = bounds
    return torch.clamp(action, low.to(action.dtype), high.to(action.dtype))
