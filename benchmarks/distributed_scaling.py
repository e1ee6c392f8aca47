"""Data-parallel scaling: env-steps/s of 1 and 2 (or more) ranks on this machine.

Each rank steps the same number of envs (``--num-envs`` per rank: weak
scaling, as one adds GPUs or hosts), or the ranks share ``--total-envs`` (strong scaling:
the same global batch, so the same updates, split over the ranks), with one torch thread,
launched by
``torchrun --standalone``; a single rank runs as a plain process. Runs
alternate between world sizes, ``--repeats`` times; the rate of a run is the
``training_fps`` of its ``summary.json`` (global env steps over the wall time
of training, gradient averages, episode exchange and checkpoints included).

Run: ``python benchmarks/distributed_scaling.py [--config configs/pendulum.yaml]
[--num-envs 64 256 | --total-envs 64] [--ranks 1 2] [--updates 300] [--repeats 3]
[key=value ...]`` (overrides for every run)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run(config: str, ranks: int, num_envs: int, updates: int, extra: list[str]) -> float:
    """Env-steps/s of one training run with ``ranks`` ranks of ``num_envs`` envs each."""
    with tempfile.TemporaryDirectory() as folder:
        overrides = [*extra,
            f"env.num_envs={num_envs}", f"trainer.total_updates={updates}",
            "eval.frequency_steps=0", "logging.tensorboard=false", "trainer.num_threads=1",
            f"logging.runs_dir={folder}", "--quiet",
        ]  # fmt: skip
        launcher = (
            [sys.executable, "-m", "pathgrad"]
            if ranks == 1
            else [sys.executable, "-m", "torch.distributed.run", "--standalone",
                  f"--nproc-per-node={ranks}", "-m", "pathgrad"]
        )  # fmt: skip
        environment = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run(
            [*launcher, "train", config, *overrides], check=True, env=environment,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        (summary,) = Path(folder).glob("*/summary.json")
        return float(json.loads(summary.read_text())["training_fps"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/pendulum.yaml")
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--num-envs", type=int, nargs="+", default=[64, 256], help="per rank")
    sizes.add_argument("--total-envs", type=int, nargs="+", help="all ranks together")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="key=value config overrides")
    args = parser.parse_args()
    strong = args.total_envs is not None
    for total in args.total_envs or []:
        for ranks in args.ranks:
            if total % ranks:
                parser.error(f"--total-envs {total} is not divisible by {ranks} ranks")
    print(
        f"{args.config}, {args.updates} updates, one torch thread per rank, median of "
        f"{args.repeats} alternating runs; env-steps/s, all ranks together (ratio to 1 rank)"
    )
    print()
    header = "| envs in all | " if strong else "| envs per rank | "
    print(header + " | ".join(f"{n} rank{'s' * (n > 1)}" for n in args.ranks) + " |")
    print("|---:|" + "---:|" * len(args.ranks))
    for num_envs in args.total_envs if strong else args.num_envs:
        rates: dict[int, list[float]] = {ranks: [] for ranks in args.ranks}
        for _ in range(args.repeats):
            for ranks in args.ranks:
                per_rank = num_envs // ranks if strong else num_envs
                rate = run(args.config, ranks, per_rank, args.updates, args.overrides)
                rates[ranks].append(rate)
        medians = {ranks: statistics.median(values) for ranks, values in rates.items()}
        base = medians[args.ranks[0]]
        cells = [f"{value:,.0f} ({value / base:.2f})" for value in medians.values()]
        print(f"| {num_envs} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
