"""Checks for environment authors: the whole env (``check_env``) and its gradients.

- :func:`check_env`: the contract, reproducibility, ``state_dict``,
  ``detach_state``, a finite random rollout and the gradients, every failure
  listed (the command ``pathgrad check-env NAME`` runs it).
- :func:`check_env_gradients`: Jacobians over a chain of steps through a reset,
  against finite differences (float64, float32) or a float64 twin.
"""

from __future__ import annotations

from pathgrad.core.env_contract import EnvCheckError
from pathgrad.testing.env_check import CheckOutcome, EnvCheckResult, check_env
from pathgrad.testing.gradients import check_env_gradients

__all__ = ["CheckOutcome", "EnvCheckError", "EnvCheckResult", "check_env", "check_env_gradients"]
