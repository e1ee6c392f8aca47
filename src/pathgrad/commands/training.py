"""``pathgrad train`` and ``pathgrad resume``: a run directory that survives any fault.

A run always leaves a resumable state: SIGINT/SIGTERM undo the update in
flight and end with a final checkpoint; after a kill, ``resume`` continues
from the latest checkpoint, dropping the records written after it, so the
metrics, TensorBoard scalars and checkpoints equal an uninterrupted run's.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

from pathgrad.atomic_files import remove_stale_temporaries
from pathgrad.budgets import check_budget
from pathgrad.checkpoint import INDEX_FILENAME, latest_checkpoint, read_index, rebuild_index
from pathgrad.commands import (
    EXIT_SIGINT,
    EXIT_SIGTERM,
    Terminated,
    UsageError,
    signals_ignored,
    signals_raise,
)
from pathgrad.config import RunConfig, dump_config, load_config
from pathgrad.config_sources import ConfigError
from pathgrad.distributed import join, leave, torchrun_world_size
from pathgrad.distributed.launch import launch_ranks
from pathgrad.progress import ProgressReporter
from pathgrad.provenance import invocation, record_invocation
from pathgrad.run import (
    CONFIG_FILE,
    CURVE_FILE,
    METRICS_FILE,
    MetricsLog,
    RunLock,
    build_run,
    create_run_dir,
    write_config,
    write_summary,
)
from pathgrad.scalar_logging import eval_scalars, train_scalars

__all__ = ["EXIT_CODES", "command_resume", "command_train", "start_run"]

EXIT_CODES = {
    "completed": 0,
    "stopped early": 0,
    "interrupted": EXIT_SIGINT,
    "terminated": EXIT_SIGTERM,
    "failed": 1,
}


def command_train(args: argparse.Namespace) -> int:
    """``pathgrad train [CONFIG.yaml] [key=value ...]`` (one rank of several under torchrun)."""
    if _launch_requested(args):
        return launch_ranks(args.nproc, args.argv)
    config_path = args.config
    overrides = list(args.overrides) + _thread_overrides(args)
    if config_path is not None and "=" in config_path and not Path(config_path).exists():
        overrides.insert(0, config_path)  # the first override, not a file
        config_path = None
    if args.seeds or args.grid:
        from pathgrad.commands.sweep import command_sweep

        return command_sweep(args, config_path, overrides)
    config = load_config(config_path, overrides)
    if args.print_config:
        print(dump_config(config), end="")
        return 0
    entry = _invocation("train", args, overrides)
    _, _, status = start_run(config, entry, [], quiet=args.quiet)
    return EXIT_CODES[status]


def start_run(
    config: RunConfig, provenance: dict | list[str], callbacks: list, *, quiet: bool
) -> tuple[Path, Any, str]:
    """Create a run directory and train it; returns it, the trainer and the final status.

    ``provenance`` is the ``provenance.json`` entry, or the overrides to make
    one from (the Python API). ``callbacks`` are added to the trainer's.
    """
    if isinstance(provenance, list):
        provenance = invocation("train (python)", [], provenance)
        provenance["world_size"] = torchrun_world_size()
    data_parallel = join(config.env.device, config.trainer.distributed_timeout_seconds)
    try:
        # may fail: nothing is written yet
        objects = build_run(config, Path("<run directory>"), data_parallel)
        trainer = objects.trainer
        _check_budget_fits_schedule(config, trainer, ConfigError)
        trainer.interrupts.close()  # a signal now waits until it can end with a checkpoint
        with signals_raise(trainer.request_interrupt):
            run_dir = Path(
                data_parallel.from_main(
                    "the run directory's creation", lambda: str(create_run_dir(config))
                )
            )
            trainer.cfg.checkpoint_dir = str(run_dir / "checkpoints")
            with _main_rank_lock(data_parallel, run_dir):
                if data_parallel.is_main:
                    write_config(run_dir, config)
                    record_invocation(run_dir, provenance)
                status = _run_training(
                    config, run_dir, objects, resume=False, quiet=quiet, callbacks=callbacks
                )
                return run_dir, trainer, status
    finally:
        leave(data_parallel)


def command_resume(args: argparse.Namespace) -> int:
    """``pathgrad resume RUN_DIR [--total-updates N | --total-timesteps N] [--checkpoint FILE]``."""
    if _launch_requested(args):
        return launch_ranks(args.nproc, args.argv)
    run_dir = Path(args.run_dir)
    if not (run_dir / CONFIG_FILE).is_file():
        raise UsageError(f"'{run_dir}' is not a run directory (no {CONFIG_FILE}).")
    saved = load_config(run_dir / CONFIG_FILE)
    overrides = _budget_overrides(args) + _thread_overrides(args)
    config = load_config(run_dir / CONFIG_FILE, overrides) if overrides else saved
    data_parallel = join(config.env.device, config.trainer.distributed_timeout_seconds)
    try:
        with _main_rank_lock(data_parallel, run_dir):
            checkpoint = data_parallel.from_main(
                "the choice of checkpoint", lambda: _prepare_resume(run_dir, args)
            )
            objects = build_run(config, run_dir, data_parallel)
            trainer = objects.trainer
            if checkpoint is not None:
                resume_scheduler = "restart" if args.restart_scheduler else "restore"
                try:
                    trainer.load_checkpoint(checkpoint, resume_scheduler=resume_scheduler)
                except (ValueError, FileNotFoundError) as error:
                    raise UsageError(str(error)) from error
            _check_new_budget(args, saved, trainer)
            _check_budget_fits_schedule(config, trainer, UsageError)
            if data_parallel.is_main:
                if overrides:
                    write_config(run_dir, config)
                record_invocation(run_dir, _invocation("resume", args, overrides))
            if not args.quiet and data_parallel.is_main:
                origin = "the start (no checkpoint yet)" if checkpoint is None else checkpoint.name
                print(
                    f"resuming {run_dir} from {origin}: update {trainer.num_updates}, "
                    f"{trainer.global_step:,} env steps"
                )
            status = _run_training(config, run_dir, objects, resume=True, quiet=args.quiet)
            return EXIT_CODES[status]
    finally:
        leave(data_parallel)


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


def _main_rank_lock(data_parallel: Any, run_dir: Path) -> Any:
    """The run directory's lock, held by rank 0 (the only rank that writes there)."""
    return RunLock(run_dir) if data_parallel.is_main else contextlib.nullcontext()


def _prepare_resume(run_dir: Path, args: argparse.Namespace) -> Path | None:
    """Clean what a crash left, then choose the checkpoint to resume from (rank 0)."""
    for directory in (run_dir, run_dir / "checkpoints"):
        remove_stale_temporaries(directory)
    return _checkpoint_to_resume(run_dir, args)


def _budget_overrides(args: argparse.Namespace) -> list[str]:
    if args.total_updates is not None:
        return [f"trainer.total_updates={args.total_updates}", "trainer.total_timesteps=null"]
    if args.total_timesteps is not None:
        return [f"trainer.total_timesteps={args.total_timesteps}", "trainer.total_updates=null"]
    return []


def _thread_overrides(args: argparse.Namespace) -> list[str]:
    return [] if args.num_threads is None else [f"trainer.num_threads={args.num_threads}"]


def _checkpoint_to_resume(run_dir: Path, args: argparse.Namespace) -> Path | None:
    """The checkpoint ``resume`` starts from; ``None`` for a run stopped before its first."""
    if args.checkpoint is not None:
        return Path(args.checkpoint)
    directory = run_dir / "checkpoints"
    hint = (
        f"rebuild it from the checkpoint files with `pathgrad resume {run_dir} --rebuild-index`, "
        "or choose a file with --checkpoint FILE."
    )
    try:
        if args.rebuild_index or not (directory / INDEX_FILENAME).is_file():
            # No index but checkpoint files: a kill between the first save and its
            # index entry (or a deleted index). The files are whole: list them.
            if args.rebuild_index or list(directory.glob("*.pt")):
                rebuild_index(directory)
        return latest_checkpoint(directory)
    except ValueError as error:
        raise UsageError(f"{error} {hint}") from error
    except FileNotFoundError as error:
        if read_index(directory):
            raise UsageError(f"{error} {hint}") from error
        return None


def _check_new_budget(args: argparse.Namespace, saved: RunConfig, trainer: Any) -> None:
    """A budget given to ``resume`` may not fall below the work the run has done."""
    for option, value, unit, done, before in (
        ("--total-updates", args.total_updates, "updates", trainer.num_updates,
         saved.trainer.total_updates),
        ("--total-timesteps", args.total_timesteps, "env steps", trainer.global_step,
         saved.trainer.total_timesteps),
    ):  # fmt: skip
        if value is not None and value < done and (before is None or value < before):
            raise UsageError(
                f"{option} {value} is below the {done:,} {unit} this run has done; "
                f"give at least {done}."
            )


def _check_budget_fits_schedule(config: RunConfig, trainer: Any, error: type[Exception]) -> None:
    """The schedule checks of ``train``'s start, made before the run's files are written."""
    try:
        check_budget(trainer, **{"total_timesteps": None, "total_updates": None, **_budget(config)})
    except ValueError as problem:
        raise error(f"algorithm.cfg.lr_scheduler: {problem}") from problem


def _budget(config: RunConfig) -> dict[str, int]:
    if config.trainer.total_updates is not None:
        return {"total_updates": config.trainer.total_updates}
    return {"total_timesteps": config.trainer.total_timesteps}


def _init_wandb(config: RunConfig, run_dir: Path, resume: bool) -> Any:
    if not config.logging.wandb:
        return None
    import wandb  # load_config has checked that it is installed

    return wandb.init(
        project=config.logging.wandb_project,
        name=run_dir.name,
        id=run_dir.name.replace("/", "-"),
        dir=str(run_dir),
        config=config.model_dump(mode="python"),
        resume="allow" if resume else None,
    )


def _open_writer(config: RunConfig, run_dir: Path, trainer: Any, resume: bool) -> Any:
    """The TensorBoard writer; on resume, events after the checkpoint are purged.

    The checkpoint's own step is purged too and its scalars written again from
    the checkpoint, so every step appears once, as in an uninterrupted run.
    """
    if not config.logging.tensorboard:
        return None
    from torch.utils.tensorboard import SummaryWriter

    if not resume:
        return SummaryWriter(str(run_dir / "tb"))
    step = trainer.global_step
    replay = bool(trainer.last_train_metrics) or step == 0
    writer = SummaryWriter(str(run_dir / "tb"), purge_step=step if replay else step + 1)
    if trainer.last_train_metrics:
        for key, value in train_scalars(trainer.last_train_metrics).items():
            writer.add_scalar(key, value, step)
    if trainer.last_eval_metrics.get("global_step") == float(step):
        for key, value in eval_scalars(trainer.last_eval_metrics).items():
            writer.add_scalar(key, value, step)
    return writer


def _run_training(
    config: RunConfig,
    run_dir: Path,
    objects: Any,
    *,
    resume: bool,
    quiet: bool,
    callbacks: list | None = None,
) -> str:
    """Train with logging, progress and signal handling; returns the final status.

    The status is ``completed``, ``stopped early`` (a callback's
    ``stop_training``), ``interrupted``, ``terminated`` or ``failed`` (the
    exception then propagates). The run is always left resumable.

    With several ranks, rank 0 alone logs, prints and writes the run's files;
    all ranks stop together on a signal to any of them and write the final
    checkpoint together. A failure writes no final checkpoint then (the
    others may be gone): the last one stays the run's resumable state.
    """
    trainer = objects.trainer
    main = trainer.data_parallel.is_main
    quiet = quiet or not main
    writer = wandb_run = progress = None
    final: str | None = None
    status = "failed"  # until training returns or a signal stops it
    try:
        with signals_raise(trainer.request_interrupt):
            trainer.interrupts.close()  # set-up is not split: a signal waits for its end
            if main:
                wandb_run = _init_wandb(config, run_dir, resume)
                writer = _open_writer(config, run_dir, trainer, resume)
                trainer.writer = writer
                metrics = MetricsLog(run_dir / METRICS_FILE)
                if resume:
                    last_eval = trainer.last_eval_metrics.get("global_step")
                    metrics.resume_at(trainer.num_updates, last_eval)
            budget = _budget(config)
            unit = "updates" if "total_updates" in budget else "steps"
            progress = ProgressReporter(
                next(iter(budget.values())),
                unit,
                start=trainer.num_updates if unit == "updates" else trainer.global_step,
                print_every=config.logging.print_every_updates,
                quiet=quiet,
            )
            if not quiet:
                _print_start(trainer)
            trainer.callbacks[:] = [metrics, progress, *(callbacks or [])] if main else []
            trainer.interrupts.open()  # raises a signal that came during start-up
            trainer.train(**budget)
        status = "stopped early" if trainer.stopped_early else "completed"
    except KeyboardInterrupt:
        status = "interrupted"
    except Terminated:
        status = "terminated"
    finally:
        with signals_ignored():
            if progress is not None:
                progress.close()
            if status != "failed" or not trainer.data_parallel.active:
                final = trainer.save_checkpoint(kind="final")
            curve = None
            if main:
                write_summary(run_dir, trainer, status)
                curve = _write_curve(run_dir)
            if writer is not None:
                writer.close()
            if wandb_run is not None:
                wandb_run.finish()
    if not quiet:
        _print_outcome(trainer, status, run_dir, final, curve, writer is not None)
    return status


def _print_start(trainer: Any) -> None:
    print(f"torch threads: {trainer.num_threads} ({trainer.num_threads_reason})")
    data_parallel = trainer.data_parallel
    if data_parallel.active:
        print(
            f"data-parallel: {data_parallel.world_size} ranks ({data_parallel.backend}), "
            f"{trainer.env.num_envs} envs each, {trainer.global_num_envs} in all"
        )
    if trainer.compile_scope != "off":
        print(f"torch.compile: {trainer.compile_scope} ({trainer.compile_scope_reason})")


def _print_outcome(
    trainer: Any,
    status: str,
    run_dir: Path,
    final: str | None,
    curve: Path | None,
    tensorboard: bool,
) -> None:
    last = trainer.last_eval_metrics
    if last:
        step = int(last["global_step"])
        label = "final evaluation" if step == trainer.global_step else "last evaluation"
        print(
            f"{label} at step {step:,}: "
            f"return {last.get('eval/avg_reward', float('nan')):.4g}, "
            f"success rate {last.get('eval/success_rate', float('nan')):.2f}"
        )
    print(f"{status}: {trainer.num_updates} updates, {trainer.global_step:,} env steps")
    compiled = getattr(trainer, "compiled_update", None)
    if compiled is not None and compiled.first_update_seconds is not None:
        print(f"first compiled update: {compiled.first_update_seconds:.1f} s (compile included)")
    print(f"run:        {run_dir}")
    print(f"checkpoint: {final or trainer.latest_checkpoint_path}")
    if curve is not None:
        print(f"curve:      {curve}")
    if tensorboard:
        print(f"tensorboard --logdir {run_dir / 'tb'}")


def _write_curve(run_dir: Path) -> Path | None:
    from pathgrad.plotting import plot_runs

    try:
        return plot_runs([run_dir], run_dir / CURVE_FILE)
    except (FileNotFoundError, ValueError):
        return None
