"""Algorithms by name, for configs and the command line."""

from __future__ import annotations

from typing import Any

from pathgrad.algo.apg import APG, APGCfg

__all__ = ["ALGORITHMS", "get_algorithm"]

# name -> (algorithm class, its config dataclass)
ALGORITHMS: dict[str, tuple[type, type]] = {"apg": (APG, APGCfg)}


def get_algorithm(name: str) -> tuple[type, Any]:
    """The algorithm class and config class registered as ``name`` (case-insensitive).

    Raises:
        ValueError: If ``name`` is unknown.
    """
    key = name.lower()
    if key not in ALGORITHMS:
        raise ValueError(f"Unknown algorithm '{name}'. Available: {', '.join(sorted(ALGORITHMS))}")
    return ALGORITHMS[key]
