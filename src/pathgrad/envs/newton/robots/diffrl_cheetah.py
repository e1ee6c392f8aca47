"""DiffRLHalfCheetah: the HalfCheetah task of the SHAC paper (Xu et al., ICLR 2022) in Newton.

DiffRL's ``CheetahEnv`` (dflex; ``envs/cheetah.py``, ``envs/assets/half_cheetah.xml``),
rebuilt from its published facts on
:class:`~pathgrad.envs.newton.robots.diffrl_planar.DiffRLPlanarEnv`
(which holds the facts shared with the Hopper and how Newton's contact law differs from
dflex's):

- ``assets/diffrl_half_cheetah.xml``: torso and head, back and front thigh, shin and foot
  capsules (21.2 kg at 1000 kg/m^3). The torso's origin is 1.0 m up plus the z slide,
  which starts at -0.2 m (0.8 m up). Each hinge is a spring to 0 with the MJCF's
  stiffness (240, 180, 120, 180, 120, 60 N m/rad) and damping (6, 4.5, 3, 4.5, 3, 1.5,
  each + 10); ranges as DiffRL's file, whose front foot range [-3.1, -0.3] excludes the
  start angle 0 (its limit spring acts from the first step).
- Action (6): 200 N m per unit on every hinge (the MJCF's gears are not used by DiffRL).
- Contact ke 2e4 N/m, kd 1e3 (4 here: dflex's kd d at rest, see ``diffrl_base``), kf 1e3,
  mu 1.0; joint limits ke 1e3, kd 10; armature 0.1
  on every DOF.
- Observation (17): z offset of the torso, pitch, six hinge angles, nine joint velocities.
  Reward: x velocity - 0.1 |a|^2. No early termination (a state that is no longer finite
  ends its episode); 1000 steps.
- ``stochastic_init``: +-0.1 m on x and z, pitch +-0.1 rad, hinges +-0.1 rad, every
  velocity +-0.25 (uniform).
"""

from __future__ import annotations

from pathlib import Path

from pathgrad.envs.newton.robots.diffrl_planar import DiffRLPlanarEnv

__all__ = ["DIFFRL_CHEETAH_CONTACT_MODEL", "DiffRLHalfCheetah"]

DIFFRL_CHEETAH_CONTACT_MODEL = {
    "armature": 0.1,
    "limit_ke": 1.0e3,
    "limit_kd": 10.0,
    "contact_ke": 2.0e4,
    "contact_kd": 4.0,  # dflex's kd d = 1e3 x 0.004 m at rest
    "contact_kf": 1.0e3,
    "mu": 1.0,
}


class DiffRLHalfCheetah(DiffRLPlanarEnv):
    """The SHAC paper's HalfCheetah (see the module docstring for its definition).

    Args: as :class:`~pathgrad.envs.newton.robots.diffrl_planar.DiffRLPlanarEnv`.
    """

    observation_dim = 17
    action_dim = 6
    default_model_file = str(Path(__file__).parent / "assets" / "diffrl_half_cheetah.xml")
    actuated = ("bthigh", "bshin", "bfoot", "fthigh", "fshin", "ffoot")
    contact_defaults = DIFFRL_CHEETAH_CONTACT_MODEL
    start_z = -0.2
    noise = (0.1, 0.1, 0.1, 0.25)
