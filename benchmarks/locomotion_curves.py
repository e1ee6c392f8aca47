"""Evaluation return against env steps for locomotion runs, with a published anchor drawn in.

Run: ``python benchmarks/locomotion_curves.py RUN [RUN ...] --anchor ant --output ant.png``

Each run directory's ``metrics.jsonl`` gives its deterministic evaluation
returns (``eval/avg_reward``) and episode lengths; runs of the same config
(seeds) are drawn in one colour. The anchor is the AHAC authors' re-runs of
SHAC on DiffRL's Ant (dflex, 10 seeds, training-episode return of 1000-step
episodes): a band per point. A table of each run's last evaluation is printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the non-interactive backend

from pathgrad.runs.run import read_metrics  # noqa: E402

# env steps -> (low, high) return; from the issue's reading of the AHAC authors' logs.
ANCHORS = {
    "ant": {
        "label": "SHAC on DiffRL's Ant (AHAC authors' re-runs)",
        "points": {
            1.0e6: (1600, 1900),
            2.0e6: (3300, 4200),
            4.1e6: (5000, 6000),
            8.0e6: (6500, 7000),
        },
    },
}


def evaluations(run_dir: Path) -> list[tuple[float, float, float]]:
    """(env step, evaluation return, mean episode length) of every evaluation of a run."""
    rows = []
    for record in read_metrics(run_dir):
        if "eval/avg_reward" in record:
            length = record.get("eval/avg_length", record.get("eval/episode_length", float("nan")))
            rows.append((record["global_step"], record["eval/avg_reward"], length))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories")
    parser.add_argument("--anchor", choices=sorted(ANCHORS), default=None)
    parser.add_argument("--output", type=Path, required=True, help="PNG to write")
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    figure, axis = plt.subplots(figsize=(7, 4.2), dpi=110)
    if args.anchor:
        anchor = ANCHORS[args.anchor]
        steps = sorted(anchor["points"])
        axis.errorbar(
            steps,
            [sum(anchor["points"][s]) / 2 for s in steps],
            yerr=[[sum(anchor["points"][s]) / 2 - anchor["points"][s][0] for s in steps],
                  [anchor["points"][s][1] - sum(anchor["points"][s]) / 2 for s in steps]],
            fmt="s", color="black", capsize=4, label=anchor["label"],
        )  # fmt: skip
    print("| run | env steps | eval return | episode length |")
    print("|---|---:|---:|---:|")
    for run_dir in args.runs:
        rows = evaluations(run_dir)
        if not rows:
            print(f"{run_dir}: no evaluation yet", file=sys.stderr)
            continue
        axis.plot([r[0] for r in rows], [r[1] for r in rows], marker=".", label=run_dir.name)
        step, value, length = rows[-1]
        print(f"| {run_dir.name} | {step:,.0f} | {value:,.0f} | {length:,.0f} |")
    axis.set_xlabel("env steps")
    axis.set_ylabel("deterministic evaluation return")
    axis.set_title(args.title)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
