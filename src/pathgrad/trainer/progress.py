"""Training progress on the terminal: a rich progress bar, plain lines, or nothing."""

from __future__ import annotations

import math
import sys
import time
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

__all__ = ["ProgressReporter"]


def _format(value: float, spec: str) -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


class ProgressReporter:
    """Shows updates, env steps, SPS, reward window, grad norm, skipped updates and ETA.

    On a terminal it draws a rich progress bar; otherwise it prints a plain
    line every ``print_every`` updates (and at the end); ``quiet`` prints nothing.

    Args:
        total: Budget (updates or env steps).
        unit: ``updates`` or ``steps``: what ``total`` counts.
        start: Progress already made (when resuming).
        print_every: Updates between plain lines.
        quiet: Print nothing.
        stream: Output stream (stdout by default).
    """

    def __init__(
        self,
        total: int,
        unit: str,
        *,
        start: int = 0,
        print_every: int = 25,
        quiet: bool = False,
        stream: TextIO | None = None,
    ) -> None:
        self.total = max(int(total), 1)
        self.unit = unit
        self.print_every = print_every
        self.quiet = quiet
        self.stream = stream or sys.stdout
        self.skipped = 0
        self.start_time = time.time()
        self._start = start
        self._last_line: dict[str, Any] = {}
        self._printed: dict[str, Any] | None = None
        self._progress: Progress | None = None
        if not quiet and self.stream.isatty():
            self._progress = Progress(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[stats]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            self._task = self._progress.add_task("train", total=self.total, stats="")
            self._progress.start()
            self._progress.update(self._task, completed=start)

    def _stats(self, entry: dict[str, float]) -> str:
        return (
            f"steps {int(entry['global_step']):,}  SPS {_format(entry['charts/SPS'], ',.0f')}  "
            f"reward {_format(entry['charts/episode_reward_avg_100'], '.3g')}  "
            f"grad {_format(entry.get('train/grad_norm', math.nan), '.3g')}  "
            f"skipped {self.skipped}"
        )

    def __call__(self, kind: str, entry: dict[str, float]) -> None:
        """Trainer callback: show a training entry (evaluation entries are printed)."""
        if self.quiet:
            return
        if kind == "eval":
            line = (
                f"eval at step {int(entry['global_step']):,}: "
                f"return {_format(entry.get('eval/avg_reward', math.nan), '.4g')}, "
                f"success {_format(entry.get('eval/success_rate', math.nan), '.2f')}"
            )
            if self._progress is not None:
                self._progress.console.print(line)
            else:
                print(line, file=self.stream, flush=True)
            return
        self.skipped += int(entry.get("train/skipped_update", 0.0))
        done = int(entry["num_updates"] if self.unit == "updates" else entry["global_step"])
        if self._progress is not None:
            self._progress.update(self._task, completed=done, stats=self._stats(entry))
            return
        self._last_line = entry
        updates = int(entry["num_updates"])
        if updates % self.print_every == 0 or done >= self.total:
            self._print_line(entry, done)

    def _print_line(self, entry: dict[str, float], done: int) -> None:
        self._printed = entry
        elapsed = time.time() - self.start_time
        rate = (done - self._start) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - done) / rate if rate > 0 else math.nan
        print(
            f"update {int(entry['num_updates'])}  {done:,}/{self.total:,} {self.unit}  "
            f"{self._stats(entry)}  ETA {_format(eta, '.0f')} s",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        """Stop the bar (or print the last line if it was not printed)."""
        if self._progress is not None:
            self._progress.stop()
            return
        entry = self._last_line
        if not self.quiet and entry and entry is not self._printed:
            done = int(entry["num_updates"] if self.unit == "updates" else entry["global_step"])
            self._print_line(entry, done)
