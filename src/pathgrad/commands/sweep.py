"""``pathgrad train CONFIG --seeds 0 1 2 [--grid KEY=A,B ...] [--jobs N]``: several runs.

Every combination of the seeds and the grid's values (a cell) is one
``pathgrad train`` in its own process (forked from one warm server, so no run
imports torch again: :mod:`pathgrad.commands.warm_start`), one after another,
or ``--jobs`` at a time, each with one torch thread unless ``OMP_NUM_THREADS``
says otherwise,
its run directory named after its grid values and seed in one sweep folder,
``<runs_dir>/<experiment>-sweep-<time>/`` or ``--sweep-dir``, so ``pathgrad
plot <sweep folder>/* --aggregate median`` draws the seeds of each grid point
as one curve with a band. Every check a run makes before its first update is
made for every cell before the first run starts. A table of the cells and
their final evaluation ends it.

The sweep survives faults as a run does. SIGINT/SIGTERM reach the sweep alone
(its runs have their own sessions); it passes the signal on to the running
runs, which end with a final checkpoint, starts no other, and exits 130/143.
After ``kill -9`` its runs end by themselves (:mod:`pathgrad.core.parent_watch`).
``sweep.json`` records the cells (:mod:`pathgrad.commands.sweep_record`);
``pathgrad resume SWEEP`` or the same ``train`` command with ``--sweep-dir``
finishes what is missing: finished cells are skipped, cut ones resumed, the
others trained.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from pathgrad.commands import EXIT_SIGINT, EXIT_SIGTERM, UsageError
from pathgrad.commands.sweep_record import (
    FINISHED,
    VERSION,
    cell_names,
    print_table,
    read_record,
    read_summary,
    record_differences,
    run_dir_state,
    wait_until_free,
    write_record,
)
from pathgrad.commands.warm_start import start_command
from pathgrad.core.parent_watch import supervised_environment
from pathgrad.runs.config import ConfigError, load_config
from pathgrad.runs.run import CONFIG_FILE, SUMMARY_FILE, SWEEP_FILE, RunLock

__all__ = ["command_resume_sweep", "command_sweep", "sweep_combinations"]

_POLL_SECONDS = 0.1
_LOCK_WAIT_SECONDS = 120.0  # a run of a killed sweep writing its final checkpoint
_SIGNAL_STATES = {EXIT_SIGINT: "interrupted", EXIT_SIGTERM: "terminated",
                  -signal.SIGINT: "interrupted", -signal.SIGTERM: "terminated"}  # fmt: skip
_BUDGET_KEYS = ("trainer.total_updates", "trainer.total_timesteps")


def sweep_combinations(seeds: list[int] | None, grid: list[str]) -> list[list[str]]:
    """The overrides of each run: the grid's product, then the seeds.

    Raises:
        UsageError: For a grid entry that is not ``KEY=VALUE1,VALUE2...``.
    """
    axes, keys = [], set()
    for entry in grid:
        key, separator, values = entry.partition("=")
        choices = values.split(",")
        if not separator or not key or not values or "" in choices:
            raise UsageError(f"--grid {entry!r}: expected KEY=VALUE1,VALUE2,... (no empty value)")
        repeated = sorted({value for value in choices if choices.count(value) > 1})
        if repeated:
            raise UsageError(f"--grid {key}: {', '.join(repeated)} given twice (one run each).")
        if key in keys:
            raise UsageError(f"--grid {key} is given twice; give its values once: KEY=V1,V2,...")
        keys.add(key)
        axes.append([f"{key}={value}" for value in choices])
    if seeds:
        twice = ", ".join(str(seed) for seed in sorted({s for s in seeds if seeds.count(s) > 1}))
        if twice:
            raise UsageError(f"--seeds: {twice} given twice (one run each).")
        axes.append([f"trainer.seed={seed}" for seed in seeds])
    return [list(combination) for combination in itertools.product(*axes)]


def command_sweep(args: argparse.Namespace, config_path: str | None, overrides: list[str]) -> int:
    """Run every combination (or those an existing ``--sweep-dir`` misses); 0 when all completed."""
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}.")
    # command_train appends the --num-threads override last: it is no part of the cells' identity
    threads = getattr(args, "num_threads", None)
    user_overrides = overrides[:-1] if threads is not None else list(overrides)
    grid = list(args.grid or [])
    wanted = {
        "version": VERSION,
        "config": None if config_path is None else str(Path(config_path).resolve()),
        "overrides": user_overrides,
        "grid": grid,
        "seeds": list(args.seeds) if args.seeds else None,
        "budget": {},
        "jobs": args.jobs,
        "cells": [],
    }
    configs = []
    for combination in sweep_combinations(args.seeds, grid):
        configs.append(load_config(config_path, [*overrides, *combination]))
        values = dict(item.partition("=")[::2] for item in combination[: len(grid)])
        wanted["cells"].append({"grid": values, "seed": configs[-1].trainer.seed,
                                "overrides": combination, "state": "pending"})  # fmt: skip
    names = cell_names(wanted["cells"], bool(args.seeds))
    for cell, (label, name) in zip(wanted["cells"], names, strict=True):
        cell.update(label=label, run_dir=name)
    given = getattr(args, "sweep_dir", None)
    sweep_dir = None if given is None else Path(given)
    if sweep_dir is not None and (sweep_dir / SWEEP_FILE).is_file():
        recorded = read_record(sweep_dir)
        differences = record_differences(recorded, wanted)
        if differences:
            raise UsageError(f"--sweep-dir '{sweep_dir}' holds a sweep of other settings: "
                             f"{'; '.join(differences)}. Repeat its own command, or choose "
                             "a new --sweep-dir.")  # fmt: skip
        recorded["jobs"] = args.jobs
        return _finish(sweep_dir, recorded, quiet=args.quiet, threads=threads)
    if (
        sweep_dir is not None
        and sweep_dir.exists()
        and (not sweep_dir.is_dir() or any(sweep_dir.iterdir()))
    ):
        raise UsageError(f"--sweep-dir '{sweep_dir}' holds files but no {SWEEP_FILE}; "
                         "give a new or empty folder, or an existing sweep's.")  # fmt: skip
    for cell, config in zip(wanted["cells"], configs, strict=True):
        _check_cell(cell, config)
    if sweep_dir is None:
        sweep_dir = _new_sweep_dir(configs[0])
    else:
        sweep_dir.mkdir(parents=True, exist_ok=True)
    return _finish(sweep_dir, wanted, quiet=args.quiet, threads=threads, checked=True)


def command_resume_sweep(args: argparse.Namespace, sweep_dir: Path) -> int:
    """``pathgrad resume SWEEP_DIR [--total-updates N | --total-timesteps N]``: finish a sweep.

    A budget applies to every cell: cut and finished runs are resumed with it
    (a finished run with a budget of its own is left as it is), the others
    trained with it; it is recorded for later commands.
    """
    if getattr(args, "nproc", None) not in (None, 1):
        raise UsageError("--nproc cannot be used with a sweep: its runs are single processes.")
    if getattr(args, "checkpoint", None) is not None:
        raise UsageError(
            "--checkpoint names one run's file; a sweep's runs each resume from their "
            "latest checkpoint (resume one run with `pathgrad resume RUN`)."
        )
    record = read_record(sweep_dir)
    budget = {key: value for key in ("total_updates", "total_timesteps")
              if (value := getattr(args, key, None)) is not None}  # fmt: skip
    if budget:
        varied = [entry.partition("=")[0] for entry in record["grid"]]
        if any(key in _BUDGET_KEYS for key in varied):
            raise UsageError(
                f"the sweep's grid varies the budget ({', '.join(varied)}); one budget "
                "for all would undo it: resume its runs one by one."
            )
        _check_budget_covers_cells(sweep_dir, record, budget)
        record["budget"] = budget
    options = (("--rebuild-index", "rebuild_index"), ("--restart-scheduler", "restart_scheduler"))
    flags = tuple(flag for flag, name in options if getattr(args, name, False))
    return _finish(sweep_dir, record, quiet=args.quiet, threads=args.num_threads, flags=flags)


def _check_budget_covers_cells(sweep_dir: Path, record: dict[str, Any], budget: dict) -> None:
    """A budget below the work a cell has done is refused before anything is written
    (as ``resume RUN`` refuses it), naming the cell."""
    for cell in record["cells"]:
        run_dir = sweep_dir / cell["run_dir"]
        done = _work_done(run_dir)
        for key, unit in (("total_updates", "updates"), ("total_timesteps", "env steps")):
            option = "--" + key.replace("_", "-")
            value, count = budget.get(key), done.get(key, 0)
            if value is not None and value < count:
                raise UsageError(
                    f"{option} {value} is below the {count:,} {unit} sweep cell "
                    f"{_cell_text(cell)} ({cell['run_dir']}) has done; give at least {count} "
                    "(nothing was changed)."
                )


def _work_done(run_dir: Path) -> dict[str, int]:
    """Updates and env steps of a cell's run: its summary's, or its last checkpoint's."""
    from pathgrad.checkpoint import read_index

    counts = []
    summary = read_summary(run_dir) if run_dir.is_dir() else None
    if summary:
        counts.append((summary.get("num_updates"), summary.get("global_step")))
    with contextlib.suppress(Exception):  # no index, or a malformed one: resume says so
        entry = read_index(run_dir / "checkpoints")[-1]
        counts.append((entry.get("num_updates"), entry.get("global_step")))
    updates = [int(u) for u, _ in counts if isinstance(u, (int, float))]
    steps = [int(g) for _, g in counts if isinstance(g, (int, float))]
    return {"total_updates": max(updates, default=0), "total_timesteps": max(steps, default=0)}


def _check_cell(cell: dict[str, Any], config: Any) -> None:
    """Every check the cell's run makes before its first update; the error names the cell."""
    from pathgrad.runs.start_checks import check_run_can_start

    try:
        check_run_can_start(config)
    except ConfigError as error:
        raise ConfigError(f"sweep cell {_cell_text(cell)}: {error}") from error


def _cell_text(cell: dict[str, Any]) -> str:
    return " ".join(cell["overrides"]) or cell["label"]


def _new_sweep_dir(config: Any) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(config.logging.runs_dir) / f"{config.trainer.experiment_name}-sweep-{stamp}"
    base.parent.mkdir(parents=True, exist_ok=True)
    for number in itertools.count():
        candidate = base if number == 0 else base.with_name(f"{base.name}-{number}")
        with contextlib.suppress(FileExistsError):
            candidate.mkdir()
            return candidate
    raise AssertionError("unreachable")


def _budget_overrides(budget: dict[str, int]) -> list[str]:
    return [f"trainer.{key}={value}" for key, value in budget.items()] + [
        f"trainer.{other}=null"
        for other in ("total_updates", "total_timesteps")
        if budget and other not in budget
    ]


def _has_budget(run_dir: Path, budget: dict[str, int]) -> bool:
    """Whether the run's ``config.yaml`` already has ``budget``."""
    try:
        trainer = yaml.safe_load((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))["trainer"]
        return all(trainer.get(key) == value for key, value in budget.items())
    except (OSError, yaml.YAMLError, TypeError, KeyError, AttributeError):
        return False


def _plan(sweep_dir: Path, record: dict[str, Any], quiet: bool) -> list[str]:
    """Per cell: ``skip``, ``train`` or ``resume``, from its run directory."""
    actions = []
    for cell in record["cells"]:
        run_dir = sweep_dir / cell["run_dir"]
        if run_dir.is_dir() and wait_until_free(run_dir, _LOCK_WAIT_SECONDS) and not quiet:
            print(f"  {cell['run_dir']}: waited for its last process to end")
        state = run_dir_state(run_dir)
        summary = (read_summary(run_dir) or {}) if state != "new" else {}
        cell["state"] = summary.get("status", "pending")
        if cell["state"] in FINISHED and record["budget"]:
            state = "finished" if _has_budget(run_dir, record["budget"]) else "cut"
        actions.append({"new": "train", "finished": "skip", "cut": "resume"}[state])
    return actions


def _finish(
    sweep_dir: Path,
    record: dict[str, Any],
    *,
    quiet: bool,
    threads: str | None,
    flags: tuple[str, ...] = (),
    checked: bool = False,
) -> int:
    """Bring every cell of the sweep in ``sweep_dir`` to its end; the exit status."""
    with RunLock(sweep_dir):
        actions = _plan(sweep_dir, record, quiet)
        train_args = [*(record["overrides"]), *_budget_overrides(record["budget"])]
        thread_override = [] if threads is None else [f"trainer.num_threads={threads}"]
        if not checked:
            for cell, action in zip(record["cells"], actions, strict=True):
                fresh = [*train_args, *thread_override, *cell["overrides"]]
                if action == "train":
                    config = load_config(record["config"], fresh)
                elif action == "resume" and record["budget"]:
                    budget = _budget_overrides(record["budget"])
                    config = load_config(sweep_dir / cell["run_dir"] / CONFIG_FILE, budget)
                else:
                    continue
                _check_cell(cell, config)
        resume_args = [*(f"--{key.replace('_', '-')}={value}" for key, value in
                         record["budget"].items()), *flags,
                       *([] if threads is None else [f"--num-threads={threads}"])]  # fmt: skip

        def command(cell: dict[str, Any], action: str) -> list[str]:
            """The cell's ``pathgrad`` arguments."""
            run_dir = str(sweep_dir / cell["run_dir"])
            if action == "resume":
                return ["resume", run_dir, *resume_args, "--quiet"]
            config = [] if record["config"] is None else [record["config"]]
            return ["train", *config, *train_args, *thread_override, *cell["overrides"],
                    f"logging.runs_dir={sweep_dir}", "--run-dir", run_dir, "--quiet"]  # fmt: skip

        todo = [
            (cell, action)
            for cell, action in zip(record["cells"], actions, strict=True)
            if action != "skip"
        ]
        if not quiet:
            done = len(record["cells"]) - len(todo)
            print(f"sweep: {len(record['cells'])} runs ({done} already finished), "
                  f"{record['jobs']} at a time, in {sweep_dir}")  # fmt: skip
        received = _schedule(sweep_dir, record, todo, command, quiet)
    if received:
        word = "interrupted" if received == signal.SIGINT else "terminated"
        stopped = sum(cell["state"] in ("interrupted", "terminated") for cell in record["cells"])
        pending = sum(cell["state"] == "pending" for cell in record["cells"])
        print(f"pathgrad: sweep {word}; {stopped} runs stopped with their final checkpoints and "
              f"{pending} not started, in {sweep_dir}; finish it with `pathgrad resume "
              f"{sweep_dir}`", file=sys.stderr)  # fmt: skip
        return EXIT_SIGINT if received == signal.SIGINT else EXIT_SIGTERM
    if not quiet:
        print_table(sweep_dir, record)
        print(f"curves: pathgrad plot {sweep_dir}/* --aggregate median")
    return 0 if all(cell["state"] in FINISHED for cell in record["cells"]) else 1


class _Child:
    """One cell's process, with its stderr log and the signals passed on to it."""

    def __init__(self, sweep_dir: Path, cell: dict[str, Any], argv: list[str], env: dict) -> None:
        self.cell = cell
        self.run_dir = sweep_dir / cell["run_dir"]
        self.log_path = sweep_dir / f".{cell['run_dir']}.stderr"
        self.summary_before = _stat(self.run_dir / SUMMARY_FILE)
        with open(self.log_path, "ab") as log:
            self.log_offset = log.tell()
        # its own session: a terminal's Ctrl-C reaches the sweep alone, which passes it on
        self.process = start_command(argv, env=env, stderr_path=self.log_path)
        self.signals_sent = 0

    def final_state(self, code: int) -> tuple[str, str | None]:
        """The run's status (from a summary this process wrote, else its exit status), error."""
        summary = read_summary(self.run_dir)
        if summary is not None and _stat(self.run_dir / SUMMARY_FILE) != self.summary_before:
            state = str(summary.get("status"))
        elif code in _SIGNAL_STATES and not (self.run_dir.is_dir() and any(self.run_dir.iterdir())):
            state = "pending"  # stopped in its start-up, before its run directory was made
        else:
            state = {0: "completed", **_SIGNAL_STATES}.get(code, "failed")
        error = None
        if state not in (*FINISHED, *_SIGNAL_STATES.values(), "pending"):  # failed, diverged
            with contextlib.suppress(OSError):
                with open(self.log_path, "rb") as log:
                    log.seek(self.log_offset)
                    lines = log.read().decode(errors="replace").strip().splitlines()
                error = lines[-1] if lines else f"exit status {code}"
        with contextlib.suppress(OSError):
            if self.log_path.stat().st_size == 0:
                self.log_path.unlink()
        return state, error


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


def _schedule(
    sweep_dir: Path, record: dict[str, Any], todo: list, command: Any, quiet: bool
) -> int | None:
    """Run ``todo``'s cells, ``record["jobs"]`` at a time; returns the first signal received.

    After SIGINT/SIGTERM no cell starts; every running one gets the signal
    (and any later one) and is waited for.
    """
    environment = {**os.environ}
    if record["jobs"] > 1:
        environment.setdefault("OMP_NUM_THREADS", "1")
    environment = supervised_environment(environment)
    received: list[int] = []
    running: list[_Child] = []
    queue = list(todo)

    def handler(signum: int, frame: Any) -> None:
        received.append(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        write_record(sweep_dir, record)
        while True:
            for child in running:
                for signum in received[child.signals_sent :]:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(child.process.pid, signum)
                child.signals_sent = len(received)
            changed = False
            for child in [child for child in running if child.process.poll() is not None]:
                running.remove(child)
                state, error = child.final_state(child.process.returncode)
                child.cell.update(state=state, exit_code=child.process.returncode, error=error)
                changed = True
                if error is not None:
                    print(f"pathgrad: sweep cell {_cell_text(child.cell)} {state}: {error}",
                          file=sys.stderr)  # fmt: skip
                elif not quiet and not received:
                    print(f"  {child.cell['run_dir']}: {state}")
            while not received and queue and len(running) < record["jobs"]:
                cell, action = queue.pop(0)
                running.append(_Child(sweep_dir, cell, command(cell, action), environment))
                cell.update(state="running", exit_code=None, error=None)
                changed = True
            if changed:
                write_record(sweep_dir, record)
            if not running and (received or not queue):
                return received[0] if received else None
            time.sleep(_POLL_SECONDS)
    except BaseException:
        for child in running:  # the sweep itself failed: its runs end with a final checkpoint
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.process.pid, signal.SIGTERM)
        for child in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(timeout=60)
        raise
    finally:
        for sig, action in previous.items():
            signal.signal(sig, action)
