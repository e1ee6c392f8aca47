"""Where an unknown config key belongs: ``env.substeps`` is ``env.cfg.substeps``.

A key given in the wrong section is the commonest config mistake after a typo:
an env constructor argument beside ``env.name`` instead of under ``env.cfg``,
``gamma`` under ``trainer`` or beside ``algorithm.name``. The sections' own
fields come from their pydantic models; ``env.cfg`` takes the configured env's
constructor arguments and ``algorithm.cfg`` the configured algorithm's config
fields, so both are read from the (raw) document's ``env.name``/``env.module``
and ``algorithm.name``.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from pathgrad.runs.config_sections import (
    ENV_ARGUMENTS_OWNED_ELSEWHERE,
    TRAINER_FIELDS_OWNED_ELSEWHERE,
    EnvSection,
    RunConfig,
)

__all__ = ["env_parameters", "key_home_hint"]


def env_parameters(factory: Any) -> dict[str, inspect.Parameter]:
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


def _section(data: dict[str, Any], name: str) -> dict[str, Any]:
    value = data.get(name)
    return value if isinstance(value, dict) else {}


def _env_arguments(data: dict[str, Any]) -> set[str]:
    """Constructor arguments of the document's env (none if it cannot be resolved)."""
    from pathgrad.env import get_learning_env_factory, import_env_modules

    env = _section(data, "env")
    name = env.get("name", EnvSection.model_fields["name"].default)
    try:
        import_env_modules(env.get("module"))
        factory = get_learning_env_factory(str(name))
        return set(env_parameters(factory)) - ENV_ARGUMENTS_OWNED_ELSEWHERE
    except Exception:  # noqa: BLE001 - an unresolvable env has its own error later
        return set()


def _algorithm_fields(data: dict[str, Any]) -> set[str]:
    """Config fields of the document's algorithm (none if it is unknown)."""
    from pathgrad.algo.registry import get_algorithm

    name = _section(data, "algorithm").get("name", "apg")
    try:
        _, cfg_type = get_algorithm(str(name))
    except Exception:  # noqa: BLE001 - an unknown algorithm has its own error later
        return set()
    return {field.name for field in dataclasses.fields(cfg_type)} - {"device"}


def _homes(data: dict[str, Any]) -> dict[str, set[str]]:
    """Every place a key can go, by its path."""
    homes = {
        section: set(model.annotation.model_fields) - {"cfg", "train_cfg"}
        for section, model in RunConfig.model_fields.items()
    }
    homes["trainer"] -= set(TRAINER_FIELDS_OWNED_ELSEWHERE)
    homes["env.cfg"] = _env_arguments(data)
    homes["algorithm.cfg"] = _algorithm_fields(data)
    return homes


#: Settings of a command, not of the config: where each is given instead.
COMMAND_LINE_ONLY = {
    "run_dir": "--run-dir DIR",
    "sweep_dir": "--sweep-dir DIR",
    "nproc": "--nproc N",
    "seeds": "--seeds S [S ...]",
    "grid": "--grid KEY=V1,V2",
    "jobs": "--jobs N",
}


def key_home_hint(data: dict[str, Any], loc: tuple[str, ...]) -> str:
    """`` (did you mean 'env.cfg.substeps'?)`` for a known key at an unknown ``loc``; else ``''``.

    ``loc`` is the unknown key's path (``("env", "substeps")``); only keys one
    level into a section, or into ``env.cfg``/``algorithm.cfg``, are looked up.
    A setting of the command (``trainer.run_dir``) names its option instead.
    """
    if len(loc) < 2 or not isinstance(data, dict):
        return ""
    here, key = ".".join(loc[:-1]), loc[-1]
    if key in COMMAND_LINE_ONLY and len(loc) == 2:
        return f" ({key} is an option of the command, not a config key: {COMMAND_LINE_ONLY[key]})"
    try:
        homes = _homes(data)
    except Exception:  # noqa: BLE001 - a hint must not replace the error it adds to
        return ""
    places = [path for path, keys in homes.items() if key in keys and path != here]
    if not places:
        return ""
    return f" (did you mean '{places[0]}.{key}'?)"
