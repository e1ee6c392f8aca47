"""Learning curves of one or several runs, from their ``metrics.jsonl``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the non-interactive backend

from pathgrad.checkpoint import atomic_write  # noqa: E402
from pathgrad.run import read_metrics  # noqa: E402

__all__ = ["plot_runs"]

PANELS = (
    ("eval", "eval/avg_reward", "evaluation return"),
    ("train", "charts/episode_reward_avg_100", "training return (last 100 episodes)"),
)
AXES = (("global_step", "env steps"), ("time", "wall time (s)"))


def plot_runs(run_dirs: Sequence[str | Path], output: str | Path) -> Path:
    """Plot evaluation and training return against env steps and wall time; save a PNG.

    Raises:
        FileNotFoundError: If a run directory has no ``metrics.jsonl``.
    """
    figure, axes = plt.subplots(len(PANELS), len(AXES), figsize=(11, 7), squeeze=False)
    for run_dir in map(Path, run_dirs):
        records = read_metrics(run_dir)
        if not records:
            raise FileNotFoundError(f"'{run_dir}' has no metrics.jsonl to plot.")
        for row, (kind, key, title) in enumerate(PANELS):
            points = [r for r in records if r["kind"] == kind and r.get(key) is not None]
            for column, (x_key, x_label) in enumerate(AXES):
                axis = axes[row][column]
                axis.plot(
                    [r[x_key] for r in points],
                    [r[key] for r in points],
                    marker="o" if kind == "eval" else None,
                    markersize=3,
                    label=run_dir.name,
                )
                axis.set_xlabel(x_label)
                axis.set_ylabel(title)
                axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize="small")
    figure.tight_layout()
    try:
        return atomic_write(
            Path(output), lambda handle: figure.savefig(handle, format="png", dpi=110)
        )
    finally:
        plt.close(figure)
