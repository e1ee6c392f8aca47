"""Algorithms: analytic policy gradients and their shared optimizer machinery."""

from pathgrad.algo.apg import APG, APGCfg, complete_discounted_return, segmented_discounted_return
from pathgrad.algo.base import BaseAlgorithm, RolloutKind

__all__ = [
    "APG",
    "APGCfg",
    "BaseAlgorithm",
    "RolloutKind",
    "complete_discounted_return",
    "segmented_discounted_return",
]
