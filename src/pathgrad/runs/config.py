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
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
)

from pathgrad.algo.registry import ALGORITHMS, get_algorithm, retired_field_error
from pathgrad.core.crash_report import describe
from pathgrad.core.devices import device_problem
from pathgrad.env import (
    env_module_hint,
    get_learning_env_factory,
    get_registered_learning_env_names,
    import_env_modules,
)
from pathgrad.runs.config_messages import did_you_mean, validation_message
from pathgrad.runs.config_sections import (
    ENV_ARGUMENTS_OWNED_ELSEWHERE,
    TRAINER_FIELDS_OWNED_ELSEWHERE,
    EnvSection,
    RunConfig,
    Section,
    default_experiment_name,
)
from pathgrad.runs.config_sources import ConfigError, merge_layers, model_files_beside, read_yaml
from pathgrad.runs.key_homes import env_parameters, key_home_hint
from pathgrad.runs.reference_yaml import Translation, is_reference_document, translate
from pathgrad.trainer.config import DifferentiableTrainerCfg

__all__ = [
    "ENV_ARGUMENTS_OWNED_ELSEWHERE",
    "TRAINER_FIELDS_OWNED_ELSEWHERE",
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


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> RunConfig:
    """Read, override and validate a run config; nothing else happens.

    Without a file, the overrides change the default task's config (PointMass).

    Raises:
        ConfigError: For a missing or unreadable file, a YAML syntax error, a
            malformed override, an unknown key, a wrong type or value, or an
            unknown env or algorithm.
    """
    data = read_yaml(Path(path)) if path is not None else {}
    missing = []
    if path is not None:
        translation = reference_translation(data)  # the reference's format, mapped
        data = data if translation is None else translation.document
        missing = model_files_beside(data, Path(path).parent)
    config = validate_config(merge_layers(default_document(), data, overrides))
    for section, value in missing:
        if getattr(config.env, section).get("model_file") == value:  # not overridden
            _check_model_file(config, section, value, Path(path).parent)
    return config


def _check_model_file(config: RunConfig, section: str, value: str, folder: Path) -> None:
    """A config file's relative ``model_file`` found nowhere: one error naming every place.

    The env looks in the working directory and beside its class's module; the
    config file's folder was looked at first.
    """
    factory = get_learning_env_factory(config.env.name)
    if not inspect.isclass(factory):  # a factory function: the env says where it looked
        return
    try:
        module_folder = Path(inspect.getfile(factory)).resolve().parent
    except (TypeError, OSError):  # a class without a file (a notebook's): the env says
        return
    places = [Path.cwd() / value, folder.resolve() / value, module_folder / value]
    if places[-1].is_file():
        return
    listed = ", ".join(f"'{place}'" for place in places)
    raise ConfigError(
        f"env.{section}.model_file: no file {value!r} in the working directory, beside the "
        f"config file or beside {factory.__name__}'s module (looked at {listed})."
    )


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
    return set(env_parameters(factory)) - ENV_ARGUMENTS_OWNED_ELSEWHERE


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
        raise ConfigError(_with_home(validation_message(error, RunConfig), error, data)) from error
    trainer_config(config)
    algorithm_config(config)
    env_factory = _checked_env_factory(config)
    _check_policy(config)
    if config.logging.wandb:
        try:
            import wandb  # noqa: F401
        except ImportError as error:
            raise ConfigError(
                "logging.wandb: true needs the 'wandb' package: pip install 'pathgrad[wandb]'."
            ) from error
    algorithm_factory, algorithm_cfg_type = get_algorithm(config.algorithm.name)
    config._resolved = Resolution(
        _resolved_names(config),
        env_factory,
        frozenset(env_parameters(env_factory)),
        algorithm_factory,
        algorithm_cfg_type,
    )
    return config


def _resolved_names(config: RunConfig) -> tuple[Any, ...]:
    """What a resolution depends on: the env (and its module) and the algorithm named."""
    return (config.env.name, config.env.module, config.algorithm.name)


@dataclasses.dataclass(frozen=True, eq=False)
class Resolution:
    """What validating a config looked up, so that building a run only builds.

    Not part of the config's value: it compares equal to any other (or none).
    """

    names: tuple[Any, ...]  # the env, env module and algorithm it resolved
    env_factory: Any
    env_arguments: frozenset[str]
    algorithm_factory: Any
    algorithm_cfg_type: type

    def __eq__(self, other: object) -> bool:
        return other is None or isinstance(other, Resolution)

    __hash__ = None  # type: ignore[assignment]


def resolution(config: RunConfig) -> Resolution:
    """The env factory and algorithm of a validated ``config`` (validated now if it was
    not, or if its env or algorithm was changed since).

    Raises:
        ConfigError: If ``config`` needs validating and is invalid.
    """
    if config._resolved is None or config._resolved.names != _resolved_names(config):
        config._resolved = validate_config(config.model_dump(mode="python"))._resolved
    return config._resolved


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


def _with_home(
    message: str, error: ValidationError, data: dict[str, Any], prefix: tuple[str, ...] = ()
) -> str:
    """``message`` with where an unknown key belongs, when no closer name was found."""
    first = error.errors()[0]
    if first["type"] != "extra_forbidden" or "did you mean" in message:
        return message
    return message + key_home_hint(data, (*prefix, *(str(part) for part in first["loc"])))


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
        message = validation_message(error, model, "algorithm.cfg")
        data = config.model_dump(mode="python")
        raise ConfigError(_with_home(message, error, data, ("algorithm", "cfg"))) from error
    values = {"device": config.env.device, **config.algorithm.cfg}
    try:
        return cfg_type(**values)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"algorithm.cfg: {error}") from error


def env_kwargs(config: RunConfig, *, training: bool = False) -> dict[str, Any]:
    """Validated constructor arguments of the configured env (without the owned ones).

    ``training``: those of the training envs (``env.train_cfg`` over ``env.cfg``).

    Raises:
        ConfigError: For an unknown env, an unknown argument or a wrong type.
    """
    _checked_env_factory(config)
    return {**config.env.cfg, **(config.env.train_cfg if training else {})}


def _checked_env_factory(config: RunConfig) -> Any:
    """The configured env's factory, once its module, name and arguments are checked.

    Raises:
        ConfigError: For an unknown env, an unknown argument or a wrong type.
    """
    try:
        import_env_modules(config.env.module)
    except Exception as error:  # noqa: BLE001 - any failing import is a config error
        raise ConfigError(
            f"env.module: cannot import {config.env.module!r}: {describe(error)}"
        ) from error
    try:
        factory = get_learning_env_factory(config.env.name)
    except ImportError as error:
        raise ConfigError(f"env.name: {error}") from error
    except ValueError as error:
        names = get_registered_learning_env_names()
        hint = did_you_mean(config.env.name, names)
        raise ConfigError(
            f"env.name: unknown env '{config.env.name}'{hint}"
            f"{env_module_hint(config.env.module)}; registered: {', '.join(names)}."
        ) from error
    parameters = env_parameters(factory)
    allowed = sorted(set(parameters) - ENV_ARGUMENTS_OWNED_ELSEWHERE)
    sections = {"env.cfg": config.env.cfg, "env.train_cfg": config.env.train_cfg}
    for label, section in sections.items():
        for name in section:
            if name in ENV_ARGUMENTS_OWNED_ELSEWHERE:
                message = "set by the env section or trainer.seed, not here."
                raise ConfigError(f"{label}.{name}: {message}")
            if name not in parameters:
                hint = (
                    did_you_mean(name, allowed)
                    or did_you_mean(
                        name,
                        [key for key in EnvSection.model_fields if key not in ("cfg", "train_cfg")],
                    ).replace(" '", " 'env.", 1)  # a key of the env section given in env.cfg
                    or key_home_hint(config.model_dump(mode="python"), ("env", "cfg", name))
                )
                raise ConfigError(f"{label}.{name}: unknown key{hint}")
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
    return factory


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
