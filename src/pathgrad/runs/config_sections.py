"""The sections of a run config: pydantic models of ``env``, ``policy``, ``algorithm``,
``trainer``, ``eval`` and ``logging``, and :class:`RunConfig` of all six.

Types are checked here (unknown keys are errors); values are checked by the
library's own config classes and env constructors when :mod:`pathgrad.runs.config`
validates a document.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    create_model,
    field_validator,
    model_validator,
)

from pathgrad.algo.registry import ALGORITHMS
from pathgrad.core.devices import device_problem
from pathgrad.policies import ACTIVATIONS
from pathgrad.trainer.config import DifferentiableTrainerCfg

__all__ = [
    "ENV_ARGUMENTS_OWNED_ELSEWHERE",
    "TRAINER_FIELDS_OWNED_ELSEWHERE",
    "AlgorithmSection",
    "EnvSection",
    "EvalSection",
    "LoggingSection",
    "PolicySection",
    "RunConfig",
    "Section",
    "default_experiment_name",
]

PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
# Seeds torch accepts, leaving room for the evaluation env's seed + 1.
Seed = Annotated[int, Field(ge=0, lt=2**63 - 1)]

# DifferentiableTrainerCfg fields that other sections (or the run directory) own.
TRAINER_FIELDS_OWNED_ELSEWHERE = {
    "checkpoint_dir": "the run directory (runs/<experiment>-<time>/checkpoints)",
    "use_wandb": "logging.wandb",
    "eval_frequency_steps": "eval.frequency_steps",
    "num_eval_episodes": "eval.episodes",
    "eval_seed": "eval.seed",
    "final_evaluation": "eval.final",
}
# Env constructor arguments that the env section or the seed set.
ENV_ARGUMENTS_OWNED_ELSEWHERE = {"num_envs", "device", "dtype", "seed"}


class Section(BaseModel):
    """A config section: unknown keys and wrong types are errors."""

    model_config = ConfigDict(extra="forbid", strict=True)


class EnvSection(Section):
    """Which env to train on, how many copies, where."""

    name: str = Field("PointMass", description="registered env name (`pathgrad envs`)")
    module: str | list[str] | None = Field(
        None, description="module(s) to import first: they register envs defined outside pathgrad"
    )
    num_envs: PositiveInt = Field(64, description="parallel training envs")
    device: str = Field("cpu", description="torch device of envs and networks")
    dtype: Literal["float32", "float64"] = Field("float32", description="env and network dtype")
    cfg: dict[str, Any] = Field(
        default_factory=dict, description="env constructor arguments (constants, max_episode_steps)"
    )
    train_cfg: dict[str, Any] = Field(
        default_factory=dict,
        description="arguments of the training envs only, over `cfg` (e.g. wider start states); "
        "evaluation, render, export and `pathgrad.load` use `cfg`",
    )

    @field_validator("device")
    @classmethod
    def _device_exists(cls, value: str) -> str:
        problem = device_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value


class PolicySection(Section):
    """The policy: Gaussian MLP, squashed normal (SAPO's authors') or the reference's ActorOnly."""

    name: Literal["gaussian_mlp", "squashed_normal", "actor_only"] = Field(
        "gaussian_mlp",
        description="`gaussian_mlp` (GaussianMLPPolicy: the keys below), `squashed_normal` "
        "(SquashedNormalPolicy: a log-std head, `hidden_sizes`, `activation`, `layer_norm` "
        "before each activation, `init_log_std` the head's bias, `log_std_range`) or "
        "`actor_only` (the reference's ActorOnly: `actor` and `init_log_std`)",
    )
    actor: dict[str, Any] | None = Field(
        None,
        description="actor_only: the actor network, `{type: mlp, network_cfg: {hidden_sizes, "
        "activation, last_activation, use_layernorm, dropout_p, orthogonal_init}}`",
    )
    hidden_sizes: list[PositiveInt] = Field(
        [64, 64], description="gaussian_mlp: hidden layer widths"
    )
    activation: Literal[tuple(sorted(ACTIVATIONS))] = Field(  # type: ignore[valid-type]
        "elu", description="gaussian_mlp: hidden activation"
    )
    init_log_std: float = Field(-0.5, description="initial log standard deviation (both policies)")
    squash: bool = Field(
        True,
        description="gaussian_mlp: tanh-squash actions to the action bounds "
        "(false: unbounded mean)",
    )
    layer_norm: bool = Field(
        False,
        description="gaussian_mlp: LayerNorm after every hidden activation "
        "(the SHAC paper's networks); squashed_normal: before it",
    )
    log_std_range: list[float] = Field(
        [-5.0, 2.0], description="squashed_normal: the clamp [low, high] of the log-std"
    )

    @field_validator("log_std_range")
    @classmethod
    def _check_log_std_range(cls, value: list[float]) -> list[float]:
        if len(value) != 2 or not value[0] < value[1]:
            raise ValueError(f"must be [low, high] with low < high, got {value}")
        return value


class AlgorithmSection(Section):
    """The algorithm and its config (checked against the algorithm's config class)."""

    name: str = Field("apg", description=f"one of {sorted(ALGORITHMS)}")
    cfg: dict[str, Any] = Field(
        default_factory=lambda: {
            "gamma": 0.99,
            "max_grad_norm": 1.0,
            "optimizer": {"name": "adam", "learning_rate": 3e-3, "kwargs": {"betas": [0.7, 0.95]}},
            "lr_scheduler": {"name": "linear", "kwargs": {"end_factor": 0.1}},
        },
        description="fields of the algorithm's config class (e.g. APGCfg)",
    )


class EvalSection(Section):
    """Periodic evaluation on a separate env."""

    num_envs: PositiveInt = Field(16, description="evaluation envs")
    frequency_steps: NonNegativeInt = Field(
        64 * 32 * 50,
        description="evaluate every so many env steps (0: only the final evaluation, if final)",
    )
    episodes: PositiveInt = Field(64, description="episodes per evaluation")
    seed: Seed | None = Field(12345, description="reset seed of every evaluation")
    final: bool = Field(
        True, description="evaluate the final policy (also when frequency_steps is 0)"
    )


class LoggingSection(Section):
    """Where results go and how progress is shown."""

    runs_dir: str = Field("runs", description="folder of run directories")
    tensorboard: bool = Field(True, description="write TensorBoard logs to <run>/tb")
    wandb: bool = Field(False, description="also log to Weights & Biases")
    wandb_project: str = Field("pathgrad", description="W&B project")
    print_every_updates: PositiveInt = Field(
        25, description="updates between progress lines when stdout is not a terminal"
    )


# Defaults of the default task (PointMass) where they differ from DifferentiableTrainerCfg's.
TRAINER_DEFAULTS = {
    "segment_length": 32,
    "save_frequency_updates": 100,
    "experiment_name": None,
}
TRAINER_DESCRIPTIONS = {
    "experiment_name": "run and checkpoint name prefix (default: the env's, e.g. pendulum)",
}


def _trainer_section() -> type[Section]:
    """The trainer section: DifferentiableTrainerCfg's fields plus budget and seed."""
    hints = typing.get_type_hints(DifferentiableTrainerCfg)
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(DifferentiableTrainerCfg):
        if field.name in TRAINER_FIELDS_OWNED_ELSEWHERE:
            continue
        default = field.default if field.default is not dataclasses.MISSING else None
        default = TRAINER_DEFAULTS.get(field.name, default)
        annotation = hints[field.name]
        if field.name in TRAINER_DEFAULTS and TRAINER_DEFAULTS[field.name] is None:
            annotation = annotation | None
        description = TRAINER_DESCRIPTIONS.get(field.name)
        fields[field.name] = (annotation, Field(default, description=description))
    fields["total_timesteps"] = (int | None, Field(None, description="env-step budget"))
    fields["total_updates"] = (int | None, Field(300, description="optimizer-update budget"))
    fields["seed"] = (Seed, Field(0, description="seed of torch, the envs and the run"))
    return create_model(
        "TrainerSection",
        __base__=Section,
        __doc__="Training: the fields of DifferentiableTrainerCfg, the budget and the seed.",
        **fields,
    )


TrainerSection = _trainer_section()


class RunConfig(Section):
    """A complete run: every section has defaults (the default task is PointMass)."""

    env: EnvSection = Field(default_factory=EnvSection)
    policy: PolicySection = Field(default_factory=PolicySection)
    algorithm: AlgorithmSection = Field(default_factory=AlgorithmSection)
    trainer: TrainerSection = Field(default_factory=TrainerSection)  # type: ignore[valid-type]
    eval: EvalSection = Field(default_factory=EvalSection)
    logging: LoggingSection = Field(default_factory=LoggingSection)
    # What validation looked up (pathgrad.runs.config.Resolution), for building; not a value.
    _resolved: Any = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _one_budget(self) -> RunConfig:
        budgets = (self.trainer.total_timesteps, self.trainer.total_updates)
        if (budgets[0] is None) == (budgets[1] is None):
            raise ValueError(
                "trainer: give exactly one of total_timesteps and total_updates "
                "(set the other to null)."
            )
        if any(budget is not None and budget < 0 for budget in budgets):
            raise ValueError("trainer: the budget cannot be negative.")
        if self.trainer.experiment_name is None:
            self.trainer.experiment_name = default_experiment_name(
                self.env.name, self.algorithm.name
            )
        return self


def default_experiment_name(env_name: str, algorithm_name: str) -> str:
    """``point_mass`` for PointMass with APG, ``pendulum_shac`` for Pendulum with SHAC,
    ``diff_rl_ant_shac`` for DiffRLAnt (an acronym is a word of its own)."""
    boundaries = r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])|[^A-Za-z0-9]+"
    words = re.sub(boundaries, "_", env_name).strip("_").lower()
    algorithm = algorithm_name.lower()
    return words if algorithm == "apg" else f"{words}_{algorithm}"
