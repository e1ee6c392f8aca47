"""Runs that differ only in their seed, as one curve: a median (or mean) with a band.

Used by ``pathgrad plot --aggregate``. Runs are grouped by their resolved
config without the seed and the run's own places (``logging``, experiment
name, checkpoint folder); each group is labelled with its env, algorithm,
the settings that tell the groups apart, and its number of seeds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["STATISTICS", "group_by_config", "seed_band"]

STATISTICS = ("median", "mean")
_IGNORED = {("trainer", "seed"), ("trainer", "experiment_name"), ("trainer", "checkpoint_dir")}


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    items: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            items.update(_flat(value, f"{name}."))
        else:
            items[name] = value
    return items


def _identity(config: dict[str, Any]) -> dict[str, Any]:
    flat = _flat(config)
    return {
        key: value
        for key, value in flat.items()
        if not key.startswith("logging.") and tuple(key.split(".", 1)) not in _IGNORED
    }


def group_by_config(
    configs: dict[Path, dict[str, Any]],
) -> dict[str, list[Path]]:
    """Label -> runs whose configs are equal but for the seed (in the order given)."""
    groups: dict[str, list[Path]] = {}
    identities: dict[str, dict[str, Any]] = {}
    for run_dir, config in configs.items():
        identity = _identity(config)
        key = json.dumps(identity, sort_keys=True, default=str)
        groups.setdefault(key, []).append(run_dir)
        identities[key] = identity
    differing = sorted(
        {
            name
            for identity in identities.values()
            for name, value in identity.items()
            if any(other.get(name) != value for other in identities.values())
        }
    )
    labels: dict[str, list[Path]] = {}
    for key, runs in groups.items():
        identity = identities[key]
        parts = [str(identity.get("env.name", "?")), str(identity.get("algorithm.name", "?"))]
        parts += [
            f"{name.split('.')[-1]}={identity.get(name)}"
            for name in differing
            if name not in ("env.name", "algorithm.name")
        ]
        seeds = "seed" if len(runs) == 1 else "seeds"
        labels[f"{', '.join(parts)} ({len(runs)} {seeds})"] = runs
    return labels


def seed_band(
    series: Sequence[tuple[Sequence[float], Sequence[float]]], statistic: str, points: int = 100
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``x, center, low, high`` of several runs' ``(x, y)`` curves on their common x range.

    ``median`` comes with the band from the lowest to the highest run,
    ``mean`` with plus or minus one standard deviation. Curves are linearly
    interpolated onto ``points`` x values where all of them have data.

    Raises:
        ValueError: For an unknown statistic or curves that do not overlap.
    """
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {list(STATISTICS)}, got {statistic!r}.")
    curves = [(np.asarray(x, float), np.asarray(y, float)) for x, y in series if len(x)]
    if not curves:
        raise ValueError("no run has points to aggregate.")
    start = max(float(x.min()) for x, _ in curves)
    stop = min(float(x.max()) for x, _ in curves)
    if start > stop:
        raise ValueError("the runs' curves do not overlap; plot them without --aggregate.")
    grid = np.linspace(start, stop, points) if stop > start else np.array([start])
    values = np.stack([np.interp(grid, x, y) for x, y in curves])
    if statistic == "median":
        return grid, np.median(values, axis=0), values.min(axis=0), values.max(axis=0)
    mean, spread = values.mean(axis=0), values.std(axis=0)
    return grid, mean, mean - spread, mean + spread
