"""A training run's life: start, resume, train with its writers, end resumable.

A run always leaves a resumable state: SIGINT/SIGTERM undo the update in
flight and end with a final checkpoint; after a kill, :func:`resume_run`
continues from the latest checkpoint, dropping the records written after it,
so the metrics, TensorBoard scalars and checkpoints equal an uninterrupted
run's. The Python API (:func:`pathgrad.train`) and the command line
(``pathgrad train``/``resume``) both come here.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pathgrad.core.atomic_files import remove_stale_temporaries
from pathgrad.core.termination import Terminated
from pathgrad.distributed import DataParallel, join, leave, torchrun_world_size
from pathgrad.distributed.launch_report import announce_run_dir
from pathgrad.runs.config import RunConfig
from pathgrad.runs.config_sources import ConfigError
from pathgrad.runs.errors import RunFailed, UsageError
from pathgrad.runs.outcome import (
    crash_note,
    final_writes,
    print_outcome,
    print_start,
    print_warning,
    write_curve,
)
from pathgrad.runs.provenance import invocation, record_invocation
from pathgrad.runs.resume_point import ResumePoint, check_config_unedited, choose_resume_point
from pathgrad.runs.run import (
    METRICS_FILE,
    MetricsLog,
    RunLock,
    build_run,
    create_given_run_dir,
    create_run_dir,
    write_config,
)
from pathgrad.runs.signals import hold_stop_signals, signals_ignored, signals_raise
from pathgrad.runs.start_checks import check_budget_fits_schedule, run_budget
from pathgrad.runs.writers import open_tensorboard, open_wandb
from pathgrad.trainer.progress import ProgressReporter

__all__ = ["resume_run", "run_training", "start_run"]

# A file the run cannot write, whatever its cause: the run ends in one line naming it.
_WRITE_FAULTS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EIO, errno.EACCES}


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
                    status = run_training(
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


def resume_run(
    run_dir: Path,
    config: RunConfig,
    saved: RunConfig,
    provenance: dict,
    *,
    rewrite_config: bool,
    checkpoint: str | Path | None = None,
    rebuild_index: bool = False,
    restart_scheduler: bool = False,
    quiet: bool = False,
) -> str:
    """Continue the run in ``run_dir`` from its latest (or a given) checkpoint; returns the status.

    Args:
        run_dir: The run directory.
        config: Its saved config with the resume's overrides (budget, threads, device).
        saved: Its saved config as it is on disk (a new budget is checked against it).
        provenance: The ``provenance.json`` entry of this resume.
        rewrite_config: Write ``config`` to ``config.yaml`` (the overrides changed it).
        checkpoint: A checkpoint file to resume from instead of the index's latest.
        rebuild_index: Rebuild ``checkpoints/index.json`` from the files first.
        restart_scheduler: Restart the learning-rate curve instead of restoring it.
        quiet: No progress bar or summary lines.

    Raises:
        UsageError: If the run cannot be resumed as asked (nothing is changed then).
    """
    with _joined(config) as data_parallel, _main_rank_lock(data_parallel, run_dir):
        point = data_parallel.from_main(
            "the choice of checkpoint",
            lambda: _prepare_resume(run_dir, saved, checkpoint, rebuild_index),
        )
        for note in point.notes:
            print_warning(note)
        objects = build_run(config, run_dir, data_parallel)
        trainer = objects.trainer
        if point.checkpoint is not None:
            try:
                trainer.load_checkpoint(
                    point.checkpoint,
                    resume_scheduler="restart" if restart_scheduler else "restore",
                )
            except (ValueError, FileNotFoundError) as error:
                raise UsageError(str(error)) from error
        _check_new_budget(config, saved, trainer)
        check_budget_fits_schedule(config, trainer, UsageError)
        if data_parallel.is_main:
            if rewrite_config:
                write_config(run_dir, config)
            notes: list[str] = []
            record_invocation(run_dir, provenance, notes)
            for note in notes:
                print_warning(note)
        if not quiet and data_parallel.is_main:
            origin = (
                "the start (no checkpoint was saved before it stopped)"
                if point.checkpoint is None
                else point.checkpoint.name
            )
            print(
                f"resuming {run_dir} from {origin}: update {trainer.num_updates}, "
                f"{trainer.global_step:,} env steps"
            )
        return run_training(config, run_dir, objects, resume=True, quiet=quiet)


def _main_rank_lock(data_parallel: Any, run_dir: Path) -> Any:
    """The run directory's lock, held by rank 0 (the only rank that writes there),
    which names the directory to the ``--nproc`` launcher, if any."""
    if not data_parallel.is_main:
        return contextlib.nullcontext()
    announce_run_dir(run_dir)
    return RunLock(run_dir)


def _prepare_resume(
    run_dir: Path, saved: RunConfig, checkpoint: str | Path | None, rebuild_index: bool
) -> ResumePoint:
    """Choose the checkpoint to resume from, then clean what a crash left (rank 0).

    The choice reads only; files change once it has passed every check, the
    one that ``config.yaml`` was not edited since the checkpoint included.
    """
    point = choose_resume_point(run_dir, checkpoint=checkpoint, rebuild=rebuild_index)
    if point.checkpoint is not None:
        check_config_unedited(run_dir, saved, point.checkpoint)
    for directory in (run_dir, run_dir / "checkpoints"):
        remove_stale_temporaries(directory)
    point.apply(run_dir / "checkpoints")
    return point


def _check_new_budget(config: RunConfig, saved: RunConfig, trainer: Any) -> None:
    """A budget given to ``resume`` may not fall below the work the run has done."""
    for option, value, unit, done, before in (
        ("--total-updates", config.trainer.total_updates, "updates", trainer.num_updates,
         saved.trainer.total_updates),
        ("--total-timesteps", config.trainer.total_timesteps, "env steps", trainer.global_step,
         saved.trainer.total_timesteps),
    ):  # fmt: skip
        if value == before:
            continue  # the saved budget: not a new one
        if value is not None and value < done and (before is None or value < before):
            raise UsageError(
                f"{option} {value} is below the {done:,} {unit} this run has done; "
                f"give at least {done}."
            )


def run_training(
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
                wandb_run = open_wandb(config, run_dir, resume)
                writer = open_tensorboard(config, run_dir, trainer, resume)
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
