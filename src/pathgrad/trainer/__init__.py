"""The parts of ``pathgrad.differentiable_trainer.DifferentiableTrainer``.

Its config (``config``), checkpoints and evaluation within a run, interruption
at unit boundaries, budgets, divergence, scalar logs and the progress bar,
thread settings and the recomputing rollout. The trainer module imports these;
none imports it (they see it through ``pathgrad.core.trainer_state``).
"""
