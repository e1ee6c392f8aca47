"""Built-in differentiable environments; importing this package registers them."""

from pathgrad.core.env_registry import register_learning_env
from pathgrad.envs.base import BatchedDifferentiableEnv
from pathgrad.envs.cartpole_swingup import CartPoleSwingUp
from pathgrad.envs.curriculum import HorizonCurriculum
from pathgrad.envs.diffrl_cartpole import DiffRLCartPoleSwingUp
from pathgrad.envs.gymnasium_adapter import GymnasiumVectorEnv, to_gymnasium, to_sb3
from pathgrad.envs.gymnasium_env import GymnasiumEnv, to_gymnasium_env
from pathgrad.envs.mountain_car import MountainCarContinuous
from pathgrad.envs.pendulum import Pendulum
from pathgrad.envs.point_mass import PointMass
from pathgrad.envs.quadrotor import Quadrotor
from pathgrad.envs.reacher import Reacher

__all__ = [
    "BatchedDifferentiableEnv",
    "CartPoleSwingUp",
    "DiffRLCartPoleSwingUp",
    "GymnasiumEnv",
    "GymnasiumVectorEnv",
    "HorizonCurriculum",
    "MountainCarContinuous",
    "Pendulum",
    "PointMass",
    "Quadrotor",
    "Reacher",
    "to_gymnasium",
    "to_gymnasium_env",
    "to_sb3",
]

# Envs on optional engines: imported when first used (pip install 'pathgrad[newton]').
register_learning_env(
    "NewtonCartPoleSwingUp", "pathgrad.envs.newton.robots.cartpole:NewtonCartPoleSwingUp"
)
register_learning_env("NewtonReacher", "pathgrad.envs.newton.robots.reacher:NewtonReacher")
register_learning_env(
    "NewtonPlanarReach",
    "pathgrad.experimental.newton.planar_reach:make_newton_planar_reach_env",
)
register_learning_env("NewtonAnt", "pathgrad.envs.newton.robots.ant:NewtonAnt")
_GYMNASIUM_TASKS = {  # Gymnasium's v5 MuJoCo tasks, on Newton: module -> tasks
    "gymnasium_locomotion": ("Hopper", "Walker2d", "HalfCheetah"),
    "gymnasium_floating_base": ("Ant", "Humanoid", "HumanoidStandup"),
    "gymnasium_control": ("InvertedPendulum", "InvertedDoublePendulum", "Reacher", "Swimmer"),
    "gymnasium_pusher": ("Pusher",),
}
for _module, _tasks in _GYMNASIUM_TASKS.items():
    for _task in _tasks:
        register_learning_env(
            f"Gymnasium{_task}", f"pathgrad.envs.newton.robots.{_module}:Gymnasium{_task}"
        )
_ROBOTS = "pathgrad.envs.newton.robots"
register_learning_env("DiffRLAnt", f"{_ROBOTS}.diffrl_ant:DiffRLAnt")
register_learning_env("DiffRLHopper", f"{_ROBOTS}.diffrl_hopper:DiffRLHopper")
register_learning_env("DiffRLHalfCheetah", f"{_ROBOTS}.diffrl_cheetah:DiffRLHalfCheetah")
register_learning_env("DiffRLHumanoid", f"{_ROBOTS}.diffrl_humanoid:DiffRLHumanoid")
register_learning_env("HandReorient", f"{_ROBOTS}.hand_reorient:HandReorient")
register_learning_env("AnymalVelocity", f"{_ROBOTS}.anymal_velocity:AnymalVelocity")
