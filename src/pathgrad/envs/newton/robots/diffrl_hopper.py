"""DiffRLHopper: the Hopper task of the SHAC paper (Xu et al., ICLR 2022) in Newton's Featherstone.

DiffRL's ``HopperEnv`` (dflex; ``envs/hopper.py``, ``envs/assets/hopper.xml``), rebuilt from
its published facts on :class:`~pathgrad.envs.newton.robots.diffrl_planar.DiffRLPlanarEnv`
(which holds
the facts shared with the HalfCheetah and how Newton's contact law differs from dflex's):

- ``assets/diffrl_hopper.xml``: torso, thigh, leg and foot capsules (15.8 kg at
  1000 kg/m^3), the torso's origin 1.25 m up at the start. Hinges (thigh, leg, foot;
  axis -y) limited to [-2.618, 0], [-2.618, 0], [-0.785, 0.785] rad, damping 2 + 10.
- Contact ke 2e4 N/m, kd 1e3 (4 here: dflex's kd d at rest, see ``diffrl_base``), kf 1e3,
  mu 0.9; joint limits ke 1e3, kd 10; armature 1.0
  on every DOF (root slides and pitch too).
- Observation (11): z offset of the torso (0 at the start), pitch, the three hinge
  angles, the six joint velocities.
- Reward: x velocity + height term + angle term - 0.1 |a|^2, where with ``h`` the z
  offset, the height term is ``clip(h + 0.3, -1, 0.3)``, squared and scaled by -200 where
  negative; the angle term is ``1 - (pitch / (pi/6))^2``.
- The episode terminates when ``h`` falls below -0.45 m (torso origin below 0.8 m), or
  the state is no longer finite; 1000 steps otherwise.
- ``stochastic_init``: +-0.05 m on x and z, pitch +-0.05 rad, hinges +-0.05 rad, every
  velocity +-0.05 (uniform); without it the start is all zeros. The thigh and leg start
  at their upper limit 0, so about half the random starts begin beyond it (the limit
  spring acts from the first step), as in DiffRL.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from pathgrad.envs.base import State
from pathgrad.envs.newton.robots.diffrl_planar import DiffRLPlanarEnv

__all__ = ["DIFFRL_HOPPER_CONTACT_MODEL", "DiffRLHopper"]

DIFFRL_HOPPER_CONTACT_MODEL = {
    "armature": 1.0,
    "limit_ke": 1.0e3,
    "limit_kd": 10.0,
    "contact_ke": 2.0e4,
    "contact_kd": 4.0,  # dflex's kd d = 1e3 x 0.004 m at rest
    "contact_kf": 1.0e3,
    "mu": 0.9,
}


class DiffRLHopper(DiffRLPlanarEnv):
    """The SHAC paper's Hopper (see the module docstring for its definition).

    Args:
        termination_height: z offset of the torso below which the episode ends (m).
        Others as :class:`~pathgrad.envs.newton.robots.diffrl_planar.DiffRLPlanarEnv`.
    """

    observation_dim = 11
    action_dim = 3
    default_model_file = str(Path(__file__).parent / "assets" / "diffrl_hopper.xml")
    actuated = ("thigh_joint", "leg_joint", "foot_joint")
    contact_defaults = DIFFRL_HOPPER_CONTACT_MODEL
    noise = (0.05, 0.05, 0.05, 0.05)
    termination_angle = math.pi / 6.0
    height_tolerance = 0.15

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        *,
        termination_height: float = -0.45,
        **kwargs: Any,
    ) -> None:
        self.termination_height = float(termination_height)
        super().__init__(num_envs, device, **kwargs)

    def _task_reward(self, joint_q: torch.Tensor) -> torch.Tensor:
        height = joint_q[:, 1] - (self.termination_height + self.height_tolerance)
        height = height.clamp(-1.0, 0.3)
        height = torch.where(height < 0.0, -200.0 * height.square(), height)
        angle = 1.0 - joint_q[:, 2].square() / self.termination_angle**2
        return height + angle

    def _terminated(self, state: State) -> torch.Tensor:
        return super()._terminated(state) | (state["joint_q"][:, 1] < self.termination_height)
