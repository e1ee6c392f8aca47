"""SHAC against APG: evaluation return over env steps, several seeds per task.

Each run trains one config of ``configs/`` with one seed (in its own process,
one thread each, ``--jobs`` at a time) and records its evaluation curve and
wall time. Writes ``results.json`` and one ``<task>.png`` per task (median over
seeds, each seed faint) to ``--out``, and prints a Markdown table.

Run: ``python benchmarks/shac_vs_apg.py [--seeds 0 1 2] [--jobs 2] [--out DIR] [--quick]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# task -> algorithm -> (config, overrides, threshold of the time-to-threshold column)
TASKS: dict[str, dict[str, tuple[str, list[str]]]] = {
    "Pendulum": {
        "apg": ("pendulum.yaml", ["trainer.total_updates=500", "eval.frequency_steps=102400"]),
        "shac": ("pendulum_shac.yaml", []),
    },
    "CartPoleSwingUp": {
        "apg": ("cartpole_swingup.yaml", []),
        "shac": ("cartpole_swingup_shac.yaml", []),
    },
    "Reacher": {
        "apg": ("reacher.yaml", []),
        "shac": ("reacher_shac.yaml", []),
    },
}
THRESHOLDS = {"Pendulum": -170.0, "CartPoleSwingUp": 300.0, "Reacher": -5.5}


def run_one(job: tuple[str, str, str, list[str], int]) -> dict:
    """Train one config with one seed; return its evaluation curve."""
    import torch

    torch.set_num_threads(1)
    from pathgrad.runs.config import load_config
    from pathgrad.runs.run import build_run

    task, algorithm, config_name, overrides, seed = job
    settings = [*overrides, f"trainer.seed={seed}", "trainer.save_frequency_updates=0"]
    config = load_config(ROOT / "configs" / config_name, settings)
    with tempfile.TemporaryDirectory() as run_dir:
        objects = build_run(config, Path(run_dir))
        budget = {
            key: value
            for key, value in (
                ("total_updates", config.trainer.total_updates),
                ("total_timesteps", config.trainer.total_timesteps),
            )
            if value is not None
        }
        start = time.time()
        objects.trainer.train(**budget)
        wall = time.time() - start
        history = objects.trainer.eval_history
    return {
        "task": task,
        "algorithm": algorithm,
        "seed": seed,
        "wall_time": wall,
        "env_steps": objects.trainer.global_step,
        "curve": [[entry["global_step"], entry["eval/avg_reward"]] for entry in history],
    }


def steps_to(curve: list[list[float]], threshold: float) -> float | None:
    """First evaluated env step with a return at or above ``threshold``."""
    return next((step for step, value in curve if value >= threshold), None)


def summarize(results: list[dict]) -> str:
    lines = [
        "| task | algorithm | seeds | env steps | median final return (per seed) "
        "| median steps to threshold | median wall time |",
        "|---|---|---:|---:|---|---|---:|",
    ]
    for task in dict.fromkeys(result["task"] for result in results):
        threshold = THRESHOLDS[task]
        for algorithm in ("apg", "shac"):
            runs = [r for r in results if r["task"] == task and r["algorithm"] == algorithm]
            if not runs:
                continue
            finals = [r["curve"][-1][1] for r in runs if r["curve"]]
            reached = [steps_to(r["curve"], threshold) for r in runs]
            hits = [s for s in reached if s is not None]
            share = f"{len(hits)}/{len(runs)} reach {threshold:g}"
            median_hit = f"{statistics.median(hits) / 1e6:.2f}M" if hits else "never"
            to_threshold = f"{median_hit} ({share})"
            finals_text = ", ".join(f"{value:.1f}" for value in finals)
            lines.append(
                f"| {task} | {algorithm.upper()} | {len(runs)} | {runs[0]['env_steps'] / 1e6:.2f}M "
                f"| {statistics.median(finals):.1f} ({finals_text}) | {to_threshold} "
                f"| {statistics.median(r['wall_time'] for r in runs):.0f} s |"
            )
    return "\n".join(lines)


def plot(results: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for task in dict.fromkeys(result["task"] for result in results):
        figure, axis = plt.subplots(figsize=(6, 4))
        for color, algorithm in (("tab:blue", "apg"), ("tab:red", "shac")):
            runs = [r for r in results if r["task"] == task and r["algorithm"] == algorithm]
            if not runs:
                continue
            for run in runs:
                steps, values = zip(*run["curve"], strict=True) if run["curve"] else ((), ())
                axis.plot(steps, values, color=color, alpha=0.25)
            length = min(len(run["curve"]) for run in runs)
            steps = [runs[0]["curve"][i][0] for i in range(length)]
            medians = [statistics.median(run["curve"][i][1] for run in runs) for i in range(length)]
            axis.plot(steps, medians, color=color, label=f"{algorithm.upper()} (median)")
        axis.set_title(task)
        axis.set_xlabel("env steps")
        axis.set_ylabel("evaluation return")
        axis.grid(alpha=0.3)
        axis.legend()
        figure.tight_layout()
        figure.savefig(out / f"{task}.png", dpi=110)
        plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("benchmark_results"))
    parser.add_argument("--quick", action="store_true", help="one tiny run per algorithm")
    args = parser.parse_args()
    extra: list[str] = []
    if args.quick:
        args.seeds, args.tasks = [0], ["Pendulum"]
        extra = ["trainer.total_updates=2", "eval.frequency_steps=1024", "eval.episodes=2"]
    jobs = [
        (task, algorithm, config, [*overrides, *extra], seed)
        for task in args.tasks
        for algorithm, (config, overrides) in TASKS[task].items()
        for seed in args.seeds
    ]
    context = multiprocessing.get_context("spawn")
    with context.Pool(args.jobs) as pool:
        results = pool.map(run_one, jobs)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out)
    print(summarize(results))
    print(f"\ncurves: {args.out}/<task>.png, data: {args.out}/results.json")


if __name__ == "__main__":
    main()
