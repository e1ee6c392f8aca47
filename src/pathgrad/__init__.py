"""pathgrad: analytic policy gradients through differentiable simulators.

Public names are imported on first use (PEP 562), so ``import pathgrad`` and
the ``pathgrad`` command start quickly; ``from pathgrad import APG`` works as
with eager imports. Any public name also registers the built-in envs.
"""

from __future__ import annotations

__version__ = "0.1.0"

# What a user needs: train and load, every algorithm, the trainer, a policy, an env.
_EXPORTS = {
    "pathgrad.api": ("EarlyStopping", "LoadedPolicy", "TrainResult", "load", "train"),
    "pathgrad.algo": (
        "AHAC",
        "AHACCfg",
        "APG",
        "APGCfg",
        "BaseAlgorithm",
        "SAPO",
        "SAPOCfg",
        "SAPOEnsemble",
        "SAPOEnsembleCfg",
        "SHAC",
        "SHACCfg",
        "StiffnessAHAC",
        "StiffnessAHACCfg",
        "register_algo",
    ),
    "pathgrad.differentiable_trainer": ("DifferentiableTrainer", "DifferentiableTrainerCfg"),
    "pathgrad.env": ("DifferentiableVecEnv", "build_learning_env", "register_learning_env"),
    "pathgrad.policies": ("GaussianMLPPolicy", "Policy"),
    "pathgrad.runs.config": ("RunConfig", "load_config"),
    "pathgrad.utils": ("LRSchedulerCfg", "OptimizerCfg"),
}
# Names exported here before; they still resolve, with a warning naming their module.
_MOVED = {
    "pathgrad.algo": (
        "ClosedFormLR",
        "RolloutKind",
        "build_algo",
        "build_lr_scheduler",
        "build_optimizer",
        "complete_discounted_return",
        "get_registered_algo_names",
        "segmented_discounted_return",
        "td_lambda_targets",
    ),
    "pathgrad.checkpoint": ("latest_checkpoint", "read_checkpoint", "read_index"),
    "pathgrad.runs.errors": ("UsageError",),
    "pathgrad.collector": (
        "DifferentiableCollector",
        "DifferentiableRollout",
        "DifferentiableTransition",
    ),
    "pathgrad.env": (
        "DifferentiableRolloutSpec",
        "ScheduledDifferentiableVecEnv",
        "get_registered_learning_env_names",
    ),
    "pathgrad.envs": ("PointMass",),
    "pathgrad.evaluation": ("evaluate_episodes",),
    "pathgrad.gradients": ("BatchedGradientNormStats", "clip_batched_gradient_norm"),
    "pathgrad.normalization": ("RunningObservationNormalizer",),
    "pathgrad.utils": ("AlgorithmCfg", "configclass", "scheduler_needs_horizon"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
_MOVED_TO = {name: module for module, names in _MOVED.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> object:
    import importlib  # here: ``import pathgrad`` imports nothing (the command's start-up)

    module = _MODULE_OF.get(name)
    if module is None and name in _MOVED_TO:
        import warnings

        module = _MOVED_TO[name]
        warnings.warn(
            f"pathgrad.{name} is imported from {module} now: from {module} import {name}",
            DeprecationWarning,
            stacklevel=2,
        )
    if module is None:  # a submodule, e.g. ``pathgrad.envs`` after a bare ``import pathgrad``
        try:
            return importlib.import_module(f"pathgrad.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"pathgrad.{name}":
                raise
            raise AttributeError(f"module 'pathgrad' has no attribute '{name}'") from None
    importlib.import_module("pathgrad.envs")  # the built-in envs are registered with any name
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
