"""``pathgrad check-env NAME``: check a registered env as ``pathgrad.testing.check_env`` does.

One line per check (``ok`` or ``FAILED: reason``), exit status 0 when all
pass, 1 otherwise, 2 for a usage error (an unknown env, a module that cannot
be imported, a bad ``key=value`` override of the env's constructor arguments).
"""

from __future__ import annotations

import argparse
import difflib
from typing import Any

from pathgrad.commands import UsageError
from pathgrad.core.crash_report import describe
from pathgrad.env import (
    env_module_hint,
    get_learning_env_factory,
    get_registered_learning_env_names,
    import_env_modules,
)
from pathgrad.runs.config import default_document, validate_config
from pathgrad.runs.config_sources import merge_layers
from pathgrad.testing.gradient_start import STARTS, gradient_failure_hint, gradient_start

__all__ = ["add_check_env_parser", "command_check_env"]

USAGE = (
    "pathgrad check-env NAME [--module M] [--num-envs N] [--dtype D] "
    "[--start reset|settled|smooth] [--steps K] [--action-scale S] [key=value ...]"
)
DESCRIPTION = (
    "Check a registered env: contract, reproducibility, state_dict, detach_state, a finite "
    "random rollout and gradients. Exit status 0 when all pass, 1 otherwise, 2 for a usage error."
)
OVERRIDES_HELP = "env constructor arguments, as env.cfg in a config: max_episode_steps=20"


def add_check_env_parser(commands: Any) -> None:
    """Register ``check-env`` on the ``pathgrad`` subcommands."""
    parser = commands.add_parser(
        "check-env",
        help="check an env: contract, reproducibility, state, detach, rollout, gradients",
        usage=USAGE,
        description=DESCRIPTION,
    )
    parser.add_argument("name", help="registered env name (`pathgrad envs`)")
    _add_options(parser, argparse.SUPPRESS)
    # Options may follow the overrides: the handler parses what comes after NAME.
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help=OVERRIDES_HELP)
    parser.set_defaults(handler=command_check_env)


def _add_options(parser: argparse.ArgumentParser, default: Any) -> None:
    """The options (``default`` ``SUPPRESS``: given ones only, before and after NAME merged)."""
    parser.add_argument(
        "--module", action="append", default=default, help="import a module that registers envs"
    )
    parser.add_argument("--num-envs", type=int, default=default, help="env rows (default 2)")
    parser.add_argument(
        "--dtype", choices=["float32", "float64"], default=default, help="default float32"
    )
    parser.add_argument("--device", default=default, help="torch device (default cpu)")
    parser.add_argument("--seed", type=int, default=default, help="seed of resets and actions")
    parser.add_argument(
        "--no-gradients", action="store_true", default=default, help="skip the gradient check"
    )
    parser.add_argument(
        "--start", choices=list(STARTS), default=default, metavar="reset|settled|smooth",
        help="the gradient check's first state: " + "; ".join(f"{k}: {v}" for k, v in
                                                                STARTS.items()),
    )  # fmt: skip
    parser.add_argument(
        "--steps",
        type=int,
        default=default,
        help="length of the gradient check's chain (default 5)",
    )
    parser.add_argument(
        "--action-scale", type=float, default=default,
        help="standard deviation of the gradient check's random actions (default 0.5)",
    )  # fmt: skip


def _options(args: argparse.Namespace) -> argparse.Namespace:
    """The options given before NAME and after it, and the ``key=value`` overrides."""
    parser = argparse.ArgumentParser(
        prog="pathgrad check-env", usage=USAGE, description=DESCRIPTION
    )
    _add_options(parser, argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help=OVERRIDES_HELP)
    later = parser.parse_intermixed_args(args.overrides)
    given = {**vars(args), **vars(later)}
    given["module"] = [*getattr(args, "module", []), *getattr(later, "module", [])]
    defaults = {"num_envs": 2, "dtype": None, "device": "cpu", "seed": 0, "no_gradients": False,
                "start": "reset", "steps": 5, "action_scale": 0.5}  # fmt: skip
    options = argparse.Namespace(**{**defaults, **given})
    if options.steps < 1:
        raise UsageError(f"--steps {options.steps}: give a chain of at least 1 step.")
    if not options.action_scale > 0:
        raise UsageError(f"--action-scale {options.action_scale}: give a positive number.")
    return options


def command_check_env(args: argparse.Namespace) -> int:
    """``pathgrad check-env NAME [--module M] [options] [key=value ...]``."""
    from pathgrad.runs.run import build_env
    from pathgrad.testing import check_env
    from pathgrad.testing.gradient_growth import describe_gradient_growth, window_gradient_norms

    options = _options(args)
    for module in options.module:
        try:
            import_env_modules(module)
        except Exception as error:  # noqa: BLE001 - any failing import is a usage error
            raise UsageError(f"--module {module}: cannot import it: {describe(error)}") from error
    _require_registered(options.name, options.module)
    for override in options.overrides:
        key = override.partition("=")[0]
        if "=" not in override or not key or key.startswith("-"):
            raise UsageError(
                f"'{override}' is not an env argument: give key=value (an env.cfg entry)."
            )
    env_section: dict[str, Any] = {
        "name": options.name,
        "module": options.module or None,
        "num_envs": options.num_envs,
        "device": options.device,
    }
    if options.dtype is not None:
        env_section["dtype"] = options.dtype
    overrides = [f"env.cfg.{override}" for override in options.overrides]
    config = validate_config(merge_layers(default_document(), {"env": env_section}, overrides))
    env = build_env(config, options.num_envs, options.seed)
    print(
        f"check-env {options.name}: {options.num_envs} envs, {config.env.dtype}, "
        f"{config.env.device}, seed {options.seed}"
    )
    try:
        start = gradient_start(env, options.start, options.seed)
    except ValueError as error:
        raise UsageError(str(error)) from error
    gradient_options = {**start, "action_scale": options.action_scale}
    result = check_env(env, seed=options.seed, num_steps=options.steps,
                       gradients=not options.no_gradients,
                       gradient_options=gradient_options)  # fmt: skip
    print(result)
    if not result["gradients"].passed:
        hint = gradient_failure_hint(
            env, options.start, options.seed, options.steps, options.action_scale
        )
        if hint:
            print(hint)
    if result["gradients"].passed and not result["gradients"].skipped:
        norms = window_gradient_norms(env, seed=options.seed)
        print(describe_gradient_growth(norms))
    failed = sum(not check.passed for check in result)
    total = len(result.checks)
    summary = f"{failed} of {total} checks failed" if failed else f"all {total} checks passed"
    print(f"{options.name}: {summary}")
    return 0 if result.passed else 1


def _require_registered(name: str, modules: list[str]) -> None:
    """One line naming the registered envs when ``name`` is not one of them."""
    try:
        get_learning_env_factory(name)
    except ImportError as error:
        raise UsageError(str(error)) from error
    except ValueError as error:
        names = get_registered_learning_env_names()
        close = difflib.get_close_matches(name, names, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        raise UsageError(
            f"unknown env '{name}'{hint}{env_module_hint(modules)}; registered: {', '.join(names)}."
        ) from error
