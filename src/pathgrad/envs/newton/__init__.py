"""Newton (NVIDIA Warp) as a pathgrad backend: ``NewtonEnv`` and tasks built on it.

Needs the optional extra: ``pip install 'pathgrad[newton]'`` (``newton`` and
``warp-lang``). Warp's start-up, missing-CUDA-driver and module-load messages
are silenced (its log level is raised to warnings) unless
``PATHGRAD_WARP_VERBOSE=1``.
"""

from __future__ import annotations

import os

try:
    import warp as _wp

    _quiet = os.environ.get("PATHGRAD_WARP_VERBOSE") != "1"
    if _quiet:
        _wp.config.log_level = _wp.LOG_ERROR
    import newton as _newton  # noqa: F401  (initializes Warp)
except ImportError as _error:  # pragma: no cover - depends on the installation
    raise ImportError(
        f"pathgrad.envs.newton needs Newton and Warp: pip install 'pathgrad[newton]' ({_error})."
    ) from _error


def _init_warp_quietly() -> None:
    """Initialize Warp with stderr muted: its native code reports a missing CUDA driver."""
    devnull, saved = os.open(os.devnull, os.O_WRONLY), os.dup(2)
    try:
        os.dup2(devnull, 2)
        _wp.init()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


if _quiet:
    _init_warp_quietly()
    _wp.config.log_level = _wp.LOG_WARNING

from pathgrad.envs.newton.ant import NewtonAnt  # noqa: E402
from pathgrad.envs.newton.base import NewtonEnv  # noqa: E402
from pathgrad.envs.newton.bridge import NewtonSimulation, NewtonStep  # noqa: E402
from pathgrad.envs.newton.cartpole import NewtonCartPoleSwingUp  # noqa: E402
from pathgrad.envs.newton.diffrl_ant import DiffRLAnt  # noqa: E402
from pathgrad.envs.newton.diffrl_cheetah import DiffRLHalfCheetah  # noqa: E402
from pathgrad.envs.newton.diffrl_hopper import DiffRLHopper  # noqa: E402
from pathgrad.envs.newton.diffrl_humanoid import DiffRLHumanoid  # noqa: E402
from pathgrad.envs.newton.reacher import NewtonReacher  # noqa: E402

__all__ = [
    "DiffRLAnt",
    "DiffRLHalfCheetah",
    "DiffRLHopper",
    "DiffRLHumanoid",
    "NewtonAnt",
    "NewtonCartPoleSwingUp",
    "NewtonEnv",
    "NewtonReacher",
    "NewtonSimulation",
    "NewtonStep",
]
