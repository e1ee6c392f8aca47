"""A robot file as its author meant: MJCF read with MuJoCo's joints, options, actuators,
tendons and includes (MuJoCo is the oracle), for :class:`~pathgrad.envs.newton.base.NewtonEnv`."""
