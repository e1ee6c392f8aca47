"""A trained run back: its checkpoint chosen and checked, its policy and normalizer rebuilt.

What ``pathgrad eval``, ``export`` and ``render`` and :func:`pathgrad.load` share.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from gymnasium.spaces import Box

from pathgrad.checkpoint import INDEX_FILENAME, latest_checkpoint, read_checkpoint
from pathgrad.core.action_bounds import action_space_bounds
from pathgrad.core.state_checks import check_state_shapes
from pathgrad.normalization import RunningObservationNormalizer
from pathgrad.runs.config import ConfigError, RunConfig, device_problem, validate_config
from pathgrad.runs.config_sources import merge_layers, read_yaml
from pathgrad.runs.errors import UsageError
from pathgrad.runs.run import CONFIG_FILE, build_env, build_policy

__all__ = [
    "LoadedPolicy",
    "load",
    "load_for_evaluation",
    "policy_from_checkpoint",
    "resolve_checkpoint",
]

_TARGETS = "give a run directory or a checkpoint file"
_RUN_KEYS = (("env", "name"), ("policy", "hidden_sizes"))  # a checkpoint must share them


def resolve_checkpoint(target: Path) -> Path:
    """The checkpoint of ``target``: a run directory's latest, or ``target`` itself.

    Raises:
        UsageError: For a folder that is not a run directory (no ``config.yaml``),
            a run without checkpoints, or a malformed index.
    """
    if not target.is_dir():
        return target
    directory = target / "checkpoints"
    if not (target / CONFIG_FILE).is_file():
        missing = CONFIG_FILE if directory.is_dir() else f"{CONFIG_FILE}, no checkpoints/"
        raise UsageError(f"'{target}' is not a run directory (no {missing}); {_TARGETS}.")
    if not (directory / INDEX_FILENAME).is_file():
        files = sorted(directory.glob("*.pt"), key=lambda path: path.stat().st_mtime)
        if files:
            raise UsageError(
                f"run directory '{target}' has checkpoint files but no {INDEX_FILENAME}; "
                f"give one of them, e.g. '{files[-1]}'."
            )
        raise UsageError(f"run directory '{target}' has no checkpoint yet; {_TARGETS}.")
    try:
        return latest_checkpoint(directory)
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(str(error)) from error


def _check_run_matches(run_dir: Path, path: Path, trained: dict[str, Any]) -> None:
    """A run directory's checkpoint must have been trained with the run's env and policy."""
    try:
        saved = read_yaml(run_dir / CONFIG_FILE)
    except ConfigError as error:
        raise UsageError(str(error)) from error
    for section, key in _RUN_KEYS:
        ours, theirs = _entry(saved, section, key), _entry(trained, section, key)
        if ours is not None and theirs is not None and ours != theirs:
            raise UsageError(
                f"checkpoint '{path}' was trained with {section}.{key} {theirs}, but run "
                f"directory '{run_dir}' has {ours} ({CONFIG_FILE}); give the checkpoint file "
                "itself to use it anyway."
            )


def _entry(document: dict[str, Any], section: str, key: str) -> Any:
    """``document[section][key]`` (a tuple as a list), ``None`` where it is missing."""
    part = document.get(section)
    value = part.get(key) if isinstance(part, dict) else None
    return list(value) if isinstance(value, tuple) else value


def load_for_evaluation(
    target: Path, device: str | None = None, env_options: Sequence[str] = ()
) -> tuple[RunConfig, dict[str, Any], Path]:
    """Config, checkpoint and its path, for a run directory (latest checkpoint) or a file.

    The checkpoint's config is validated as a config file is. Its device is
    replaced by ``device``, or by ``cpu`` where the saved one is not available;
    ``env_options`` (``env.cfg.KEY=VALUE``, such as a command to follow) change the
    env's options for this evaluation. A run directory's checkpoint must have the env
    and policy sizes of its ``config.yaml``.

    Raises:
        UsageError: For a missing or malformed file or index, a folder that is
            not a run directory, a checkpoint of another run, an override of
            anything but ``env.cfg``, or an invalid config.
    """
    for option in env_options:
        if not option.startswith("env.cfg.") or "=" not in option:
            raise UsageError(
                f"'{option}': only the env's options can change here, as "
                "env.cfg.KEY=VALUE (e.g. env.cfg.command=[0.5,0,0]); the policy's sizes, "
                "the env and its number of envs are the checkpoint's."
            )
    path = resolve_checkpoint(target)
    try:
        checkpoint = read_checkpoint(path)
    except (FileNotFoundError, ValueError) as error:
        raise UsageError(str(error)) from error
    data = checkpoint.get("config")
    if not isinstance(data, dict):
        raise UsageError(f"'{path}' carries no run config (not written by `pathgrad train`).")
    if target.is_dir():
        _check_run_matches(target, path, data)
    data = {**data, "env": dict(data.get("env") or {})}
    if device is not None:
        data["env"]["device"] = device
    elif device_problem(str(data["env"].get("device", "cpu"))) is not None:
        data["env"]["device"] = "cpu"
    if device is not None and device_problem(device) is not None:
        raise UsageError(f"--device: {device_problem(device)}")
    if env_options:
        try:
            data = merge_layers({}, data, env_options)
            validate_config(data)
        except ConfigError as error:
            raise UsageError(f"{' '.join(env_options)}: {error}") from error
    try:
        config = validate_config(data)
    except ConfigError as error:
        raise UsageError(f"'{path}' carries an invalid run config: {error}") from error
    return config, checkpoint, path


def policy_from_checkpoint(
    config: RunConfig, checkpoint: dict[str, Any], env: Any, path: Path
) -> tuple[Any, RunningObservationNormalizer | None]:
    """The checkpoint's policy (eval mode) and normalizer, checked against its config."""
    policy = build_policy(config, env)
    try:
        check_state_shapes("policy", checkpoint["policy"], policy.state_dict())
        policy.load_state_dict(checkpoint["policy"])
        normalizer = None
        state = checkpoint.get("observation_normalizer")
        if state is not None:
            dim = int(env.single_observation_space.shape[-1])
            normalizer = RunningObservationNormalizer(dim, config.env.device)
            normalizer.load_state_dict(state)
    except (ValueError, KeyError, TypeError, RuntimeError) as error:
        changed = _space_change(config, checkpoint.get("policy"), env)
        if changed is not None:
            space, now, then = changed
            raise UsageError(
                f"'{path}' was trained for an {space} of size {then}, but the env's {space} "
                f"has size {now} now: the env's {space} space changed since training (its "
                "config did not); use the env it was trained with."
            ) from error
        raise UsageError(f"'{path}' does not match its own config: {error}") from error
    policy.eval()
    return policy, normalizer


def _space_change(config: RunConfig, saved: Any, env: Any) -> tuple[str, int, int] | None:
    """Which of the env's spaces no longer has the size the checkpoint's policy was built
    for: ``("action", env's size, checkpoint's size)``; None if none (or not that).

    The policy of the config is rebuilt for each size the saved entries hold, one space
    changed at a time: the size whose every entry fits is the checkpoint's.
    """
    if not isinstance(saved, dict):
        return None
    shapes = {key: tuple(value.shape) for key, value in saved.items() if hasattr(value, "shape")}
    sizes = {size for shape in shapes.values() for size in shape}
    spaces = {"observation": env.single_observation_space, "action": env.single_action_space}
    for name, space in spaces.items():
        for size in sorted(sizes - {int(space.shape[-1])}):
            resized = Box(-np.inf, np.inf, (int(size),), space.dtype)
            twin = SimpleNamespace(**{f"single_{n}_space": s for n, s in spaces.items()})
            setattr(twin, f"single_{name}_space", resized)
            try:
                built = build_policy(config, twin).state_dict()
            except (ValueError, TypeError, RuntimeError):
                continue
            if {key: tuple(value.shape) for key, value in built.items()} == shapes:
                return name, int(space.shape[-1]), int(size)
    return None



class LoadedPolicy:
    """The deterministic policy of a run or checkpoint: normalizer folded in, actions bounded.

    Attributes:
        config: The run's config.
        module: The :class:`~pathgrad.export.DeployedPolicy` (a ``torch.nn.Module``).
        checkpoint_path: The checkpoint it came from.
        env: A one-env instance of the run's env, to act in.
    """

    def __init__(
        self, config: RunConfig, module: torch.nn.Module, checkpoint_path: Path, env: Any
    ) -> None:
        self.config, self.module, self.checkpoint_path = config, module, checkpoint_path
        self.env = env

    @torch.no_grad()
    def predict(self, observation: Any, deterministic: bool = True) -> Any:
        """Actions for observations ``[D]`` or ``[B, D]`` (tensor or array; same kind back).

        Raises:
            ValueError: For ``deterministic=False`` (the loaded policy is its mean).
        """
        if not deterministic:
            raise ValueError("a loaded policy acts deterministically (its mean action).")
        is_tensor = isinstance(observation, torch.Tensor)
        dtype = self.module.shift.dtype
        batch = torch.as_tensor(observation, dtype=dtype)
        single = batch.ndim == 1
        actions = self.module(batch.unsqueeze(0) if single else batch)
        actions = actions[0] if single else actions
        return actions if is_tensor else actions.numpy()


def load(
    target: str | Path, device: str = "cpu", env_options: Sequence[str] = ()
) -> LoadedPolicy:
    """The policy of a run directory (its latest checkpoint) or of a checkpoint file, with
    its env (``env_options``: ``env.cfg.KEY=VALUE`` changes to its options).

    Raises:
        UsageError: (:class:`pathgrad.runs.errors.UsageError`, a ValueError) For a missing,
            malformed or mismatched file, a folder that is not a run directory,
            or a run whose latest checkpoint has another env or policy sizes.
    """
    from pathgrad.export import DeployedPolicy

    config, checkpoint, path = load_for_evaluation(Path(target), device, env_options)
    env = build_env(config, 1, config.trainer.seed)
    policy, normalizer = policy_from_checkpoint(config, checkpoint, env, path)
    bounds = action_space_bounds(env.single_action_space, config.env.device)
    module = DeployedPolicy(policy, normalizer, bounds).eval()
    return LoadedPolicy(config, module, path, env)
