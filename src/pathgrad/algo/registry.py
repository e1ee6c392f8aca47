"""Algorithms by name, for configs and the command line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pathgrad.algo.apg import APG, APGCfg
from pathgrad.algo.shac import SHAC, SHACCfg

__all__ = ["ALGORITHMS", "get_algorithm"]

AlgorithmFactory = Callable[[Any, Any, Any], Any]


def _apg(cfg: APGCfg, policy: Any, env: Any) -> APG:
    return APG(cfg, policy)


def _shac(cfg: SHACCfg, policy: Any, env: Any) -> SHAC:
    return SHAC(cfg, policy, observation_dim=int(env.single_observation_space.shape[-1]))


# name -> (factory(cfg, policy, env), config dataclass)
ALGORITHMS: dict[str, tuple[AlgorithmFactory, type]] = {
    "apg": (_apg, APGCfg),
    "shac": (_shac, SHACCfg),
}


def get_algorithm(name: str) -> tuple[AlgorithmFactory, Any]:
    """The factory and config class registered as ``name`` (case-insensitive).

    Raises:
        ValueError: If ``name`` is unknown.
    """
    key = name.lower()
    if key not in ALGORITHMS:
        raise ValueError(f"Unknown algorithm '{name}'. Available: {', '.join(sorted(ALGORITHMS))}")
    return ALGORITHMS[key]
