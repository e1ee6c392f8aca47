"""The Gymnasium-tasks table of docs/benchmarks.md from run folders and SB3 curves.

Reads ``pathgrad train`` run folders (their ``metrics.jsonl`` evaluations: env steps,
seconds since the start, deterministic return) and the curves that
``benchmarks/gymnasium_sb3.py`` writes, and prints per task and method: the evaluation
return at given env steps (median over seeds, the seeds' values beside it), the best,
and the env steps and training seconds a method needs to reach the best return SB3
reached (the issue's comparison), as a Markdown table.

Run: ``python benchmarks/gymnasium_results.py RUN_OR_JSON ... [--at 500000 1000000]``; a
run folder's task and method come from its ``config.yaml`` (``env.name``,
``algorithm.name``), its seed from ``trainer.seed``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

import yaml


def run_curve(folder: Path) -> dict | None:
    """``{task, method, seed, curve: [[steps, seconds, return], ...]}`` of a run folder."""
    config = yaml.safe_load((folder / "config.yaml").read_text())
    curve = []
    for line in (folder / "metrics.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry.get("kind") == "eval" and entry.get("eval/avg_reward") is not None:
            curve.append([entry["global_step"], entry.get("time", 0.0), entry["eval/avg_reward"]])
    if not curve:
        return None
    return {"task": config["env"]["name"], "method": config["algorithm"]["name"],
            "seed": config["trainer"].get("seed", 0), "curve": curve}  # fmt: skip


def value_at(curve: list[list[float]], steps: float) -> float | None:
    """The last evaluation at or before ``steps`` (None if the run has none that late)."""
    if curve[-1][0] < 0.98 * steps:
        return None
    before = [point for point in curve if point[0] <= steps * 1.025]  # 1.024M: "1M"
    return before[-1][2] if before else None


def reach(curve: list[list[float]], target: float) -> tuple[float, float] | None:
    """Env steps and seconds of the first evaluation at or above ``target``."""
    return next(((p[0], p[1]) for p in curve if p[2] >= target), None)


def table(records: list[dict], marks: list[int]) -> str:
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for record in records:
        groups[(record["task"], record["method"].upper())].append(record)
    heads = " | ".join(f"{m / 1e6:g}M" for m in marks)
    lines = [f"| task | method | seeds | {heads} | best | to SB3's best (steps, s) |",
             "|---|---|---:|" + "---:|" * (len(marks) + 2)]  # fmt: skip
    sb3_best = {}
    for (task, method), runs in groups.items():
        if method in ("PPO", "SAC"):
            best = max(p[2] for r in runs for p in r["curve"])
            sb3_best[task] = max(best, sb3_best.get(task, float("-inf")))
    for (task, method), runs in sorted(groups.items()):
        cells = []
        for mark in marks:
            values = [v for v in (value_at(r["curve"], mark) for r in runs) if v is not None]
            cells.append(
                f"{statistics.median(values):.0f} ({', '.join(f'{v:.0f}' for v in values)})"
                if values else ""
            )  # fmt: skip
        best = statistics.median(max(p[2] for p in r["curve"]) for r in runs)
        target = sb3_best.get(task)
        hits = [reach(r["curve"], target) for r in runs] if target is not None else []
        reached = [h for h in hits if h is not None]
        to = (
            f"{statistics.median(h[0] for h in reached) / 1e3:.0f}k, "
            f"{statistics.median(h[1] for h in reached):.0f} s ({len(reached)}/{len(runs)})"
            if reached else ("not reached" if target is not None else "")
        )  # fmt: skip
        lines.append(f"| {task} | {method} | {len(runs)} | {' | '.join(cells)} | {best:.0f} "
                     f"| {to} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", type=Path, help="run folders or SB3 curve files")
    parser.add_argument("--at", nargs="+", type=int, default=[500_000, 1_000_000])
    args = parser.parse_args()
    records = []
    for source in args.sources:
        if source.is_dir() and (source / "metrics.jsonl").is_file():
            record = run_curve(source)
        elif source.suffix == ".json":
            record = json.loads(source.read_text())
        else:
            continue
        if record and record["curve"]:
            records.append(record)
    print(table(records, args.at))


if __name__ == "__main__":
    main()
