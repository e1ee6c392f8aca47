"""Newton's bridge to torch: the step as an autograd function, its Warp graphs, kept
intermediates and hand-written adjoints, the held mass matrix, the contact signal, stability
bounds and model checks. Robots build on :class:`~pathgrad.envs.newton.base.NewtonEnv`, which
uses these; nothing here knows a robot."""
