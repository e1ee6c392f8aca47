"""The reference's experimental Newton task: a two-link planar reach on forward kinematics.

``embodichain.learning.rl.experimental.newton`` maps to this package: the env and
its config here, the APG training demonstration in
:mod:`pathgrad.experimental.newton.train_planar_reach`. The env is also the
registered env ``NewtonPlanarReach`` (``pathgrad train newton_planar_reach``).
"""

from __future__ import annotations

from pathgrad.experimental.newton.planar_reach import NewtonPlanarReachEnv, NewtonPlanarReachEnvCfg

__all__ = ["NewtonPlanarReachEnv", "NewtonPlanarReachEnvCfg"]
