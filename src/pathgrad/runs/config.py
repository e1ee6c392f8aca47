"""Run configuration: YAML files and ``key=value`` overrides, validated before anything runs.

A run config has six sections: ``env``, ``policy``, ``algorithm``, ``trainer``,
``eval`` and ``logging``. Overrides (``trainer.seed=3``) are merged into the
given file, or into the default task's config, by OmegaConf; types are then
checked by pydantic models (unknown keys are errors, with a did-you-mean) and
values by the library's own config classes and env constructors. Every
problem becomes a :class:`ConfigError` whose message names the key path.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from pathgrad.algo.registry import ALGORITHMS, get_algorithm, retired_field_error
from pathgrad.core.devices import device_problem
from pathgrad.differentiable_trainer import DifferentiableTrainerCfg
from pathgrad.env import (
    get_learning_env_factory,
    get_registered_learning_env_names,
    import_env_modules,
)
from pathgrad.policies import ACTIVATIONS
from pathgrad.runs.config_messages import did_you_mean, validation_message
from pathgrad.runs.config_sources import ConfigError, merge_layers, model_files_beside, read_yaml
from pathgrad.runs.reference_yaml import Translation, is_reference_document, translate

__all__ = [
    "ConfigError",
    "RunConfig",
    "algorithm_config",
    "default_document",
    "default_experiment_name",
    "device_problem",
    "dump_config",
    "env_kwargs",
    "load_config",
    "reference_translation",
    "trainer_config",
    "validate_config",
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
        64 * 32 * 50, description="evaluate every so many env steps (0: never)"
    )
    episodes: PositiveInt = Field(64, description="episodes per evaluation")
    seed: Seed | None = Field(12345, description="reset seed of every evaluation")
    final: bool = Field(True, description="also evaluate the final policy")


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


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> RunConfig:
    """Read, override and validate a run config; nothing else happens.

    Without a file, the overrides change the default task's config (PointMass).

    Raises:
        ConfigError: For a missing or unreadable file, a YAML syntax error, a
            malformed override, an unknown key, a wrong type or value, or an
            unknown env or algorithm.
    """
    data = read_yaml(Path(path)) if path is not None else {}
    if path is not None:
        translation = reference_translation(data)  # the reference's format, mapped
        data = data if translation is None else translation.document
        model_files_beside(data, Path(path).parent)
    return validate_config(merge_layers(default_document(), data, overrides))


def reference_translation(data: dict[str, Any]) -> Translation | None:
    """A config file's data in the reference's format mapped to pathgrad's; ``None`` for ours.

    Raises:
        ConfigError: Listing the reference keys that have no pathgrad counterpart.
    """
    if not is_reference_document(data):
        return None
    return translate(data, _env_argument_names)


def _env_argument_names(name: str) -> set[str] | None:
    """The constructor arguments an ``env.cfg`` of env ``name`` may give (``None``: unknown env)."""
    try:
        factory = get_learning_env_factory(name)
    except (ValueError, ImportError):
        return None
    return set(_env_parameters(factory)) - ENV_ARGUMENTS_OWNED_ELSEWHERE


def default_document() -> dict[str, dict[str, Any]]:
    """Every section's defaults (the default task), without values derived from others."""
    return RunConfig().model_dump(mode="python", exclude={"trainer": {"experiment_name"}})


def validate_config(data: dict[str, Any]) -> RunConfig:
    """Check a config document as :func:`load_config` does (types, values, env, algorithm).

    Raises:
        ConfigError: Naming the key path of the first problem.
    """
    try:
        config = RunConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(validation_message(error, RunConfig)) from error
    trainer_config(config)
    algorithm_config(config)
    env_kwargs(config)
    _check_policy(config)
    if config.logging.wandb:
        try:
            import wandb  # noqa: F401
        except ImportError as error:
            raise ConfigError(
                "logging.wandb: true needs the 'wandb' package: pip install 'pathgrad[wandb]'."
            ) from error
    return config


def _check_policy(config: RunConfig) -> None:
    """An ``actor_only`` policy needs an actor network config that builds."""
    section = config.policy
    if section.name != "actor_only":
        if section.actor is not None:
            raise ConfigError("policy.actor: only for policy.name: actor_only.")
        return
    if section.actor is None:
        raise ConfigError("policy.actor: actor_only needs the actor network, {type: mlp, ...}.")
    from pathgrad.models import build_mlp_from_cfg

    try:
        build_mlp_from_cfg(section.actor, 1, 1)
    except (ValueError, TypeError, KeyError) as error:
        raise ConfigError(f"policy.actor: {error}") from error


def dump_config(config: RunConfig) -> str:
    """The resolved config as YAML that :func:`load_config` reads back identically."""
    return yaml.safe_dump(config.model_dump(mode="python"), sort_keys=False)


# From sections to the library's config objects ----------------------------------------


def trainer_config(config: RunConfig, checkpoint_dir: str | Path = "checkpoints"):
    """The :class:`DifferentiableTrainerCfg` of a run config.

    Raises:
        ConfigError: If the trainer rejects a value.
    """
    values = config.trainer.model_dump()
    for key in ("total_timesteps", "total_updates", "seed"):
        values.pop(key)
    values.update(
        checkpoint_dir=str(checkpoint_dir),
        use_wandb=config.logging.wandb,
        eval_frequency_steps=config.eval.frequency_steps,
        num_eval_episodes=config.eval.episodes,
        eval_seed=config.eval.seed,
        final_evaluation=config.eval.final,
    )
    try:
        return DifferentiableTrainerCfg(**values)
    except ValueError as error:
        raise ConfigError(f"trainer: {error}") from error


def _dataclass_model(cls: type, name: str) -> type[BaseModel]:
    """A strict pydantic model with the fields (and nested configs) of a dataclass."""
    hints = typing.get_type_hints(cls)
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        annotation = hints[field.name]
        members = [
            member for member in typing.get_args(annotation) if member is not type(None)
        ]  # an optional config: ``SomeCfg | None``
        if len(members) == 1 and dataclasses.is_dataclass(members[0]):
            annotation = members[0]
        if dataclasses.is_dataclass(annotation):
            annotation = _dataclass_model(annotation, annotation.__name__) | None
        fields[field.name] = (annotation, Field(None))
    return create_model(name, __base__=Section, **fields)


def algorithm_config(config: RunConfig) -> Any:
    """The algorithm's config object (e.g. :class:`APGCfg`), on the env's device.

    Raises:
        ConfigError: For an unknown algorithm, key, type or value.
    """
    try:
        _, cfg_type = get_algorithm(config.algorithm.name)
    except ValueError as error:
        hint = did_you_mean(config.algorithm.name.lower(), sorted(ALGORITHMS))
        raise ConfigError(f"algorithm.name: {error}{hint}") from error
    retired = retired_field_error(cfg_type, config.algorithm.cfg)
    if retired is not None:
        raise ConfigError(f"algorithm.cfg.{retired}")
    model = _dataclass_model(cfg_type, cfg_type.__name__)
    try:
        model.model_validate(config.algorithm.cfg)
    except ValidationError as error:
        raise ConfigError(validation_message(error, model, "algorithm.cfg")) from error
    values = {"device": config.env.device, **config.algorithm.cfg}
    try:
        return cfg_type(**values)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"algorithm.cfg: {error}") from error


def _env_parameters(factory: Any) -> dict[str, inspect.Parameter]:
    """Keyword parameters of an env factory, following ``**kwargs`` up the class tree."""
    classes = factory.__mro__ if inspect.isclass(factory) else (factory,)
    parameters: dict[str, inspect.Parameter] = {}
    for owner in classes:
        function = owner.__init__ if inspect.isclass(owner) else owner
        if inspect.isclass(owner) and "__init__" not in owner.__dict__:
            continue
        signature = inspect.signature(function)
        open_ended = False
        for name, parameter in signature.parameters.items():
            if parameter.kind is parameter.VAR_KEYWORD:
                open_ended = True
            elif name != "self" and parameter.kind is not parameter.VAR_POSITIONAL:
                parameters.setdefault(name, parameter)
        if not open_ended or owner is object:
            break
    return parameters


def env_kwargs(config: RunConfig, *, training: bool = False) -> dict[str, Any]:
    """Validated constructor arguments of the configured env (without the owned ones).

    ``training``: those of the training envs (``env.train_cfg`` over ``env.cfg``).

    Raises:
        ConfigError: For an unknown env, an unknown argument or a wrong type.
    """
    try:
        import_env_modules(config.env.module)
    except Exception as error:  # noqa: BLE001 - any failing import is a config error
        raise ConfigError(
            f"env.module: cannot import {config.env.module!r}: {type(error).__name__}: {error}"
        ) from error
    try:
        factory = get_learning_env_factory(config.env.name)
    except ImportError as error:
        raise ConfigError(f"env.name: {error}") from error
    except ValueError as error:
        names = get_registered_learning_env_names()
        hint = did_you_mean(config.env.name, names)
        raise ConfigError(
            f"env.name: unknown env '{config.env.name}'{hint}; registered: {', '.join(names)}."
        ) from error
    parameters = _env_parameters(factory)
    allowed = sorted(set(parameters) - ENV_ARGUMENTS_OWNED_ELSEWHERE)
    sections = {"env.cfg": config.env.cfg, "env.train_cfg": config.env.train_cfg}
    for label, section in sections.items():
        for name in section:
            if name in ENV_ARGUMENTS_OWNED_ELSEWHERE:
                message = "set by the env section or trainer.seed, not here."
                raise ConfigError(f"{label}.{name}: {message}")
            if name not in parameters:
                raise ConfigError(f"{label}.{name}: unknown key{did_you_mean(name, allowed)}")
    hints = {}
    for owner in factory.__mro__ if inspect.isclass(factory) else (factory,):
        init = owner.__init__ if inspect.isclass(owner) else owner
        try:
            hints.update({k: v for k, v in typing.get_type_hints(init).items() if k not in hints})
        except (NameError, TypeError):
            continue
    for label, section in sections.items():
        fields = {name: (hints.get(name, Any), Field(None)) for name in section}
        model = create_model("EnvArguments", __config__=ConfigDict(extra="forbid"), **fields)
        try:
            model.model_validate(section)
        except ValidationError as error:
            raise ConfigError(validation_message(error, model, label)) from error
    _check_capabilities(config, factory)
    return {**config.env.cfg, **(config.env.train_cfg if training else {})}


def _check_capabilities(config: RunConfig, factory: Any) -> None:
    """What the env declares it supports (``supported_dtypes``, ``supports_torch_compile``)."""
    dtypes = getattr(factory, "supported_dtypes", None)
    if dtypes is not None and config.env.dtype not in dtypes:
        raise ConfigError(
            f"env.dtype: {config.env.name} computes in {' or '.join(dtypes)}, "
            f"not {config.env.dtype}."
        )
    if config.trainer.torch_compile and getattr(factory, "supports_torch_compile", True) is False:
        raise ConfigError(
            f"trainer.torch_compile: {config.env.name} cannot be compiled (its step runs "
            "outside PyTorch); set trainer.torch_compile=false."
        )
