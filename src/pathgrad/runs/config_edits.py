"""Edits of a run's ``config.yaml`` since its checkpoint: what ``pathgrad resume`` refuses.

A checkpoint records the resolved config it was trained with. A resume rebuilds
the run from ``config.yaml`` and restores the checkpoint's optimizer, schedules
and env state over it, so an edited learning rate would be silently overwritten,
an edited env or policy would fail on a tensor shape, and in every case the file
would no longer describe the run. Resume compares the two first and names each
edited key. The keys ``resume`` itself may change (the budget, threads, device)
and those that only steer logging are left out of the comparison.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["RESUMABLE_KEYS", "config_edits", "describe_edits"]

# dotted keys (or prefixes ending in '.') that may differ between config.yaml and a checkpoint
RESUMABLE_KEYS = (
    "trainer.total_updates",
    "trainer.total_timesteps",
    "trainer.num_threads",
    "trainer.keep_last_checkpoints",
    "trainer.distributed_timeout_seconds",
    "env.device",
    "logging.",
)
_MISSING = object()


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping) and (value or not prefix):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}{key}."))
        return flat
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, list):
        value = [list(item) if isinstance(item, tuple) else item for item in value]
    return {prefix[:-1]: value}


def _resumable(key: str) -> bool:
    return any(
        key.startswith(allowed) if allowed.endswith(".") else key == allowed
        for allowed in RESUMABLE_KEYS
    )


def config_edits(
    recorded: Mapping[str, Any], current: Mapping[str, Any]
) -> list[tuple[str, Any, Any]]:
    """``(key, checkpoint's value, config.yaml's value)`` for each differing dotted key.

    A key present on one side only is an edit inside the free-form entries
    (``env.cfg.*``, ``algorithm.cfg.*``...); a section's own field (``trainer.x``)
    that only one side has was added or removed by another pathgrad version.
    """
    old, new = _flatten(recorded), _flatten(current)
    edits = []
    for key in sorted(old.keys() | new.keys()):
        if _resumable(key):
            continue
        before, after = old.get(key, _MISSING), new.get(key, _MISSING)
        if before is _MISSING or after is _MISSING:
            if key.count(".") == 1:
                continue
        elif before == after or (_is_nan(before) and _is_nan(after)):
            continue
        edits.append((key, before, after))
    return edits


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and value != value


def _shown(value: Any) -> str:
    return "(not set)" if value is _MISSING else repr(value)


def describe_edits(edits: list[tuple[str, Any, Any]], limit: int = 6) -> str:
    """``key: old -> new`` for the first ``limit`` edits, joined by ``'; '``."""
    shown = [f"{key}: {_shown(old)} -> {_shown(new)}" for key, old, new in edits[:limit]]
    more = f"; and {len(edits) - limit} more" if len(edits) > limit else ""
    return "; ".join(shown) + more
