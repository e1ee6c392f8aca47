"""Learning curves of one or several runs, from their ``metrics.jsonl``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, MaxNLocator

from pathgrad.core.atomic_files import atomic_write
from pathgrad.runs.run import CONFIG_FILE, read_metrics
from pathgrad.runs.seed_groups import group_by_config, seed_band

__all__ = ["learning_curve_figure", "plot_runs", "run_label", "save_png"]

PANELS = (
    ("eval", "eval/avg_reward", "evaluation return"),
    ("train", "charts/episode_reward_avg_100", "training return (last 100 episodes)"),
)
# Gradient health, on a log scale; skipped updates are marked on the first row.
HEALTH_PANELS = (
    ("train", "train/grad_norm", "gradient norm before clipping (x: skipped update)"),
    ("train", "train/action_adjoint_preclip_max_norm", "largest action-adjoint norm"),
)
AXES = (("global_step", "env steps"), ("time", "wall time (s)"))
X_CHOICES = ("steps", "time")  # AXES' names on the command line


def run_label(run_dir: Path, others: Sequence[Path] = ()) -> str:
    """``<run name> (<env>, <algorithm>, seed <s>)``; the parent folder too if names repeat."""
    names = [Path(other).name for other in others]
    name = run_dir.name
    if names.count(name) > 1:
        name = f"{run_dir.parent.name}/{name}"
    config = _read_config(run_dir)
    if not config:
        return name
    env = config.get("env", {}).get("name", "?")
    algorithm = config.get("algorithm", {}).get("name", "?")
    seed = config.get("trainer", {}).get("seed", "?")
    return f"{name} ({env}, {algorithm}, seed {seed})"


def _read_config(run_dir: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def plot_runs(
    run_dirs: Sequence[str | Path],
    output: str | Path,
    metrics: Sequence[str] = (),
    aggregate: str | None = None,
) -> Path:
    """Plot the runs' learning curves (:func:`learning_curve_figure`) into a PNG file.

    Raises:
        FileNotFoundError: If a run directory has no ``metrics.jsonl`` (or no records).
        ValueError: If a ``metrics.jsonl`` has a malformed line (other than a cut last one).
        OSError: If ``output`` cannot be written.
    """
    return save_png(learning_curve_figure(run_dirs, metrics, aggregate), output)


def save_png(figure: Figure, output: str | Path) -> Path:
    """Write ``figure`` to ``output`` atomically as a PNG.

    Raises:
        OSError: If ``output`` cannot be written.
    """
    return atomic_write(Path(output), lambda handle: figure.savefig(handle, format="png", dpi=110))


def learning_curve_figure(
    run_dirs: Sequence[str | Path],
    metrics: Sequence[str] = (),
    aggregate: str | None = None,
    x: str | None = None,
) -> Figure:
    """Evaluation and training return against env steps and wall time (``x``: ``steps``
    or ``time`` for one of them).

    Rows without any data (evaluation switched off) are left out; each run is
    labelled with its name, env, algorithm and seed; env steps read as 200k, 1M.
    ``metrics`` adds a row per evaluation metric (``eval/forward_velocity`` or
    just ``forward_velocity``). Gradient health follows where recorded: the
    gradient norm before clipping with skipped updates marked, and the largest
    action-adjoint norm (log scales). ``aggregate`` (``median`` or ``mean``)
    draws runs that differ only in their seed as one curve with a band
    (:mod:`pathgrad.runs.seed_groups`: lowest to highest run around the median, one
    standard deviation around the mean).

    Raises:
        FileNotFoundError: If a run directory has no ``metrics.jsonl`` (or no records).
        ValueError: If a ``metrics.jsonl`` has a malformed line (other than a cut last
            one), or no run has a requested metric.
    """
    if x not in (None, *X_CHOICES):
        raise ValueError(f"x must be one of {', '.join(X_CHOICES)}, got {x!r}.")
    x_axes = AXES if x is None else [AXES[X_CHOICES.index(x)]]
    run_dirs = [Path(run_dir) for run_dir in run_dirs]
    records = {}
    for run_dir in run_dirs:
        if not run_dir.exists():
            raise FileNotFoundError(f"'{run_dir}' does not exist.")
        records[run_dir] = read_metrics(run_dir)
        if not records[run_dir]:
            hint = (f" (a sweep: plot its runs, `pathgrad plot {run_dir}/* --aggregate median`)"
                    if (run_dir / "sweep.json").is_file() else "")  # fmt: skip
            raise FileNotFoundError(f"'{run_dir}' has no metrics.jsonl to plot{hint}.")
    panels = [
        panel
        for panel in PANELS
        if any(_points(run_records, *panel[:2]) for run_records in records.values())
    ] or list(PANELS[1:])
    panels += [_metric_panel(records, metric) for metric in metrics]
    panels += [
        panel
        for panel in HEALTH_PANELS
        if any(_points(run_records, *panel[:2]) for run_records in records.values())
    ]
    # A figure on its own Agg canvas: no pyplot (its import and global state) needed.
    figure = Figure(figsize=(5.5 * len(x_axes), 3.5 * len(panels) + 0.5))
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(panels), len(x_axes), squeeze=False)
    if aggregate is None:
        curves = {run_label(run_dir, run_dirs): [run_dir] for run_dir in run_dirs}
    else:
        curves = group_by_config({run_dir: _read_config(run_dir) for run_dir in run_dirs})
    for label, group in curves.items():
        for row, (kind, key, title) in enumerate(panels):
            for column, (x_key, x_label) in enumerate(x_axes):
                axis = axes[row][column]
                if len(group) == 1:
                    _draw_run(axis, records[group[0]], kind, key, x_key, label)
                else:
                    _draw_band(axis, [records[run] for run in group], kind, key, x_key, label,
                               aggregate)  # fmt: skip
                if key in {panel[1] for panel in HEALTH_PANELS}:
                    axis.set_yscale("log")
                axis.set_xlabel(x_label)
                axis.set_ylabel(title)
                axis.grid(alpha=0.3)
                axis.xaxis.set_major_locator(MaxNLocator(nbins=6))
                axis.xaxis.set_major_formatter(EngFormatter(sep=""))
    axes[0][0].legend(fontsize="small")
    figure.tight_layout()
    return figure


def _draw_run(axis: Any, records: list, kind: str, key: str, x_key: str, label: str) -> None:
    """One run's curve; on the gradient-norm row, its skipped updates as crosses."""
    points = _points(records, kind, key)
    (line,) = axis.plot(
        [r.get(x_key, 0.0) for r in points],
        [r[key] for r in points],
        marker="o" if kind == "eval" else None,
        markersize=3,
        label=label,
    )
    if key == "train/grad_norm":
        skipped = [r for r in records if r.get("train/skipped_update") == 1.0]
        low = min((r[key] for r in points if r[key] > 0), default=1.0)
        axis.plot(
            [r.get(x_key, 0.0) for r in skipped], [low] * len(skipped),
            "x", color=line.get_color(), markersize=6,
        )  # fmt: skip


def _draw_band(
    axis: Any, runs: list, kind: str, key: str, x_key: str, label: str, statistic: str
) -> None:
    """Several seeds' curves as their median (or mean) with a band."""
    series = []
    for records in runs:
        points = _points(records, kind, key)
        series.append(([r.get(x_key, 0.0) for r in points], [r[key] for r in points]))
    if not any(xs for xs, _ in series):
        return
    grid, center, low, high = seed_band(series, statistic)
    (line,) = axis.plot(grid, center, label=f"{label}, {statistic}")
    axis.fill_between(grid, low, high, color=line.get_color(), alpha=0.2, linewidth=0)


def _metric_panel(records: dict[Path, list[dict[str, Any]]], metric: str) -> tuple[str, str, str]:
    key = metric if metric.startswith("eval/") else f"eval/{metric}"
    if any(_points(run_records, "eval", key) for run_records in records.values()):
        return ("eval", key, f"evaluation {key.removeprefix('eval/').replace('_', ' ')}")
    known = sorted(
        {
            name
            for run_records in records.values()
            for record in run_records
            if record.get("kind") == "eval"
            for name, value in record.items()
            if name.startswith("eval/") and isinstance(value, (int, float))
        }
    )
    raise ValueError(
        f"no run has the evaluation metric '{key}'; they have: {', '.join(known) or 'none'}."
    )


def _points(records: list[dict[str, Any]], kind: str, key: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("kind") == kind and isinstance(r.get(key), (int, float))]
