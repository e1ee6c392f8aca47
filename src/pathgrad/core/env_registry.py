"""Where envs register under a name: the registry itself, below every env.

Envs (built-in ones in :mod:`pathgrad.envs`, a user's through ``env.module`` or
the ``pathgrad.envs`` entry points) register here; the lookups, which first make
sure the built-in envs are registered, are :mod:`pathgrad.env`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["LearningEnvFactory", "register_learning_env"]

LearningEnvFactory = Callable[..., Any]  # (num_envs=, device=, **cfg) -> DifferentiableVecEnv

_REGISTRY: dict[str, LearningEnvFactory | str] = {}
_DISPLAY_NAMES: dict[str, str] = {}


def register_learning_env(
    name: str, factory: LearningEnvFactory | str | None = None, *, override: bool = False
) -> Any:
    """Register an env factory under ``name`` (case-insensitive).

    Works as ``register_learning_env("Name", Factory)`` and as the decorator
    ``@register_learning_env("Name")``. A factory given as ``"module:attribute"``
    is imported when the env is first looked up (envs with optional dependencies).

    Raises:
        ValueError: If ``name`` is taken and ``override`` is false.
    """

    def decorator(env_factory: LearningEnvFactory) -> LearningEnvFactory:
        key = name.lower()
        if key in _REGISTRY and _REGISTRY[key] is not env_factory and not override:
            raise ValueError(f"Learning environment '{name}' is already registered.")
        _REGISTRY[key] = env_factory
        _DISPLAY_NAMES[key] = name
        return env_factory

    return decorator if factory is None else decorator(factory)
