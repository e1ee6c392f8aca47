"""Algorithms: APG, SHAC, SAPO (and SAPO-ensemble), AHAC (and AHAC-stiffness), and their shared
optimizer machinery."""

from pathgrad.algo.ahac import AHAC, AHACCfg
from pathgrad.algo.ahac_stiffness import StiffnessAHAC, StiffnessAHACCfg
from pathgrad.algo.apg import APG, APGCfg, complete_discounted_return, segmented_discounted_return
from pathgrad.algo.base import BaseAlgorithm, RolloutKind
from pathgrad.algo.registry import build_algo, get_registered_algo_names, register_algo
from pathgrad.algo.sapo import SAPO, SAPOCfg
from pathgrad.algo.sapo_ensemble import SAPOEnsemble, SAPOEnsembleCfg
from pathgrad.algo.schedules import ClosedFormLR, build_lr_scheduler, build_optimizer
from pathgrad.algo.shac import SHAC, SHACCfg, td_lambda_targets

__all__ = [
    "AHAC",
    "AHACCfg",
    "APG",
    "APGCfg",
    "BaseAlgorithm",
    "ClosedFormLR",
    "RolloutKind",
    "SAPO",
    "SAPOCfg",
    "SAPOEnsemble",
    "SAPOEnsembleCfg",
    "SHAC",
    "SHACCfg",
    "StiffnessAHAC",
    "StiffnessAHACCfg",
    "build_algo",
    "build_lr_scheduler",
    "build_optimizer",
    "complete_discounted_return",
    "get_registered_algo_names",
    "register_algo",
    "segmented_discounted_return",
    "td_lambda_targets",
]
