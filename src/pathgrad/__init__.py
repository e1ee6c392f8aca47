"""pathgrad: analytic policy gradients through differentiable simulators.

Public names are imported on first use (PEP 562), so ``import pathgrad`` and
the ``pathgrad`` command start quickly; ``from pathgrad import APG`` works as
with eager imports. Any public name also registers the built-in envs.
"""

from __future__ import annotations

__version__ = "0.1.0"

_EXPORTS = {
    "pathgrad.api": ("EarlyStopping", "LoadedPolicy", "TrainResult", "load", "train"),
    "pathgrad.algo": (
        "APG",
        "APGCfg",
        "BaseAlgorithm",
        "ClosedFormLR",
        "RolloutKind",
        "SHAC",
        "SHACCfg",
        "build_algo",
        "build_lr_scheduler",
        "build_optimizer",
        "complete_discounted_return",
        "get_registered_algo_names",
        "register_algo",
        "segmented_discounted_return",
        "td_lambda_targets",
    ),
    "pathgrad.checkpoint": ("latest_checkpoint", "read_checkpoint", "read_index"),
    "pathgrad.commands": ("UsageError",),
    "pathgrad.collector": (
        "DifferentiableCollector",
        "DifferentiableRollout",
        "DifferentiableTransition",
    ),
    "pathgrad.runs.config": ("RunConfig", "load_config"),
    "pathgrad.differentiable_trainer": ("DifferentiableTrainer", "DifferentiableTrainerCfg"),
    "pathgrad.env": (
        "DifferentiableRolloutSpec",
        "DifferentiableVecEnv",
        "ScheduledDifferentiableVecEnv",
        "build_learning_env",
        "get_registered_learning_env_names",
        "register_learning_env",
    ),
    "pathgrad.envs": ("PointMass",),
    "pathgrad.evaluation": ("evaluate_episodes",),
    "pathgrad.gradients": ("BatchedGradientNormStats", "clip_batched_gradient_norm"),
    "pathgrad.normalization": ("RunningObservationNormalizer",),
    "pathgrad.policies": ("GaussianMLPPolicy", "Policy"),
    "pathgrad.utils": (
        "AlgorithmCfg",
        "LRSchedulerCfg",
        "OptimizerCfg",
        "configclass",
        "scheduler_needs_horizon",
    ),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> object:
    import importlib  # here: ``import pathgrad`` imports nothing (the command's start-up)

    module = _MODULE_OF.get(name)
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
