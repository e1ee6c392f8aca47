"""The reference's training YAML, recognised and mapped to pathgrad's run config.

The reference trains a registered learning env from ``trainer: {exp_name,
learning_env: {name, cfg}, seed, num_envs, iterations, segment_length,
update_horizon, enable_eval, eval_freq, ...}``, ``policy: {name: actor_only,
initial_log_std, actor: {...}}`` and ``algorithm: {name: apg, cfg: {...}}``.
:func:`translate` maps every key to its pathgrad counterpart, fills in the
reference's defaults for the keys a file leaves out (they differ from
pathgrad's: 16-step segments, seed 1, no periodic evaluation, ...), and returns
one ``reference key -> pathgrad key`` line per key; keys without a counterpart
are refused, one line each, in one :class:`ConfigError`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from pathgrad.algo.registry import get_algorithm
from pathgrad.runs.config_sources import ConfigError

__all__ = ["Translation", "is_reference_document", "translate"]

# Keys of the reference's trainer section that pathgrad's has not.
_MARKERS = {"learning_env", "gym_config", "iterations", "exp_name", "num_envs", "enable_eval"}
# The reference's env names whose pathgrad env has another name (lower case, as its registry).
ENV_NAMES = {"pointmassrl": "PointMass"}
# Constructor arguments the pathgrad env names differently.
ENV_ARGUMENTS = {"PointMass": {"success_threshold": "success_radius"}}

# trainer key -> (pathgrad key, the reference's default where it differs from pathgrad's).
_TRAINER = {
    "exp_name": ("trainer.experiment_name", None),
    "seed": ("trainer.seed", 1),
    "device": ("env.device", None),
    "num_envs": ("env.num_envs", None),
    "segment_length": ("trainer.segment_length", 16),
    "deterministic_actions": ("trainer.deterministic_actions", None),
    "save_frequency_updates": ("trainer.save_frequency_updates", 0),
    "num_eval_envs": ("eval.num_envs", None),
    "num_eval_episodes": ("eval.episodes", 5),
    "best_eval_metric": ("trainer.best_eval_metric", None),
    "best_eval_mode": ("trainer.best_eval_mode", None),
    "use_wandb": ("logging.wandb", None),
    "wandb_project_name": ("logging.wandb_project", None),
}
_TRAINER_HANDLED = {"learning_env", "iterations", "total_timesteps", "update_horizon"}
_TRAINER_HANDLED |= {"enable_eval", "eval_freq", "eval_seed", "distributed"}
# Used only by the reference's PPO trainer or its simulator tasks, ignored with a learning env.
_TRAINER_UNUSED = {
    "buffer_size": "the reference's PPO trainer only",
    "rollout_steps": "the reference's PPO trainer only",
    "save_freq": "the reference's PPO trainer only",
    "headless": "the reference's simulator only",
    "renderer": "the reference's simulator only",
    "gpu_id": "the reference's simulator only",
}
# APG ignores these AlgorithmCfg fields in the reference too.
_ALGORITHM_UNUSED = {"batch_size", "gae_lambda"}


@dataclasses.dataclass(frozen=True)
class Translation:
    """A reference config as pathgrad's config document, and what became of each key."""

    document: dict[str, Any]
    lines: list[str]


def is_reference_document(data: Any) -> bool:
    """Whether ``data`` is in the reference's format (a ``trainer`` with its keys, no ``env``)."""
    if not isinstance(data, Mapping) or "env" in data:
        return False
    trainer = data.get("trainer")
    return isinstance(trainer, Mapping) and bool(_MARKERS & set(trainer))


def _text(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{...}"
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    return str(value)


class _Builder:
    """The pathgrad document, the lines and the refusals as the sections are read."""

    def __init__(self) -> None:
        self.document: dict[str, dict[str, Any]] = {}
        self.lines: list[str] = []
        self.refused: list[str] = []

    def put(self, target: str, value: Any) -> None:
        section, _, rest = target.partition(".")
        node = self.document.setdefault(section, {})
        *parents, key = rest.split(".")
        for parent in parents:
            node = node.setdefault(parent, {})
        node[key] = value

    def set(
        self, source: str, target: str, value: Any, *, default: bool = False, given: Any = None
    ) -> None:
        """``target = value``, and its line (``given``: the reference's value, if another)."""
        self.put(target, value)
        shown = _text(value if given is None else given)
        origin = f"{source} (not given: the reference's default)" if default else source
        self.lines.append(f"{origin}: {shown} -> {target}: {_text(value)}")

    def drop(self, source: str, value: Any, why: str) -> None:
        self.lines.append(f"{source}: {_text(value)} -> (not used: {why})")

    def refuse(self, source: str, why: str) -> None:
        self.refused.append(f"{source}: {why}")


def translate(
    data: Mapping[str, Any], env_arguments: Callable[[str], set[str] | None]
) -> Translation:
    """pathgrad's config document for a reference config, and one line per key.

    Args:
        data: The reference's config (its ``trainer``, ``policy`` and ``algorithm``).
        env_arguments: The constructor arguments of a pathgrad env by name
            (``None``: unknown env, left to the config's validation).

    Raises:
        ConfigError: Listing, one line each, the keys without a pathgrad counterpart.
    """
    built = _Builder()
    for section in sorted(set(data) - {"trainer", "policy", "algorithm"}):
        built.refuse(section, "no such section in the reference's format or pathgrad's")
    env_name = _trainer(built, dict(data.get("trainer") or {}), env_arguments)
    _policy(built, dict(data.get("policy") or {}))
    algorithm_name = _algorithm(built, dict(data.get("algorithm") or {}))
    if "experiment_name" not in built.document.get("trainer", {}):
        name = f"{env_name}_{algorithm_name}"
        built.set("trainer.exp_name", "trainer.experiment_name", name, default=True)
    if built.refused:
        raise ConfigError(
            "these keys of the reference's config have no counterpart in pathgrad:\n"
            + "\n".join(built.refused)
        )
    return Translation(built.document, built.lines)


def _trainer(
    built: _Builder, trainer: dict[str, Any], env_arguments: Callable[[str], set[str] | None]
) -> str:
    """The trainer section: env, budget, evaluation and the plain renames. Returns the env name."""
    env_name = _learning_env(built, trainer, env_arguments)
    for key, (target, default) in _TRAINER.items():
        if key in trainer:
            built.set(f"trainer.{key}", target, trainer[key])
        elif default is not None:
            built.set(f"trainer.{key}", target, default, default=True)
    if "update_horizon" in trainer:
        built.set("trainer.update_horizon", "trainer.update_horizon", trainer["update_horizon"])
    if "total_timesteps" in trainer:
        built.set("trainer.total_timesteps", "trainer.total_timesteps", trainer["total_timesteps"])
        built.put("trainer.total_updates", None)
    else:  # the reference's budget: iterations x update_horizon steps x num_envs
        iterations = trainer.get("iterations", 250)
        built.set("trainer.iterations", "trainer.total_updates", iterations,
                  default="iterations" not in trainer)  # fmt: skip
        built.put("trainer.total_timesteps", None)
    enabled = bool(trainer.get("enable_eval", False))
    frequency = int(trainer.get("eval_freq", 0)) if enabled else 0
    built.put("eval.frequency_steps", frequency)
    built.put("eval.final", enabled)  # pathgrad also evaluates the final policy
    given = "enable_eval" in trainer or "eval_freq" in trainer
    note = "" if given else " (not given: the reference's defaults)"
    built.lines.append(
        f"trainer.enable_eval: {_text(enabled)}, trainer.eval_freq: "
        f"{_text(trainer.get('eval_freq', 0))}{note}"
        f" -> eval.frequency_steps: {frequency}, eval.final: {_text(enabled)}"
    )
    seed = int(trainer.get("seed", 1))
    eval_seed = trainer.get("eval_seed", seed + 10_000)
    built.set("trainer.eval_seed", "eval.seed", eval_seed, default="eval_seed" not in trainer)
    if trainer.get("distributed"):
        built.refuse("trainer.distributed", "true: use `pathgrad train --nproc N CONFIG`")
    elif "distributed" in trainer:
        built.drop("trainer.distributed", False, "one process unless --nproc")
    known = set(_TRAINER) | _TRAINER_HANDLED | {"gym_config"}
    for key in sorted(set(trainer) - known):
        if key in _TRAINER_UNUSED:
            built.drop(f"trainer.{key}", trainer[key], _TRAINER_UNUSED[key])
        else:
            built.refuse(f"trainer.{key}", "no counterpart in pathgrad's trainer")
    return env_name


def _learning_env(
    built: _Builder, trainer: dict[str, Any], env_arguments: Callable[[str], set[str] | None]
) -> str:
    """``trainer.learning_env`` (a name, or ``{name, cfg}``) as ``env.name`` and ``env.cfg``."""
    if "gym_config" in trainer:
        built.refuse("trainer.gym_config", "the reference's simulator tasks are not in pathgrad")
    block = trainer.get("learning_env")
    if block is None:
        if "gym_config" not in trainer:
            built.refuse("trainer.learning_env", "missing: it names the env to train")
        return "env"
    block = {"name": block} if isinstance(block, str) else dict(block)
    reference_name = str(block.pop("name", ""))
    name = ENV_NAMES.get(reference_name.lower(), reference_name)
    built.set("trainer.learning_env.name", "env.name", name, given=reference_name)
    renames = ENV_ARGUMENTS.get(name, {})
    accepted = env_arguments(name)
    built.put("env.cfg", {})
    for key, value in dict(block.pop("cfg", None) or {}).items():
        target = renames.get(key, key)
        if accepted is not None and target not in accepted:
            built.refuse(
                f"trainer.learning_env.cfg.{key}", f"pathgrad's {name} has no such argument"
            )
            continue
        built.set(f"trainer.learning_env.cfg.{key}", f"env.cfg.{target}", value)
    for key in sorted(block):
        built.refuse(f"trainer.learning_env.{key}", "learning_env holds a name and a cfg")
    return reference_name


def _policy(built: _Builder, policy: dict[str, Any]) -> None:
    """``actor_only`` with its actor network and initial log-std."""
    name = str(policy.pop("name", "")).lower()
    if name != "actor_only":
        built.refuse("policy.name", f"'{name}': pathgrad ports actor_only (APG's policy)")
        return
    built.set("policy.name", "policy.name", "actor_only")
    if "actor" in policy:
        built.set("policy.actor", "policy.actor", policy.pop("actor"))
    log_std = policy.pop("initial_log_std", None)
    built.set("policy.initial_log_std", "policy.init_log_std",
              0.0 if log_std is None else float(log_std), default=log_std is None)  # fmt: skip
    if "critic" in policy:
        built.drop("policy.critic", policy.pop("critic"), "ActorOnly has no critic")
    if policy.get("squash_actions") is False:
        built.drop("policy.squash_actions", policy.pop("squash_actions"), "false is ActorOnly's")
    for key in sorted(policy):
        built.refuse(f"policy.{key}", "no counterpart in pathgrad's ActorOnly")


def _algorithm(built: _Builder, algorithm: dict[str, Any]) -> str:
    """The algorithm name and its config fields (pathgrad's config class decides which exist)."""
    name = str(algorithm.pop("name", "apg")).lower()
    try:
        _, cfg_type = get_algorithm(name)
    except ValueError:
        built.refuse("algorithm.name", f"'{name}' is not one of pathgrad's algorithms")
        return name
    built.set("algorithm.name", "algorithm.name", name)
    fields = {field.name for field in dataclasses.fields(cfg_type)}
    cfg = dict(algorithm.pop("cfg", None) or {})
    built.put("algorithm.cfg", {})
    for key, value in cfg.items():
        if key == "device":
            built.drop("algorithm.cfg.device", value, "trainer.device (env.device) sets it")
        elif key in _ALGORITHM_UNUSED:
            built.drop(f"algorithm.cfg.{key}", value, f"the reference's {name} does not use it")
        elif key in fields:
            built.set(f"algorithm.cfg.{key}", f"algorithm.cfg.{key}", value)
        else:
            built.refuse(f"algorithm.cfg.{key}", f"no field of pathgrad's {cfg_type.__name__}")
    if "max_grad_norm" not in cfg:
        built.set("algorithm.cfg.max_grad_norm", "algorithm.cfg.max_grad_norm", 0.5, default=True)
    for key in sorted(algorithm):
        built.refuse(f"algorithm.{key}", "an algorithm has a name and a cfg")
    return name
