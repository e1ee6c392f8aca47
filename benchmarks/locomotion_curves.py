"""Evaluation return against env steps for locomotion runs, with a published anchor drawn in.

Run: ``python benchmarks/locomotion_curves.py [LABEL:] RUN [RUN ...] [LABEL: RUN ...]
--anchor ant --output ant.png``

Each run directory's ``metrics.jsonl`` gives its deterministic evaluation
returns (``eval/avg_reward``) and episode lengths. Runs are drawn in groups,
one colour per group (seeds of one config): a word ending in ``:`` starts a
group of that label; runs before any label are grouped by the algorithm of
their ``config.yaml``. The anchors are the AHAC authors' re-runs on DiffRL's
tasks (dflex, training-episode return of 1000-step episodes): on the Ant, SHAC's
band at four env-step counts; on the Hopper, SHAC's and AHAC's returns at the
end of their runs (no env-step count given), drawn as lines. A table of each
run's last evaluation is printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the non-interactive backend
import yaml  # noqa: E402

from pathgrad.runs.run import read_metrics  # noqa: E402

# From the issue's reading of the AHAC authors' logs: "points" are env steps -> (low,
# high) return, "final" are returns at the end of runs whose env steps are not given.
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
    "hopper": {
        "label": "DiffRL's Hopper at the end (AHAC authors' runs)",
        "final": {"SHAC": 4800, "AHAC": 5200},
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


def algorithm_of(run_dir: Path) -> str:
    """The algorithm named in a run's ``config.yaml`` (upper case), else the folder's name."""
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        return str(config["algorithm"]["name"]).upper()
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return run_dir.name


def groups(words: list[str]) -> dict[str, list[Path]]:
    """Label -> run directories, from ``[LABEL:] RUN ...`` words."""
    grouped: dict[str, list[Path]] = {}
    label = None
    for word in words:
        if word.endswith(":") and not Path(word).is_dir():
            label = word[:-1]
            grouped.setdefault(label, [])
            continue
        run_dir = Path(word)
        grouped.setdefault(label or algorithm_of(run_dir), []).append(run_dir)
    empty = [name for name, runs in grouped.items() if not runs]
    if empty:
        raise SystemExit(f"locomotion_curves: no runs after the label {empty[0]}:")
    return grouped


def draw_anchor(axis, anchor: dict) -> None:
    """The anchor's bands (points) or end-of-run lines (final)."""
    points = anchor.get("points", {})
    if points:
        steps = sorted(points)
        middle = [sum(points[s]) / 2 for s in steps]
        axis.errorbar(
            steps,
            middle,
            yerr=[[m - points[s][0] for s, m in zip(steps, middle, strict=True)],
                  [points[s][1] - m for s, m in zip(steps, middle, strict=True)]],
            fmt="s", color="black", capsize=4, label=anchor["label"],
        )  # fmt: skip
    for index, (name, value) in enumerate(anchor.get("final", {}).items()):
        style = ("--", ":", "-.")[index % 3]
        axis.axhline(value, color="black", linestyle=style, linewidth=1,
                     label=f"{name}, {anchor['label']}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run directories, each group after LABEL:")
    parser.add_argument("--anchor", choices=sorted(ANCHORS), default=None)
    parser.add_argument("--output", type=Path, required=True, help="PNG to write")
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    grouped = groups(args.runs)
    figure, axis = plt.subplots(figsize=(7, 4.2), dpi=110)
    if args.anchor:
        draw_anchor(axis, ANCHORS[args.anchor])
    print("| group | run | env steps | eval return | episode length |")
    print("|---|---|---:|---:|---:|")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (label, run_dirs) in enumerate(grouped.items()):
        colour = colours[index % len(colours)]
        drawn = 0
        for run_dir in run_dirs:
            try:
                rows = evaluations(run_dir)
            except ValueError as error:  # a malformed metrics.jsonl: name it, draw the rest
                print(f"{run_dir}: skipped, {error}", file=sys.stderr)
                continue
            if not rows:
                print(f"{run_dir}: no evaluation yet", file=sys.stderr)
                continue
            count = f"{len(run_dirs)} run" + ("s" if len(run_dirs) != 1 else "")
            name = f"{label} ({count})" if drawn == 0 else None
            axis.plot([r[0] for r in rows], [r[1] for r in rows], color=colour, alpha=0.8,
                      linewidth=1, marker=".", markersize=3, label=name)  # fmt: skip
            drawn += 1
            step, value, length = rows[-1]
            print(f"| {label} | {run_dir.name} | {step:,.0f} | {value:,.0f} | {length:,.0f} |")
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
