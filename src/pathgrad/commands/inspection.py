"""``pathgrad eval``, ``export``, ``plot`` and ``envs``: reading runs and checkpoints."""

from __future__ import annotations

import argparse
import functools
import json
import warnings
from pathlib import Path
from typing import Any

from pathgrad.commands import UsageError, signals_raise
from pathgrad.core.action_bounds import action_space_bounds, clamp_action
from pathgrad.env import (
    build_learning_env,
    get_learning_env_factory,
    get_registered_learning_env_names,
    import_env_modules,
)
from pathgrad.evaluation import PATHGRAD_EVALUATION, evaluate_episodes
from pathgrad.runs.config import RunConfig
from pathgrad.runs.loading import load_for_evaluation, policy_from_checkpoint
from pathgrad.runs.run import SWEEP_FILE, build_env

__all__ = [
    "MAX_EVAL_EPISODES",
    "command_configs",
    "command_envs",
    "command_eval",
    "command_export",
    "command_plot",
]

MAX_EVAL_EPISODES = 1_000_000


def command_eval(args: argparse.Namespace) -> int:
    """``pathgrad eval RUN_DIR|CHECKPOINT [--episodes N] [--seed S] [--json]
    [env.cfg.KEY=VALUE ...]``."""
    if args.episodes is not None and not 0 < args.episodes <= MAX_EVAL_EPISODES:
        raise UsageError(f"--episodes must be between 1 and {MAX_EVAL_EPISODES:,}.")
    if args.seed is not None and not 0 <= args.seed < 2**63:
        raise UsageError("--seed must be between 0 and 2**63 - 1.")
    config, checkpoint, path = load_for_evaluation(
        Path(args.target), args.device, getattr(args, "env_options", ())
    )
    env = build_env(config, config.eval.num_envs, config.trainer.seed + 1)
    policy, normalizer = policy_from_checkpoint(config, checkpoint, env, path)
    episodes = args.episodes or config.eval.episodes
    seed = args.seed if args.seed is not None else config.eval.seed
    metrics = evaluate_episodes(
        policy,
        env,
        episodes,
        config.env.device,
        seed=seed,
        observation_transform=normalizer.normalize if normalizer is not None else None,
        action_transform=_action_transform(config, env),
        **PATHGRAD_EVALUATION,
    )
    result = {
        "env": config.env.name,
        "checkpoint": str(path),
        "global_step": checkpoint["global_step"],
        "num_updates": checkpoint["num_updates"],
        "episodes": episodes,
        **metrics,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{config.env.name}: {episodes} episodes, seed {seed}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in result.items():
        table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
    Console().print(table)
    return 0


def _action_transform(config: RunConfig, env: Any) -> Any:
    """Clamp to the action space where training did (``trainer.clip_actions_to_space``)."""
    if not config.trainer.clip_actions_to_space:
        return None
    return functools.partial(
        clamp_action, bounds=action_space_bounds(env.single_action_space, env.device)
    )


def command_export(args: argparse.Namespace) -> int:
    """``pathgrad export RUN_DIR|CHECKPOINT -o policy.pt2|policy.onnx``: a deployable policy."""
    from pathgrad.export import EXPORT_FORMATS, export_metadata, export_policy

    output = Path(args.output)
    if output.is_dir():
        raise UsageError(f"-o '{output}' is a directory; give a file name.")
    if output.suffix.lower() not in EXPORT_FORMATS:
        raise UsageError(
            f"-o '{output}': give a .pt2 (torch.export) or .onnx file name (TorchScript .pt "
            "files are no longer written: torch.jit is deprecated in PyTorch 2.13)."
        )
    config, checkpoint, path = load_for_evaluation(Path(args.checkpoint), "cpu")
    env = build_env(config, 1, config.trainer.seed)
    policy, normalizer = policy_from_checkpoint(config, checkpoint, env, path)
    observation, _ = env.reset(seed=0)
    bounds = action_space_bounds(env.single_action_space, "cpu")
    metadata = export_metadata(config, checkpoint, path, env)
    try:
        with signals_raise():  # an interrupted write removes its temporary file
            written = export_policy(policy, normalizer, observation, output, bounds, metadata)
    except OSError as error:
        raise UsageError(f"cannot write '{output}': {error.strerror or error}") from error
    except ImportError as error:
        raise UsageError(
            f"ONNX export needs the onnx and onnxscript packages: pip install "
            f"'pathgrad[export]' ({error})"
        ) from error
    dim = observation.shape[-1]
    how = (
        "torch.export.load(path).module()(obs)"
        if output.suffix.lower() == ".pt2"
        else "onnxruntime.InferenceSession(path).run(None, {'observation': obs})"
    )
    print(f"wrote {written}: observations [B, {dim}] -> actions; {how}")
    return 0


def command_plot(args: argparse.Namespace) -> int:
    """``pathgrad plot RUN_DIR... [-o curves.png] [--metric NAME]... [--x steps|time]``
    (without -o, never overwrites a file)."""
    from pathgrad.runs.plotting import learning_curve_figure, save_png

    output = Path(args.output) if args.output else _free_name(Path("curves.png"))
    if output.is_dir():
        raise UsageError(f"-o '{output}' is a directory; give a file name.")
    # `plot SWEEP/*` also matches the sweep's own record, which is no run
    run_dirs = [path for path in args.run_dirs if Path(path).name != SWEEP_FILE]
    if not run_dirs:
        raise UsageError(f"no run directory among {' '.join(args.run_dirs)}.")
    try:
        figure = learning_curve_figure(run_dirs, args.metric or (), args.aggregate, args.x)
    except (OSError, ValueError) as error:
        raise UsageError(str(error)) from error
    try:
        with signals_raise():  # an interrupted write removes its temporary file
            save_png(figure, output)
    except OSError as error:
        raise UsageError(f"cannot write '{output}': {error.strerror or error}") from error
    print(f"wrote {output}")
    return 0


def _free_name(path: Path) -> Path:
    """``path``, or ``stem-1.suffix``, ``stem-2.suffix``... the first that does not exist."""
    candidate, number = path, 1
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}-{number}{path.suffix}")
        number += 1
    return candidate


def command_envs(args: argparse.Namespace) -> int:
    """``pathgrad envs [--module M]``: registered envs with their sizes and episode length.

    Envs of installed packages (entry points ``pathgrad.envs``) are listed too.
    """
    from rich.console import Console
    from rich.table import Table

    try:
        import_env_modules(args.module)
    except Exception as error:  # noqa: BLE001 - any failing import is a usage error
        raise UsageError(f"--module: cannot import {args.module}: {error}") from error

    table = Table(title="registered environments")
    for column in ("name", "observation", "action", "episode steps"):
        table.add_column(column, justify="left" if column == "name" else "right")
    for name in get_registered_learning_env_names():
        table.add_row(name, *_env_sizes(name))
    Console().print(table)
    return 0


def command_configs(args: argparse.Namespace) -> int:
    """``pathgrad configs``: the shipped configs, with their env and algorithm."""
    from rich.console import Console
    from rich.table import Table

    from pathgrad.runs.builtin_configs import CONFIG_FOLDER, describe_builtin_configs

    table = Table(title="built-in configs: pathgrad train NAME", caption=str(CONFIG_FOLDER))
    table.add_column("name", no_wrap=True)  # whole, to copy into a command
    for column in ("env", "algorithm"):
        table.add_column(column, overflow="fold")
    for row in describe_builtin_configs():
        table.add_row(*row)
    Console().print(table)
    return 0


def _env_sizes(name: str) -> tuple[str, str, str]:
    """Observation size, action size and episode length, from the class where it says them."""
    try:
        factory = get_learning_env_factory(name)
    except ImportError as error:
        return "-", "-", f"not installed ({str(error).split(': ', 1)[-1][:60]})"
    sizes = [getattr(factory, key, None) for key in _SIZE_ATTRIBUTES]
    if all(isinstance(size, int) for size in sizes):
        return tuple(str(size) for size in sizes)  # type: ignore[return-value]
    with warnings.catch_warnings():  # a listing: construction notes are for who builds it
        warnings.simplefilter("ignore")
        env = build_learning_env(name, num_envs=1, device="cpu")
    return (
        str(int(env.single_observation_space.shape[-1])),
        str(int(env.single_action_space.shape[-1])),
        str(getattr(env, "max_episode_steps", "-")),
    )


_SIZE_ATTRIBUTES = ("observation_dim", "action_dim", "default_max_episode_steps")
