"""The reference's ``env`` module: the env contract and the registry's lookups.

The contract (:class:`DifferentiableVecEnv`, :class:`DifferentiableRolloutSpec`,
:class:`ScheduledDifferentiableVecEnv`) lives in :mod:`pathgrad.core.env_protocols`
and registration in :mod:`pathgrad.core.env_registry`, below every env, so that
envs never import this module; the lookups here register the built-in envs
(:mod:`pathgrad.envs`) and installed plugins first.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
import types
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from pathgrad.core import env_registry
from pathgrad.core.env_protocols import (
    DifferentiableRolloutSpec,
    DifferentiableVecEnv,
    ScheduledDifferentiableVecEnv,
)
from pathgrad.core.env_registry import LearningEnvFactory, register_learning_env

__all__ = [
    "DifferentiableRolloutSpec",
    "DifferentiableVecEnv",
    "ScheduledDifferentiableVecEnv",
    "build_learning_env",
    "env_module_hint",
    "get_learning_env_factory",
    "get_registered_learning_env_names",
    "import_env_modules",
    "register_learning_env",
]

# Display names each env.module registered when it was first imported.
_MODULE_REGISTRATIONS: dict[str, list[str]] = {}


ENTRY_POINT_GROUP = "pathgrad.envs"
_plugins_loaded = False


def _register_builtin_envs() -> None:
    """Register the built-in envs and those of installed packages (once).

    A package makes its envs known through the ``pathgrad.envs`` entry-point
    group: an entry point naming a module is imported (its envs register
    themselves); one naming a factory (an env class or function) is
    registered under the entry point's name. A plugin that fails to load is
    skipped with a warning.
    """
    global _plugins_loaded
    import pathgrad.envs  # noqa: F401  (the built-in envs register themselves)

    if _plugins_loaded:
        return
    _plugins_loaded = True
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            target = entry_point.load()
            if not isinstance(target, types.ModuleType):
                register_learning_env(entry_point.name, target)
        except Exception as error:  # noqa: BLE001 - a broken plugin must not stop pathgrad
            warnings.warn(
                f"pathgrad: the env plugin '{entry_point.name} = {entry_point.value}' "
                f"failed to load: {type(error).__name__}: {error}",
                stacklevel=2,
            )


def import_env_modules(modules: str | Sequence[str] | None) -> None:
    """Import the modules that register envs (the config key ``env.module``).

    Raises:
        ImportError: Or any error the module raises while it is imported; a file
            path given instead of a module name says which name to give.
    """
    names = [modules] if isinstance(modules, str) else list(modules or ())
    if names:
        _working_directory_importable()
    for name in names:
        if name.endswith(".py") or "/" in name or os.sep in name:
            path = Path(name)
            raise ImportError(
                f"give the module's import name, not a file path: '{path.stem}', with its "
                f"folder ({path.parent.resolve()}) the working directory or on PYTHONPATH"
            )
        first_import = name not in sys.modules
        _register_builtin_envs()  # so that only the module's own registrations are new
        before = set(env_registry._REGISTRY)
        importlib.import_module(name)
        if first_import:
            new = [key for key in env_registry._REGISTRY if key not in before]
            _MODULE_REGISTRATIONS[name] = [env_registry._DISPLAY_NAMES[key] for key in new]


def env_module_hint(modules: str | Sequence[str] | None) -> str:
    """What the ``env.module`` modules registered, for a message about an unknown env name.

    ``" (env.module 'my_bot' was imported but registered no env: ...)"``, or
    the names they registered; empty without modules.
    """
    names = [modules] if isinstance(modules, str) else list(modules or ())
    parts = []
    for name in names:
        registered = _MODULE_REGISTRATIONS.get(name)
        if registered == []:
            parts.append(
                f"env.module '{name}' was imported but registered no env: decorate the env "
                'class with @register_learning_env("Name") (from pathgrad) in that module'
            )
        elif registered:
            parts.append(f"env.module '{name}' registered {', '.join(registered)}")
    return f" ({'; '.join(parts)})" if parts else ""


def _working_directory_importable() -> None:
    """Modules in the working directory import, as under ``python -m pathgrad``.

    The ``pathgrad`` command (a console script) has its own folder first on
    ``sys.path``, not the working directory, where a user's env module lives.
    """
    here = os.getcwd()
    if not any(entry in ("", here) for entry in sys.path):
        sys.path.insert(0, here)
        importlib.invalidate_caches()


def get_registered_learning_env_names() -> list[str]:
    """Names of the registered envs as registered, sorted case-insensitively."""
    _register_builtin_envs()
    names = env_registry._DISPLAY_NAMES
    return sorted((names[key] for key in env_registry._REGISTRY), key=str.lower)


def get_learning_env_factory(name: str) -> LearningEnvFactory:
    """The factory registered as ``name`` (case-insensitive); built-in envs are always known.

    Raises:
        ValueError: If ``name`` is not registered.
        ImportError: If the env needs a package that is not installed.
    """
    key = name.lower()
    if key not in env_registry._REGISTRY:
        _register_builtin_envs()
    if key not in env_registry._REGISTRY:
        available = ", ".join(get_registered_learning_env_names()) or "<none>"
        raise ValueError(f"Learning environment '{name}' is not registered. Available: {available}")
    factory = env_registry._REGISTRY[key]
    if isinstance(factory, str):
        module, _, attribute = factory.partition(":")
        try:
            factory = getattr(importlib.import_module(module), attribute)
        except ImportError as error:
            raise ImportError(f"{env_registry._DISPLAY_NAMES[key]}: {error}") from error
        env_registry._REGISTRY[key] = factory
    return factory


def build_learning_env(
    name: str, *, num_envs: int, device: torch.device | str, **cfg: Any
) -> DifferentiableVecEnv:
    """Build the registered env ``name`` with ``num_envs`` rows on ``device``.

    Raises:
        ValueError: If ``name`` is not registered.
    """
    return get_learning_env_factory(name)(num_envs=num_envs, device=torch.device(device), **cfg)
