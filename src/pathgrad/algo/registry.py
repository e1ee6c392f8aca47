"""Algorithms by name, for configs, the command line and the reference's ``build_algo``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from pathgrad.algo.ahac import AHAC, AHACCfg
from pathgrad.algo.ahac_stiffness import StiffnessAHAC, StiffnessAHACCfg
from pathgrad.algo.apg import APG, APGCfg
from pathgrad.algo.base import RolloutKind
from pathgrad.algo.sapo import SAPO, SAPOCfg
from pathgrad.algo.sapo_ensemble import SAPOEnsemble, SAPOEnsembleCfg
from pathgrad.algo.shac import SHAC, SHACCfg

__all__ = [
    "ALGORITHMS",
    "build_algo",
    "get_algorithm",
    "get_registered_algo_names",
    "register_algo",
    "retired_field_error",
]

AlgorithmFactory = Callable[[Any, Any, Any], Any]


def retired_field_error(cfg_type: type, fields: Mapping[str, Any]) -> str | None:
    """A one-line message for the first field of ``fields`` that ``cfg_type`` retired, or None.

    A config class lists its retired fields in ``RETIRED_FIELDS`` (field -> what to do);
    when ``fields`` has several, the first one listed there is named.
    """
    retired = getattr(cfg_type, "RETIRED_FIELDS", {})
    for key, message in retired.items():
        if key in fields:
            return f"{key}: {message}."
    return None


# name -> (factory(cfg, policy, env), config dataclass)
ALGORITHMS: dict[str, tuple[AlgorithmFactory, type]] = {}
# name -> the rollouts the algorithm trains on (decides what ``distributed`` may do)
_ROLLOUT_KINDS: dict[str, RolloutKind] = {}


def register_algo(
    name: str,
    cfg_type: type,
    algorithm_type: type,
    *,
    factory: AlgorithmFactory | None = None,
    replace: bool = False,
) -> None:
    """Register an algorithm under ``name`` (stored lower-case).

    Args:
        name: Registry name, case-insensitive.
        cfg_type: Its config class (built from ``build_algo``'s mapping).
        algorithm_type: The algorithm class; its ``rollout_kind`` is recorded.
        factory: ``factory(cfg, policy, env) -> algorithm``; by default
            ``algorithm_type.from_config`` (``algorithm_type(cfg, policy)`` for a
            class without it).
        replace: Allow replacing an existing entry.

    Raises:
        ValueError: If ``name`` is taken and ``replace`` is false.
    """
    key = name.lower()
    if key in ALGORITHMS and not replace:
        raise ValueError(f"Algorithm '{name}' is already registered (pass replace=True).")
    if factory is None:
        factory = getattr(algorithm_type, "from_config", None)
    if factory is None:

        def factory(cfg: Any, policy: Any, env: Any) -> Any:
            return algorithm_type(cfg, policy)

    ALGORITHMS[key] = (factory, cfg_type)
    _ROLLOUT_KINDS[key] = RolloutKind(getattr(algorithm_type, "rollout_kind", "standard"))


# one line per algorithm: its class builds itself from its config (from_config)
register_algo("apg", APGCfg, APG)
register_algo("shac", SHACCfg, SHAC)
register_algo("ahac", AHACCfg, AHAC)
register_algo("sapo", SAPOCfg, SAPO)
register_algo("sapo_ensemble", SAPOEnsembleCfg, SAPOEnsemble)
register_algo("ahac_stiffness", StiffnessAHACCfg, StiffnessAHAC)


def get_registered_algo_names() -> list[str]:
    """Registered algorithm names, in registration order."""
    return list(ALGORITHMS)


def get_algorithm(name: str) -> tuple[AlgorithmFactory, Any]:
    """The factory and config class registered as ``name`` (case-insensitive).

    Raises:
        ValueError: If ``name`` is unknown.
    """
    key = name.lower()
    if key not in ALGORITHMS:
        raise ValueError(f"Unknown algorithm '{name}'. Available: {', '.join(sorted(ALGORITHMS))}")
    return ALGORITHMS[key]


def build_algo(
    name: str,
    cfg: Any,
    policy: torch.nn.Module,
    device: torch.device | str | None = None,
    *,
    distributed: bool = False,
    env: Any = None,
) -> Any:
    """Build the algorithm registered as ``name``, as the reference's ``build_algo`` does.

    Args:
        name: Registry name, case-insensitive.
        cfg: The config: an instance of the algorithm's config class, a mapping
            of its fields (nested ``optimizer``/``lr_scheduler`` mappings are
            accepted) or ``None`` for the defaults.
        policy: The policy to optimize.
        device: Sets ``cfg.device``; ``None`` keeps the config's (default ``cpu``).
        distributed: Wrap the policy in ``DistributedDataParallel``; only for
            algorithms on standard rollouts, after ``init_process_group``.
        env: The training env, for algorithms that size modules from it (``shac``).

    Raises:
        ValueError: If ``name`` is unknown, ``cfg`` sets another device than
            ``device``, or ``distributed`` is asked of a differentiable algorithm.
        RuntimeError: If ``distributed`` is set but ``torch.distributed`` is not
            initialized.
    """
    key = name.lower()
    if key not in ALGORITHMS:
        raise ValueError(f"Algorithm '{name}' not found. Available: {get_registered_algo_names()}")
    factory, cfg_type = ALGORITHMS[key]
    cfg = _algorithm_cfg(cfg, cfg_type, device)
    if distributed:
        if _ROLLOUT_KINDS[key] is RolloutKind.DIFFERENTIABLE:
            raise ValueError("Differentiable algorithms do not support distributed training.")
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            raise RuntimeError(
                "distributed=True needs torch.distributed to be initialized: call "
                "torch.distributed.init_process_group() first, or pass distributed=False."
            )
        index = torch.device(cfg.device).index
        policy = torch.nn.parallel.DistributedDataParallel(
            policy, device_ids=None if index is None else [index]
        )
    return factory(cfg, policy, env)


def _algorithm_cfg(cfg: Any, cfg_type: type, device: torch.device | str | None) -> Any:
    """``cfg`` as a ``cfg_type`` instance whose device is ``device`` when given."""
    if cfg is None or isinstance(cfg, Mapping):
        fields = dict(cfg or {})
        retired = retired_field_error(cfg_type, fields)
        if retired is not None:
            raise ValueError(retired)
        if device is not None:
            given = fields.setdefault("device", str(device))
            _check_device(given, device)
            fields["device"] = str(device)
        return cfg_type(**fields)
    if not isinstance(cfg, cfg_type):
        raise ValueError(
            f"cfg must be a {cfg_type.__name__} or a mapping, got {type(cfg).__name__}."
        )
    if device is not None:
        _check_device(cfg.device, device)
    return cfg


def _check_device(given: Any, device: torch.device | str) -> None:
    if torch.device(str(given)) != torch.device(device):
        raise ValueError(f"cfg.device is '{given}' but device='{device}' was passed.")
