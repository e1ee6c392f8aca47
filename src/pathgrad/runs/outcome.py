"""How a run ends: its final checkpoint and summary, and the lines it prints."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pathgrad.core.crash_report import describe
from pathgrad.runs.run import CURVE_FILE, write_summary

__all__ = [
    "final_writes",
    "print_outcome",
    "print_start",
    "print_warning",
    "write_curve",
    "write_failure",
]


def print_warning(message: str) -> None:
    print(f"pathgrad: warning: {message}", file=sys.stderr, flush=True)


def final_writes(
    trainer: Any,
    run_dir: Path,
    status: str,
    failure: OSError | None,
    *,
    main: bool,
    write: bool,
    crash: Exception | None = None,
) -> tuple[str | None, str | None]:
    """The final checkpoint and the summary; returns the checkpoint and the error to report.

    No final checkpoint after a failure with several ranks (the others may
    be gone) or after a failure before the first update (nothing to keep).
    A write that fails here (a full disk) leaves the last checkpoint as the
    run's state and is reported instead of raised over the first error.
    ``crash``: the exception that stopped the run, recorded as the summary's error.
    """
    if not write:
        return None, None
    final = None
    first = failure
    wants_final = status != "failed" or not trainer.data_parallel.active
    if wants_final and not (status == "failed" and trainer.num_updates == 0):
        try:
            final = trainer.save_checkpoint(kind="final")
        except OSError as problem:
            first = first or problem
    error = None if first is None else write_failure(first, trainer, run_dir)
    if main:
        try:
            recorded = error if error is not None or crash is None else describe(crash)
            write_summary(run_dir, trainer, status, recorded)
        except OSError as problem:
            error = error or write_failure(problem, trainer, run_dir)
    return final, error


def write_failure(failure: OSError, trainer: Any, run_dir: Path) -> str:
    """One line for a file the run could not write, and where the run stands."""
    what = f"'{failure.filename}'" if failure.filename else "a file"
    reason = (failure.strerror or str(failure)).lower()
    last = trainer.latest_checkpoint_path
    state = f"its last checkpoint {last} is intact" if last else "it has no checkpoint yet"
    return (
        f"cannot write {what}: {reason}; the run stopped after update {trainer.num_updates} and "
        f"{state} (`pathgrad resume {run_dir}` once the cause is fixed)."
    )


def crash_note(trainer: Any, run_dir: Path, final: str | None, *, removed: bool = False) -> str:
    """Where a run that an exception stopped stands, and how to go on once it is fixed.

    ``removed``: a new run that failed before its first update, whose directory
    is removed (there is nothing to resume).
    """
    if removed:
        return (
            f"The run stopped as failed in its first update, before anything was saved; "
            f"its directory {run_dir} is removed (train again once the cause is fixed)."
        )
    kept = final or trainer.latest_checkpoint_path
    state = f"its checkpoint {kept} is kept" if kept else "it has no checkpoint"
    return (
        f"The run {run_dir} stopped as failed after update {trainer.num_updates}; {state} "
        f"(`pathgrad resume {run_dir}` once the cause is fixed)."
    )


def print_start(trainer: Any) -> None:
    print(f"torch threads: {trainer.num_threads} ({trainer.num_threads_reason})")
    data_parallel = trainer.data_parallel
    if data_parallel.active:
        print(
            f"data-parallel: {data_parallel.world_size} ranks ({data_parallel.backend}), "
            f"{trainer.env.num_envs} envs each, {trainer.global_num_envs} in all"
        )
    if trainer.compile_scope != "off":
        print(f"torch.compile: {trainer.compile_scope} ({trainer.compile_scope_reason})")


def print_outcome(
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
        success = last.get("eval/success_rate")
        rate = "" if success is None or success != success else f", success rate {success:.2f}"
        print(
            f"{label} at step {step:,}: "
            f"return {last.get('eval/avg_reward', float('nan')):.4g}{rate}"
        )  # an env without a success measure has a NaN rate: not shown
    skipped = trainer.skips.total
    note = f", {skipped} skipped" if skipped else ""
    print(f"{status}: {trainer.num_updates} updates{note}, {trainer.global_step:,} env steps")
    compiled = getattr(trainer, "compiled_update", None)
    if compiled is not None and compiled.first_update_seconds is not None:
        print(f"first compiled update: {compiled.first_update_seconds:.1f} s (compile included)")
    print(f"run:        {run_dir}")
    if final or trainer.latest_checkpoint_path:
        print(f"checkpoint: {final or trainer.latest_checkpoint_path}")
    if curve is not None:
        print(f"curve:      {curve}")
    if tensorboard:
        print(f"tensorboard --logdir {run_dir / 'tb'}")


def write_curve(run_dir: Path) -> Path | None:
    from pathgrad.runs.plotting import plot_runs

    try:
        return plot_runs([run_dir], run_dir / CURVE_FILE)
    except (OSError, ValueError):  # no records yet, or a disk that is full
        return None
