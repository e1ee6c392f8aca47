"""The robots built on :class:`~pathgrad.envs.newton.base.NewtonEnv`: Newton's own (cart-pole,
reacher, Ant), the SHAC benchmark's (DiffRL family, on :mod:`.diffrl_base`) and Gymnasium's v5
MuJoCo tasks from Gymnasium's own files. Registered by name in :mod:`pathgrad.envs`."""
