"""Built-in differentiable environments; importing this package registers them."""

from pathgrad.envs.base import BatchedDifferentiableEnv
from pathgrad.envs.point_mass import PointMass

__all__ = ["BatchedDifferentiableEnv", "PointMass"]
