"""``pathgrad train`` and ``pathgrad resume``: options read into a run (pathgrad.runs.lifecycle)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from pathgrad.commands import EXIT_DIVERGED, EXIT_SIGINT, EXIT_SIGTERM, UsageError
from pathgrad.commands.option_overrides import (
    budget_overrides,
    device_overrides,
    thread_overrides,
)
from pathgrad.distributed import torchrun_world_size
from pathgrad.distributed.launch import launch_ranks
from pathgrad.runs.builtin_configs import resolve_config
from pathgrad.runs.config import dump_config, load_config, reference_translation
from pathgrad.runs.config_sources import ConfigError, read_yaml
from pathgrad.runs.lifecycle import resume_run, start_run
from pathgrad.runs.provenance import invocation
from pathgrad.runs.run import CONFIG_FILE, SWEEP_FILE, RunLock

__all__ = ["EXIT_CODES", "command_resume", "command_train", "start_run"]

EXIT_CODES = {
    "completed": 0,
    "stopped early": 0,
    "interrupted": EXIT_SIGINT,
    "terminated": EXIT_SIGTERM,
    "failed": 1,
    "diverged": EXIT_DIVERGED,
}


def command_train(args: argparse.Namespace) -> int:
    """``pathgrad train [CONFIG.yaml] [key=value ...]`` (one rank of several under torchrun)."""
    config_path = args.config
    overrides = list(args.overrides) + thread_overrides(args)
    if config_path is not None and "=" in config_path and not Path(config_path).exists():
        overrides.insert(0, config_path)  # the first override, not a file
        config_path = None
    if config_path is not None:
        config_path = _config_file(config_path)
    sweep = bool(args.seeds or args.grid)
    if sweep and getattr(args, "nproc", None) not in (None, 1):
        raise UsageError("--nproc cannot be combined with --seeds or --grid: sweep runs are "
                         "single processes (use --jobs to run several at once).")  # fmt: skip
    if sweep and getattr(args, "run_dir", None) is not None:
        raise UsageError("--run-dir names one run; a sweep (--seeds/--grid) takes --sweep-dir.")
    if sweep:
        from pathgrad.commands.sweep import command_sweep

        return command_sweep(args, config_path, overrides)
    if config_path is not None:
        _print_reference_mapping(config_path, args)
    config = load_config(config_path, overrides)  # bad config: one line, before any rank starts
    if args.print_config:
        print(dump_config(config), end="")
        return 0
    if _launch_requested(args):
        return launch_ranks(args.nproc, args.argv)
    entry = _invocation("train", args, overrides)
    run_dir = getattr(args, "run_dir", None)
    _, _, status = start_run(
        config, entry, [], quiet=args.quiet, run_dir=None if run_dir is None else Path(run_dir)
    )
    return EXIT_CODES[status]


def _print_reference_mapping(config_path: str, args: argparse.Namespace) -> None:
    """For a config in the reference's format: what each of its keys became (rank 0 only).

    Raises:
        ConfigError: Listing the reference keys without a pathgrad counterpart.
    """
    translation = reference_translation(read_yaml(Path(config_path)))
    if translation is None or args.quiet or os.environ.get("RANK", "0") != "0":
        return
    stream = sys.stderr if args.print_config else sys.stdout  # --print-config: YAML alone
    print(f"{config_path}: the reference's format, mapped to pathgrad's config:", file=stream)
    for line in translation.lines:
        print(f"  {line}", file=stream)


def _config_file(argument: str) -> str:
    """The config file ``train`` reads: the file given, or a built-in config of that name.

    Raises:
        ConfigError: If neither exists.
    """
    resolved = resolve_config(argument)
    if resolved is None and not Path(argument).exists():
        raise ConfigError(
            f"cannot read config file '{argument}': no such file, and no built-in config of "
            "that name (`pathgrad configs` lists them)."
        )
    return argument if resolved is None else str(resolved)


def command_resume(args: argparse.Namespace) -> int:
    """``pathgrad resume RUN_DIR [--total-updates N | --total-timesteps N] [--checkpoint FILE]``.

    ``--device X`` continues on another torch device (``env.device=X``, validated
    and written to ``config.yaml`` like the budget); the envs' generators,
    whose state differs in size between device types, are seeded from the saved one.
    """
    run_dir = Path(args.run_dir)
    if (run_dir / SWEEP_FILE).is_file() and not (run_dir / CONFIG_FILE).is_file():
        from pathgrad.commands.sweep import command_resume_sweep

        if getattr(args, "device", None) is not None:
            raise UsageError(
                "--device cannot be used with a sweep: move its runs one by one "
                "(`pathgrad resume RUN --device DEVICE`)."
            )

        return command_resume_sweep(args, run_dir)
    if not (run_dir / CONFIG_FILE).is_file():
        what = (
            "does not exist"
            if not run_dir.exists()
            else "is a file, not a run directory"
            if not run_dir.is_dir()
            else f"is not a run directory (no {CONFIG_FILE})"
        )
        raise UsageError(f"'{run_dir}' {what}.")
    saved = load_config(run_dir / CONFIG_FILE)
    overrides = budget_overrides(args) + thread_overrides(args) + device_overrides(args)
    config = load_config(run_dir / CONFIG_FILE, overrides) if overrides else saved
    if _launch_requested(args):
        with RunLock(run_dir):  # in use: one line before any rank starts
            pass
        return launch_ranks(args.nproc, args.argv)
    status = resume_run(
        run_dir,
        config,
        saved,
        _invocation("resume", args, overrides),
        rewrite_config=bool(overrides),
        checkpoint=args.checkpoint,
        rebuild_index=args.rebuild_index,
        restart_scheduler=args.restart_scheduler,
        quiet=args.quiet,
    )
    return EXIT_CODES[status]


def _invocation(command: str, args: argparse.Namespace, overrides: list[str]) -> dict:
    entry = invocation(command, getattr(args, "argv", []), overrides)
    entry["world_size"] = torchrun_world_size()
    return entry


def _launch_requested(args: argparse.Namespace) -> bool:
    """``--nproc N`` (N > 1) outside torchrun: start N ranks instead of training here."""
    nproc = getattr(args, "nproc", None)
    if nproc is None:
        return False
    if nproc < 1:
        raise UsageError(f"--nproc must be at least 1, got {nproc}.")
    return nproc > 1 and torchrun_world_size() == 1


