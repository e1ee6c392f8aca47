"""Checks that a saved state fits the object it is loaded into, before anything changes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["check_optimizer_groups", "check_state_shapes"]


def check_state_shapes(entry: str, saved: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the first entry whose keys or tensor shapes differ.

    Args:
        entry: Name of the state in messages (``policy``, ``algorithm.critic``...).
        saved: The state being loaded.
        current: The state of the object it is loaded into.
    """
    missing = sorted(set(current) - set(saved))
    unexpected = sorted(set(saved) - set(current))
    if missing or unexpected:
        raise ValueError(
            f"Checkpoint {entry} does not match: missing entries {missing}, "
            f"unexpected entries {unexpected}."
        )
    for key, value in current.items():
        if isinstance(value, torch.Tensor):
            saved_shape = tuple(saved[key].shape)
            if saved_shape != tuple(value.shape):
                raise ValueError(
                    f"Checkpoint entry '{entry}.{key}' has shape {saved_shape}, "
                    f"but the {entry} has shape {tuple(value.shape)}."
                )


def check_optimizer_groups(
    entry: str, saved: Mapping[str, Any], optimizer: torch.optim.Optimizer
) -> None:
    """Raise ``ValueError`` if a saved optimizer state has other parameter groups."""
    saved_sizes = [len(group["params"]) for group in saved["param_groups"]]
    sizes = [len(group["params"]) for group in optimizer.param_groups]
    if saved_sizes != sizes:
        raise ValueError(
            f"Checkpoint entry '{entry}' has parameter groups of sizes {saved_sizes}, "
            f"but the optimizer has {sizes}."
        )
