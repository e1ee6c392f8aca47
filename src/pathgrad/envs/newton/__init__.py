"""Newton (NVIDIA Warp) as a pathgrad backend: ``NewtonEnv`` and the robots built on it.

Layout: ``base.py`` (:class:`NewtonEnv`, what a robot subclasses), ``engine/`` (the
bridge to torch: autograd step, graphs, adjoints, stability and model checks),
``model_files/`` (robot files with MuJoCo's meaning) and ``robots/`` (the tasks).

Needs the optional extra: ``pip install 'pathgrad[newton]'`` (``newton`` and
``warp-lang``). Warp's start-up, missing-CUDA-driver and module-load messages
are silenced (its log level is raised to warnings) unless
``PATHGRAD_WARP_VERBOSE=1`` (:mod:`pathgrad.core.quiet_warp`).
"""

from __future__ import annotations

try:
    import warp as _wp

    from pathgrad.core.quiet_warp import init_quietly as _init_quietly

    _init_quietly(_wp)  # before Newton's import, which may initialize Warp
    import newton as _newton  # noqa: F401
except ImportError as _error:  # pragma: no cover - depends on the installation
    raise ImportError(
        f"pathgrad.envs.newton needs Newton and Warp: pip install 'pathgrad[newton]' ({_error})."
    ) from _error

from pathgrad.envs.newton.base import NewtonEnv  # noqa: E402
from pathgrad.envs.newton.engine.bridge import NewtonSimulation, NewtonStep  # noqa: E402
from pathgrad.envs.newton.robots.ant import NewtonAnt  # noqa: E402
from pathgrad.envs.newton.robots.cartpole import NewtonCartPoleSwingUp  # noqa: E402
from pathgrad.envs.newton.robots.diffrl_ant import DiffRLAnt  # noqa: E402
from pathgrad.envs.newton.robots.diffrl_cheetah import DiffRLHalfCheetah  # noqa: E402
from pathgrad.envs.newton.robots.diffrl_hopper import DiffRLHopper  # noqa: E402
from pathgrad.envs.newton.robots.diffrl_humanoid import DiffRLHumanoid  # noqa: E402
from pathgrad.envs.newton.robots.reacher import NewtonReacher  # noqa: E402

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
