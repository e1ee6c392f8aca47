"""Wall time from ``pathgrad train`` to given evaluation returns, over seeds.

Each seed runs ``pathgrad train CONFIG trainer.seed=S --run-dir ... --num-threads T
--quiet`` as its own process (``--parallel`` of them at once); the script watches the
run's ``metrics.jsonl`` and notes, for every target return, the wall time from the
command's start (imports, env construction, compilation included) to the first
evaluation at or above it, and its env steps. A run stops once it has reached every
target (``--keep-going`` lets it finish). Reported: per target, the median and the range
over seeds (a seed that never reached it counts as not reached), the machine, the thread
settings and the command.

``--runs RUN_DIR...`` reads finished runs instead (their ``metrics.jsonl`` clock: training
time since the run began, start-up not included).

Run: ``python benchmarks/time_to_return.py configs/diffrl_ant_sapo.yaml --returns 3000 5000
--seeds 0 1 2 [--parallel 2] [--nproc 2] [--num-threads 1] [--runs-dir DIR] [key=value ...]``
(``--nproc N``: each seed trains data-parallel on N ranks, ``pathgrad train --nproc N``; give
``env.num_envs`` per rank as an override to keep the global batch)
(a negative return as an integer, ``--returns -100``: argparse reads ``-1e2`` as an option).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POLL_SECONDS = 1.0


def evaluations(run_dir: Path) -> list[dict]:
    """The evaluation lines of a run's ``metrics.jsonl`` (a line being written is skipped)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and record.get("kind") == "eval":
            records.append(record)
    return records


def first_reaching(records: list[dict], target: float, clock: dict[int, float] | None = None):
    """``(seconds, env steps)`` of the first evaluation at or above ``target``; ``clock`` maps
    a line's index to the wall time it was seen at (else the line's own ``time``)."""
    for index, record in enumerate(records):
        value = record.get("eval/avg_reward")
        if isinstance(value, (int, float)) and value >= target:
            seconds = clock[index] if clock is not None else float(record["time"])
            return seconds, float(record["global_step"])
    return None


def summarize(targets: list[float], results: dict[int, tuple[list[dict], dict | None]]) -> str:
    """The table: per target, seeds reaching it, the median and range of their seconds (a
    seed that never reached it counts as slower than all), the median env steps."""
    lines = ["| return | reached | median s | min-max s | median env steps |",
             "|---:|---:|---:|---:|---:|"]  # fmt: skip
    for target in targets:
        hits = [first_reaching(records, target, clock) for records, clock in results.values()]
        reached = [hit for hit in hits if hit is not None]
        if not reached:
            lines.append(f"| {target:g} | 0/{len(hits)} | - | - | - |")
            continue
        seconds = [hit[0] if hit is not None else float("inf") for hit in hits]
        median = statistics.median(seconds)
        shown = f"{median:.0f}" if median != float("inf") else "not reached"
        fastest, slowest = min(seconds), max(seconds)
        spread = f"{fastest:.0f}-{slowest:.0f}" if slowest != float("inf") else f"{fastest:.0f}-"
        steps = statistics.median(hit[1] for hit in reached)
        lines.append(f"| {target:g} | {len(reached)}/{len(hits)} | {shown} | {spread} | "
                     f"{steps:.0f} |")  # fmt: skip
    return "\n".join(lines)


def machine(threads: int) -> str:
    return (f"{platform.node()}: {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"--num-threads {threads} and OMP_NUM_THREADS={threads} per run")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("config", nargs="?", help="config file or built-in config name")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of every run")
    parser.add_argument("--returns", type=float, nargs="+", required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--parallel", type=int, default=1, help="runs at once")
    parser.add_argument("--nproc", type=int, default=1, help="ranks per run (data-parallel)")
    parser.add_argument("--num-threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--runs-dir", default="runs/time_to_return")
    parser.add_argument("--keep-going", action="store_true", help="train to the config's end")
    parser.add_argument("--runs", nargs="+", help="read these finished runs instead")
    args = parser.parse_intermixed_args()  # overrides may follow the options
    if args.runs:
        results = {i: (evaluations(Path(run)), None) for i, run in enumerate(args.runs)}
        print(f"{len(results)} finished runs (their training clock)\n")
        print(summarize(args.returns, results))
        return
    if args.config is None:
        parser.error("a config is needed (or --runs RUN_DIR...)")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    pending = list(args.seeds)
    running: dict[int, tuple[subprocess.Popen, Path, float, dict]] = {}
    results: dict[int, tuple[list[dict], dict]] = {}
    environment = {**os.environ, "OMP_NUM_THREADS": str(args.num_threads)}
    while pending or running:
        while pending and len(running) < args.parallel:
            seed = pending.pop(0)
            run_dir = Path(args.runs_dir).resolve() / f"{Path(args.config).stem}-s{seed}-{stamp}"
            command = [sys.executable, "-m", "pathgrad", "train", args.config,
                       f"trainer.seed={seed}", *args.overrides, "--run-dir", str(run_dir),
                       "--num-threads", str(args.num_threads), "--quiet",
                       *(["--nproc", str(args.nproc)] if args.nproc > 1 else [])]  # fmt: skip
            process = subprocess.Popen(command, cwd=ROOT, env=environment,
                                       stdout=subprocess.DEVNULL)  # fmt: skip
            running[seed] = (process, run_dir, time.time(), {})
        for seed, (process, run_dir, started, seen) in list(running.items()):
            records = evaluations(run_dir)
            for index in range(len(seen), len(records)):
                seen[index] = time.time() - started
            done = all(first_reaching(records, t, seen) for t in args.returns)
            if done and not args.keep_going and process.poll() is None:
                process.terminate()
            if process.poll() is not None:
                results[seed] = (records, seen)
                del running[seed]
        time.sleep(POLL_SECONDS)
    print(f"{args.config} {' '.join(args.overrides)}, seeds {args.seeds}, {args.parallel} at once"
          + (f", {args.nproc} ranks each" if args.nproc > 1 else ""))
    print(machine(args.num_threads) + (" (per rank)" if args.nproc > 1 else "") + "\n")
    print(summarize(args.returns, results))


if __name__ == "__main__":
    main()
