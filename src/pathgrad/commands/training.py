"""``pathgrad train`` and ``pathgrad resume``: a run directory that survives any fault.

A run always leaves a resumable state: SIGINT/SIGTERM undo the update in
flight and end with a final checkpoint; after a kill, ``resume`` continues
from the latest checkpoint, dropping the records written after it, so the
metrics, TensorBoard scalars and checkpoints equal an uninterrupted run's.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pathgrad.commands import (
    EXIT_DIVERGED,
    EXIT_SIGINT,
    EXIT_SIGTERM,
    RunFailed,
    Terminated,
    UsageError,
    hold_stop_signals,
    signals_ignored,
    signals_raise,
)
from pathgrad.commands.option_overrides import (
    budget_overrides,
    device_overrides,
    thread_overrides,
)
from pathgrad.commands.outcome import (
    crash_note,
    final_writes,
    print_outcome,
    print_start,
    print_warning,
    write_curve,
)
from pathgrad.commands.resume_point import (
    ResumePoint,
    check_config_unedited,
    choose_resume_point,
)
from pathgrad.commands.start_checks import check_budget_fits_schedule, run_budget
from pathgrad.core.atomic_files import remove_stale_temporaries
from pathgrad.distributed import DataParallel, join, leave, torchrun_world_size
from pathgrad.distributed.launch import launch_ranks
from pathgrad.distributed.launch_report import announce_run_dir
from pathgrad.runs.builtin_configs import resolve_config
from pathgrad.runs.config import RunConfig, dump_config, load_config, reference_translation
from pathgrad.runs.config_sources import ConfigError, read_yaml
from pathgrad.runs.provenance import invocation, record_invocation
from pathgrad.runs.run import (
    CONFIG_FILE,
    METRICS_FILE,
    SWEEP_FILE,
    MetricsLog,
    RunLock,
    build_run,
    create_given_run_dir,
    create_run_dir,
    write_config,
)
from pathgrad.trainer.progress import ProgressReporter
from pathgrad.trainer.scalar_logging import eval_scalars, train_scalars

__all__ = ["EXIT_CODES", "command_resume", "command_train", "start_run"]

# A file the run cannot write, whatever its cause: the run ends in one line naming it.
_WRITE_FAULTS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EIO, errno.EACCES}

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


def start_run(
    config: RunConfig,
    provenance: dict | list[str],
    callbacks: list,
    *,
    quiet: bool,
    run_dir: Path | None = None,
) -> tuple[Path, Any, str]:
    """Create a run directory and train it; returns it, the trainer and the final status.

    ``provenance`` is the ``provenance.json`` entry, or the overrides to make
    one from (the Python API). ``callbacks`` are added to the trainer's.
    ``run_dir``: the directory to create (``train --run-dir``) instead of a
    new time-stamped one. A run that fails before its first update leaves no
    directory behind.
    """
    if isinstance(provenance, list):
        provenance = invocation("train (python)", [], provenance)
        provenance["world_size"] = torchrun_world_size()
    with _joined(config) as data_parallel:
        # may fail: nothing is written yet
        objects = build_run(config, Path("<run directory>"), data_parallel)
        trainer = objects.trainer
        check_budget_fits_schedule(config, trainer, ConfigError)
        trainer.interrupts.close()  # a signal now waits until it can end with a checkpoint
        with signals_raise(trainer.request_interrupt):
            created = Path(
                data_parallel.from_main(
                    "the run directory's creation",
                    lambda: str(
                        create_run_dir(config) if run_dir is None else create_given_run_dir(run_dir)
                    ),
                )
            )
            trainer.cfg.checkpoint_dir = str(created / "checkpoints")
            try:
                with _main_rank_lock(data_parallel, created):
                    if data_parallel.is_main:
                        write_config(created, config)
                        record_invocation(created, provenance)
                    status = _run_training(
                        config, created, objects, resume=False, quiet=quiet, callbacks=callbacks
                    )
            except BaseException:
                if data_parallel.is_main and _never_trained(trainer):
                    shutil.rmtree(created, ignore_errors=True)
                raise
            return created, trainer, status


def _never_trained(trainer: Any) -> bool:
    """Whether a run ended before its first update and wrote no checkpoint."""
    return trainer.num_updates == 0 and trainer.latest_checkpoint_path is None


@contextlib.contextmanager
def _joined(config: RunConfig) -> Iterator[DataParallel]:
    """This process's place in the run, left at the end.

    A rank that fails leaves at once, without the shutdown barrier: the
    others, waiting in their next collective, lose contact within seconds
    instead of waiting for the timeout. A rank leaving with an error holds
    off stop signals until it has printed it (the agent stops the others).
    """
    data_parallel = join(config.env.device, config.trainer.distributed_timeout_seconds)
    try:
        yield data_parallel
    except Exception:
        data_parallel.broken = True
        if data_parallel.active:
            hold_stop_signals()
        raise
    except BaseException:
        data_parallel.broken = True
        raise
    finally:
        leave(data_parallel)


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
    with _joined(config) as data_parallel, _main_rank_lock(data_parallel, run_dir):
        point = data_parallel.from_main(
            "the choice of checkpoint", lambda: _prepare_resume(run_dir, args, saved)
        )
        for note in point.notes:
            print_warning(note)
        checkpoint = point.checkpoint
        objects = build_run(config, run_dir, data_parallel)
        trainer = objects.trainer
        if checkpoint is not None:
            resume_scheduler = "restart" if args.restart_scheduler else "restore"
            try:
                trainer.load_checkpoint(checkpoint, resume_scheduler=resume_scheduler)
            except (ValueError, FileNotFoundError) as error:
                raise UsageError(str(error)) from error
        _check_new_budget(args, saved, trainer)
        check_budget_fits_schedule(config, trainer, UsageError)
        if data_parallel.is_main:
            if overrides:
                write_config(run_dir, config)
            notes: list[str] = []
            record_invocation(run_dir, _invocation("resume", args, overrides), notes)
            for note in notes:
                print_warning(note)
        if not args.quiet and data_parallel.is_main:
            origin = (
                "the start (no checkpoint was saved before it stopped)"
                if checkpoint is None
                else checkpoint.name
            )
            print(
                f"resuming {run_dir} from {origin}: update {trainer.num_updates}, "
                f"{trainer.global_step:,} env steps"
            )
        status = _run_training(config, run_dir, objects, resume=True, quiet=args.quiet)
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


def _main_rank_lock(data_parallel: Any, run_dir: Path) -> Any:
    """The run directory's lock, held by rank 0 (the only rank that writes there),
    which names the directory to the ``--nproc`` launcher, if any."""
    if not data_parallel.is_main:
        return contextlib.nullcontext()
    announce_run_dir(run_dir)
    return RunLock(run_dir)


def _prepare_resume(run_dir: Path, args: argparse.Namespace, saved: RunConfig) -> ResumePoint:
    """Choose the checkpoint to resume from, then clean what a crash left (rank 0).

    The choice reads only; files change once it has passed every check, the
    one that ``config.yaml`` was not edited since the checkpoint included.
    """
    point = choose_resume_point(run_dir, checkpoint=args.checkpoint, rebuild=args.rebuild_index)
    if point.checkpoint is not None:
        check_config_unedited(run_dir, saved, point.checkpoint)
    for directory in (run_dir, run_dir / "checkpoints"):
        remove_stale_temporaries(directory)
    point.apply(run_dir / "checkpoints")
    return point


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
    exception then propagates; a file that cannot be written, a full disk
    say, becomes a :class:`RunFailed` naming it). The run is always left
    resumable: a failure before the first update of a resume changes no file.

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
    started = False  # training began: the run's files describe this attempt
    write_failure: OSError | None = None
    crash: Exception | None = None
    try:
        with signals_raise(trainer.request_interrupt):
            trainer.interrupts.close()  # set-up is not split: a signal waits for its end
            if main:
                trainer.notify = print_warning
                wandb_run = _init_wandb(config, run_dir, resume)
                writer = _open_writer(config, run_dir, trainer, resume)
                trainer.writer = writer
                metrics = MetricsLog(run_dir / METRICS_FILE)
                if resume:
                    last = (trainer.last_train_metrics, trainer.last_eval_metrics)
                    for warning in metrics.resume_at(trainer.num_updates, *last):
                        print_warning(warning)
            budget = run_budget(config)
            unit = "updates" if "total_updates" in budget else "steps"
            progress = ProgressReporter(
                next(iter(budget.values())),
                unit,
                start=trainer.num_updates if unit == "updates" else trainer.global_step,
                print_every=config.logging.print_every_updates,
                quiet=quiet,
            )
            if not quiet:
                print_start(trainer)
            trainer.callbacks[:] = [metrics, progress, *(callbacks or [])] if main else []
            started = True
            trainer.interrupts.open()  # raises a signal that came during start-up
            status = trainer.train(**budget)["status"]
        if status == "diverged" and main:
            print(f"pathgrad: diverged: {trainer.diverged}", file=sys.stderr)
    except KeyboardInterrupt:
        status = "interrupted"
    except Terminated:
        status = "terminated"
    except OSError as failure:  # a file it cannot write: reported once the run is left safe
        if failure.errno not in _WRITE_FAULTS:
            crash = failure
            raise
        write_failure = failure
    except Exception as failure:  # a bug (the user's env, a callback, ours): told where the run is
        crash = failure
        raise
    finally:
        with signals_ignored():
            if progress is not None:
                progress.close()
            keeps_files = started or status != "failed"
            final, error = final_writes(
                trainer, run_dir, status, write_failure, main=main, write=keeps_files,
                crash=crash,
            )  # fmt: skip
            curve = write_curve(run_dir) if main and keeps_files else None
            if writer is not None:
                with contextlib.suppress(OSError):  # a full disk: the run's line says so
                    writer.close()
            if wandb_run is not None:
                wandb_run.finish()
            if crash is not None and main and keeps_files:
                removed = not resume and _never_trained(trainer)  # start_run removes it
                crash.add_note(crash_note(trainer, run_dir, final, removed=removed))
    if not quiet:
        print_outcome(trainer, status, run_dir, final, curve, writer is not None)
    if write_failure is not None:
        raise RunFailed(error or write_failure(write_failure, trainer, run_dir)) from write_failure
    return status
