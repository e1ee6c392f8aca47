"""Algorithms: analytic policy gradients, SHAC, and their shared optimizer machinery."""

from pathgrad.algo.apg import APG, APGCfg, complete_discounted_return, segmented_discounted_return
from pathgrad.algo.base import BaseAlgorithm, RolloutKind
from pathgrad.algo.shac import SHAC, SHACCfg, td_lambda_targets

__all__ = [
    "APG",
    "APGCfg",
    "BaseAlgorithm",
    "RolloutKind",
    "SHAC",
    "SHACCfg",
    "complete_discounted_return",
    "segmented_discounted_return",
    "td_lambda_targets",
]
