"""What ``pathgrad train --nproc N`` says when its job ends early: one line, from the launcher.

Under the launcher, ranks leave to it what only it sees whole: a rank killed
by a signal says nothing, and the ranks that lose contact with it, or are
stopped by the agent or a signal, end silently (:data:`LOST_CONTACT_EXIT`,
130, 143). A rank that meets its own error (bad input, a file it cannot
write, a crash) still prints it, rank 0 for what every rank meets. The
launcher then names the rank that ended the job first, how it ended, what
became of the others and where the last checkpoint is, whatever the order
in which the ranks noticed.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping
from pathlib import Path

from pathgrad.core.run_index import read_index
from pathgrad.core.start_up_signals import LAUNCHED_VARIABLE

__all__ = [
    "LAUNCHED_VARIABLE",
    "LOST_CONTACT_EXIT",
    "RUN_DIR_FILE_VARIABLE",
    "announce_run_dir",
    "announced_run_dir",
    "failure_report",
    "launched_rank",
    "signal_report",
]

# A file where rank 0 writes its run directory, for the launcher's last line.
RUN_DIR_FILE_VARIABLE = "PATHGRAD_LAUNCH_RUN_DIR_FILE"
# The exit status of a rank under the launcher that lost contact with the others.
LOST_CONTACT_EXIT = 75
EXIT_SIGINT, EXIT_SIGTERM = 130, 143
_STOPPED = {EXIT_SIGINT: "SIGINT", EXIT_SIGTERM: "SIGTERM"}


def launched_rank() -> bool:
    """Whether this process is a rank started by ``pathgrad ... --nproc N``."""
    return bool(os.environ.get(LAUNCHED_VARIABLE))


def announce_run_dir(run_dir: Path) -> None:
    """Tell the launcher (if any) which run directory this job writes (rank 0)."""
    target = os.environ.get(RUN_DIR_FILE_VARIABLE)
    if target and os.environ.get("RANK", "0") == "0":
        with contextlib.suppress(OSError):  # the launcher's line then names no checkpoint
            Path(target).write_text(str(Path(run_dir).resolve()), encoding="utf-8")


def announced_run_dir(note: Path) -> Path | None:
    """The run directory rank 0 announced in ``note`` (None before it made one)."""
    try:
        text = note.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return Path(text) if text else None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _first_to_end(exit_codes: Mapping[int, int]) -> tuple[int, int]:
    """The rank whose end ended the job: killed by a signal, else one that spoke for
    itself, else one stopped by a signal, else one that lost contact; within a kind, the
    first the agent saw end (``exit_codes`` in that order, as torch's failures are)."""

    def order(item: tuple[int, tuple[int, int]]) -> tuple[int, int]:
        position, (_, code) = item
        if code < 0:
            kind = 0
        elif code not in (LOST_CONTACT_EXIT, *_STOPPED):
            kind = 1
        elif code in _STOPPED:
            kind = 2
        else:
            kind = 3
        return kind, position

    ended = [(rank, code) for rank, code in exit_codes.items() if code != 0]
    return min(enumerate(ended), key=order)[1]


def _checkpoint_words(run_dir: Path | None) -> str:
    """Where the run can resume from (read from its index; never raises)."""
    if run_dir is None or not run_dir.is_dir():
        return "no run directory is left (the job ended before its first update)."
    entries: list = []
    with contextlib.suppress(ValueError):  # an unreadable index: the files are still there
        entries = read_index(run_dir / "checkpoints")
    existing = [e for e in entries if (run_dir / "checkpoints" / e["file"]).is_file()]
    if not existing:
        return (
            f"no checkpoint was written yet: `pathgrad resume {run_dir}` starts the run "
            "again from the beginning."
        )
    last = existing[-1]
    kind = "a final checkpoint" if last.get("kind") == "final" else "the last checkpoint"
    return (
        f"{kind} (update {last.get('num_updates')}, {run_dir / 'checkpoints' / last['file']}) "
        f"is intact: resume with `pathgrad resume {run_dir}`."
    )


def failure_report(
    exit_codes: Mapping[int, int], nproc: int, run_dir: Path | None
) -> tuple[str | None, int]:
    """The launcher's line (None where the failing rank said it) and the job's exit status.

    ``exit_codes`` maps each rank that ended to its exit status, negative for
    a signal (as :mod:`subprocess` reports it).
    """
    rank, code = _first_to_end(exit_codes)
    others = sorted(r for r in range(nproc) if r != rank)
    stopped = ", ".join(f"rank {r}" for r in others)
    verb = "was" if len(others) == 1 else "were"
    where = _checkpoint_words(run_dir)
    if code < 0:
        name = _signal_name(-code)
        line = (
            f"pathgrad: error: rank {rank} of {nproc} was killed by {name}; {stopped} {verb} "
            f"stopped; {where}"
        )
        return line, 128 - code
    if code in _STOPPED:
        word = "interrupted" if code == EXIT_SIGINT else "terminated"
        line = f"pathgrad: {word}: {_STOPPED[code]} stopped the {nproc} ranks; {where}"
        return line, code
    if code == LOST_CONTACT_EXIT:
        line = (
            f"pathgrad: error: the {nproc} ranks lost contact with each other (a collective "
            f"failed or timed out); {where}"
        )
        return line, 1
    if code in (1, 2, 3):  # pathgrad's own statuses: the rank printed its line
        return None, code
    line = (
        f"pathgrad: error: rank {rank} of {nproc} exited with status {code}; {stopped} "
        f"{verb} stopped; {where}"
    )
    return line, code


def signal_report(signum: int, run_dir: Path | None) -> tuple[str, int]:
    """The launcher's line when it was itself stopped by ``signum``, and its exit status."""
    interrupted = signum == signal.SIGINT
    word = "interrupted" if interrupted else "terminated"
    return (
        f"pathgrad: {word}: every rank stopped; {_checkpoint_words(run_dir)}",
        EXIT_SIGINT if interrupted else EXIT_SIGTERM,
    )
