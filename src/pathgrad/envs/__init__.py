"""Built-in differentiable environments; importing this package registers them."""

from pathgrad.envs.base import BatchedDifferentiableEnv
from pathgrad.envs.mountain_car import MountainCarContinuous
from pathgrad.envs.pendulum import Pendulum
from pathgrad.envs.point_mass import PointMass

__all__ = ["BatchedDifferentiableEnv", "MountainCarContinuous", "Pendulum", "PointMass"]
