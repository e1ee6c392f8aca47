"""``pathgrad train CONFIG --seeds 0 1 2 [--grid KEY=A,B ...] [--jobs N]``: several runs.

Every combination of the seeds and the grid's values is one ``pathgrad
train`` in its own process (one after another, or ``--jobs`` at a time, each
with one torch thread unless ``OMP_NUM_THREADS`` says otherwise), its run
directory in one sweep folder, ``<runs_dir>/<experiment>-sweep-<time>/``, so
``pathgrad plot <sweep folder>/* --aggregate median`` draws the seeds of each
grid point as one curve with a band. A table of the runs and their final
evaluation ends it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from pathgrad.commands import EXIT_SIGINT, UsageError
from pathgrad.config import load_config

__all__ = ["command_sweep", "sweep_combinations"]


def sweep_combinations(seeds: list[int] | None, grid: list[str]) -> list[list[str]]:
    """The overrides of each run: the grid's product, then the seeds.

    Raises:
        UsageError: For a grid entry that is not ``KEY=V1,V2...``.
    """
    axes = []
    for entry in grid:
        key, separator, values = entry.partition("=")
        choices = [value for value in values.split(",") if value != ""]
        if not separator or not key or not choices:
            raise UsageError(f"--grid {entry!r}: expected KEY=VALUE1,VALUE2,...")
        axes.append([f"{key}={value}" for value in choices])
    if seeds:
        axes.append([f"trainer.seed={seed}" for seed in seeds])
    return [list(combination) for combination in itertools.product(*axes)]


def command_sweep(args: argparse.Namespace, config_path: str | None, overrides: list[str]) -> int:
    """Run every combination; exit status 0 when all completed."""
    combinations = sweep_combinations(args.seeds, args.grid or [])
    if args.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {args.jobs}.")
    for combination in combinations:  # every run's config is valid before any starts
        config = load_config(config_path, [*overrides, *combination])
    stamp = time.strftime("%Y%m%d-%H%M%S")
    sweep_dir = Path(config.logging.runs_dir) / f"{config.trainer.experiment_name}-sweep-{stamp}"
    sweep_dir.mkdir(parents=True, exist_ok=False)
    environment = {**os.environ}
    if args.jobs > 1:
        environment.setdefault("OMP_NUM_THREADS", "1")
    base = [sys.executable, "-m", "pathgrad", "train", *([config_path] if config_path else [])]
    if not args.quiet:
        print(f"sweep: {len(combinations)} runs, {args.jobs} at a time, in {sweep_dir}")

    def run(combination: list[str]) -> tuple[list[str], int]:
        command = [*base, *overrides, *combination, f"logging.runs_dir={sweep_dir}", "--quiet"]
        result = subprocess.run(command, env=environment, stdout=subprocess.DEVNULL)
        if not args.quiet:
            print(f"  {' '.join(combination) or '(base config)'}: exit {result.returncode}")
        return combination, result.returncode

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(run, combinations))
    except KeyboardInterrupt:  # the runs got Ctrl-C too and end with a final checkpoint
        print(f"pathgrad: sweep interrupted; runs so far in {sweep_dir}", file=sys.stderr)
        return EXIT_SIGINT
    if not args.quiet:
        _print_table(sweep_dir)
        print(f"curves: pathgrad plot {sweep_dir}/* --aggregate median")
    return 0 if all(code == 0 for _, code in results) else 1


def _print_table(sweep_dir: Path) -> None:
    print()
    print("| run | status | updates | final evaluation return |")
    print("|---|---|---:|---:|")
    for run_dir in sorted(path for path in sweep_dir.iterdir() if path.is_dir()):
        try:
            summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            print(f"| {run_dir.name} | no summary | | |")
            continue
        value = (summary.get("last_eval_metrics") or {}).get("eval/avg_reward")
        shown = "" if value is None else f"{value:.4g}"
        print(f"| {run_dir.name} | {summary.get('status')} | {summary.get('num_updates')} | "
              f"{shown} |")  # fmt: skip
