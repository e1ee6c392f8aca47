"""The trainer: :class:`~pathgrad.trainer.trainer.DifferentiableTrainer` and its parts.

``trainer.py`` holds the loop; beside it its config (``config``), saving and
restoring (``save_restore``), evaluations and saves within a run
(``evaluation_schedule``), interruption at unit boundaries, budgets, divergence,
scalar logs and the progress bar, thread settings and gradient checkpointing of
complete rollouts. The loop imports these; none imports it (they see it through
``pathgrad.core.trainer_state``). ``pathgrad.differentiable_trainer`` keeps the
reference's import path.
"""
