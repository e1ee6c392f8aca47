"""Environment contracts, rollout specs and the environment registry.

A :class:`DifferentiableVecEnv` is a batch of ``num_envs`` environments whose
``step`` keeps the autograd graph: reward and next observation are
differentiable in the action and in the state carried from earlier steps.

Contract of ``step(action[N, A]) -> (obs, reward[N], terminated[N], truncated[N], info)``:

- Rows that finish reset inside ``step``: ``obs`` holds the next episode's
  first observation for them, while reward and done flags are those of the
  finishing step.
- ``info["final_observation"]`` is the observation before any reset, for every
  row and graph-connected (a critic bootstraps truncated episodes from it).
- ``info["metrics"]`` maps names to per-env tensors describing the state the
  step ended in, before any reset (for example ``success`` or ``final_distance``).

``single_action_space`` is the set of actions the env is meant for. What an
env does with an action outside it is its own choice and part of its
documentation: the built-in PointMass, Reacher, Quadrotor and CartPoleSwingUp
apply it unclipped (more force than the bound), Pendulum and
MountainCarContinuous clamp it as Gymnasium does. Policies must stay inside:
a squashed ``GaussianMLPPolicy`` (the command line's default) or the trainer's
``clip_actions_to_space``; evaluation clamps when training does, and exported
policies always clamp to the space.

``detach_state()`` cuts the graph and returns the current observation without
resetting: it is the truncation boundary of truncated backpropagation.
``reset(seed=...)`` makes the run reproducible: each env owns its generator.
Envs that offer ``state_dict()``/``load_state_dict()`` are resumed exactly.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import os
import sys
import types
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
from gymnasium.spaces import Space

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

LearningEnvFactory = Callable[..., "DifferentiableVecEnv"]

_REGISTRY: dict[str, LearningEnvFactory] = {}
_DISPLAY_NAMES: dict[str, str] = {}
# Display names each env.module registered when it was first imported.
_MODULE_REGISTRATIONS: dict[str, list[str]] = {}


@runtime_checkable
class DifferentiableVecEnv(Protocol):
    """Batched environment whose ``step`` preserves the autograd graph."""

    num_envs: int
    device: torch.device
    single_observation_space: Space
    single_action_space: Space

    def reset(
        self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Reset every env and return the first observation ``[N, D]``."""
        ...

    def step(
        self, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Advance every env by one step, auto-resetting rows that finish."""
        ...

    def detach_state(self) -> torch.Tensor:
        """Cut the graph of the carried state; return the current observation."""
        ...


@dataclasses.dataclass(frozen=True)
class DifferentiableRolloutSpec:
    """What a scheduled env asks of the next complete rollout.

    Attributes:
        num_steps: Length of the rollout.
        objective_scale: Scalar or per-env multiplier of the return.
        metadata: Scalars logged as ``train/rollout_<key>_mean``.
    """

    num_steps: int
    objective_scale: float | torch.Tensor = 1.0
    metadata: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if int(self.num_steps) <= 0:
            raise ValueError(f"num_steps must be positive, got {self.num_steps}.")


@runtime_checkable
class ScheduledDifferentiableVecEnv(DifferentiableVecEnv, Protocol):
    """An env that sets the length and scale of each complete rollout."""

    def prepare_differentiable_rollout(self, rollout_index: int) -> DifferentiableRolloutSpec:
        """Return the spec of complete rollout number ``rollout_index``."""
        ...


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
    importlib.import_module("pathgrad.envs")
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
        before = set(_REGISTRY)
        importlib.import_module(name)
        if first_import:
            _MODULE_REGISTRATIONS[name] = [_DISPLAY_NAMES[k] for k in _REGISTRY if k not in before]


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
    return sorted((_DISPLAY_NAMES[key] for key in _REGISTRY), key=str.lower)


def get_learning_env_factory(name: str) -> LearningEnvFactory:
    """The factory registered as ``name`` (case-insensitive); built-in envs are always known.

    Raises:
        ValueError: If ``name`` is not registered.
        ImportError: If the env needs a package that is not installed.
    """
    key = name.lower()
    if key not in _REGISTRY:
        _register_builtin_envs()
    if key not in _REGISTRY:
        available = ", ".join(get_registered_learning_env_names()) or "<none>"
        raise ValueError(f"Learning environment '{name}' is not registered. Available: {available}")
    factory = _REGISTRY[key]
    if isinstance(factory, str):
        module, _, attribute = factory.partition(":")
        try:
            factory = getattr(importlib.import_module(module), attribute)
        except ImportError as error:
            raise ImportError(f"{_DISPLAY_NAMES[key]}: {error}") from error
        _REGISTRY[key] = factory
    return factory


def build_learning_env(
    name: str, *, num_envs: int, device: torch.device | str, **cfg: Any
) -> DifferentiableVecEnv:
    """Build the registered env ``name`` with ``num_envs`` rows on ``device``.

    Raises:
        ValueError: If ``name`` is not registered.
    """
    return get_learning_env_factory(name)(num_envs=num_envs, device=torch.device(device), **cfg)
