"""pathgrad: analytic policy gradients through differentiable simulators."""

from pathgrad import envs  # noqa: F401  (registers the built-in environments)
from pathgrad.algo import (
    APG,
    SHAC,
    APGCfg,
    BaseAlgorithm,
    ClosedFormLR,
    RolloutKind,
    SHACCfg,
    build_algo,
    build_lr_scheduler,
    build_optimizer,
    complete_discounted_return,
    get_registered_algo_names,
    register_algo,
    segmented_discounted_return,
    td_lambda_targets,
)
from pathgrad.checkpoint import latest_checkpoint, read_checkpoint, read_index
from pathgrad.collector import (
    DifferentiableCollector,
    DifferentiableRollout,
    DifferentiableTransition,
)
from pathgrad.differentiable_trainer import DifferentiableTrainer, DifferentiableTrainerCfg
from pathgrad.env import (
    DifferentiableRolloutSpec,
    DifferentiableVecEnv,
    ScheduledDifferentiableVecEnv,
    build_learning_env,
    get_registered_learning_env_names,
    register_learning_env,
)
from pathgrad.envs import PointMass
from pathgrad.evaluation import evaluate_episodes
from pathgrad.gradients import BatchedGradientNormStats, clip_batched_gradient_norm
from pathgrad.normalization import RunningObservationNormalizer
from pathgrad.policies import GaussianMLPPolicy, Policy
from pathgrad.utils import (
    AlgorithmCfg,
    LRSchedulerCfg,
    OptimizerCfg,
    configclass,
    scheduler_needs_horizon,
)

__version__ = "0.1.0"

__all__ = [
    "APG",
    "APGCfg",
    "AlgorithmCfg",
    "BaseAlgorithm",
    "BatchedGradientNormStats",
    "ClosedFormLR",
    "DifferentiableCollector",
    "DifferentiableRollout",
    "DifferentiableRolloutSpec",
    "DifferentiableTrainer",
    "DifferentiableTrainerCfg",
    "DifferentiableTransition",
    "DifferentiableVecEnv",
    "GaussianMLPPolicy",
    "LRSchedulerCfg",
    "OptimizerCfg",
    "PointMass",
    "Policy",
    "RolloutKind",
    "RunningObservationNormalizer",
    "SHAC",
    "SHACCfg",
    "ScheduledDifferentiableVecEnv",
    "build_algo",
    "build_learning_env",
    "build_lr_scheduler",
    "build_optimizer",
    "clip_batched_gradient_norm",
    "complete_discounted_return",
    "configclass",
    "evaluate_episodes",
    "get_registered_algo_names",
    "get_registered_learning_env_names",
    "latest_checkpoint",
    "read_checkpoint",
    "read_index",
    "register_algo",
    "register_learning_env",
    "scheduler_needs_horizon",
    "segmented_discounted_return",
    "td_lambda_targets",
]
