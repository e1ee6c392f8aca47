"""A rank of a two-rank ``pathgrad train --nproc 2`` job killed at a random instant.

Used by ``test_distributed_faults.py`` and, by hand, to show that the launcher's
one line holds whatever the timing, both cores held busy by other processes::

    python tests/distributed/killed_ranks.py 20    # 20 kills in a row; stops at a miss
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
JOB = ["env.num_envs=16", "trainer.total_updates=100000", "trainer.save_frequency_updates=2",
       "eval.frequency_steps=0", "--quiet"]  # fmt: skip
# The launcher's line: the rank, its signal, the other rank, and the checkpoint (or why none).
LINE = re.compile(
    r"pathgrad: error: rank (?P<rank>[01]) of 2 was killed by SIGKILL; rank (?P<other>[01]) was "
    r"stopped; (?:(?:a final|the last) checkpoint \(update (?P<update>\d+), (?P<file>.+)\) is "
    r"intact: resume with `pathgrad resume (?P<run>.+)`\.|no checkpoint was written yet: "
    r"`pathgrad resume (?P<empty>.+)` starts the run again from the beginning\.|no run "
    r"directory is left \(the job ended before its first update\)\.)"
)


@dataclass
class Outcome:
    victim: int
    delay: float
    returncode: int
    stderr: str

    def miss(self) -> str | None:
        """What is wrong with how the job ended (None: exit 137 and exactly the one line)."""
        lines = self.stderr.strip().splitlines()
        if self.returncode != 128 + signal.SIGKILL:
            return f"exit status {self.returncode}"
        if len(lines) != 1:
            return f"{len(lines)} lines on stderr"
        found = LINE.fullmatch(lines[0])
        if found is None or int(found["rank"]) != self.victim:
            return f"unexpected line {lines[0]!r}"
        if found["file"] is not None:  # the checkpoint named is there, at that update
            from pathgrad.checkpoint import read_checkpoint

            if read_checkpoint(Path(found["file"]))["num_updates"] != int(found["update"]):
                return f"{found['file']} is not update {found['update']}"
        if found["empty"] is not None and not (Path(found["empty"]) / "config.yaml").is_file():
            return f"{found['empty']} is not a run directory"
        return None


@contextlib.contextmanager
def busy_cores(count: int) -> Iterator[None]:
    """``count`` processes that spin on a core each while the block runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def rank_pids(launcher_pid: int) -> dict[int, int]:
    """Rank -> pid of the launcher's rank processes (children of any of its threads)."""
    pids = {}
    for task in Path(f"/proc/{launcher_pid}/task").iterdir():
        with contextlib.suppress(OSError):
            for pid in map(int, (task / "children").read_text().split()):
                with contextlib.suppress(OSError):
                    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                    values = dict(item.split(b"=", 1) for item in environ if b"=" in item)
                    if b"RANK" in values:
                        pids[int(values[b"RANK"])] = pid
    return pids


def kill_a_rank(
    folder: Path, victim: int, delay: float, *, after_checkpoint: bool = False, timeout=180.0
) -> Outcome:
    """Start the job in ``folder``, SIGKILL rank ``victim`` ``delay`` s after both ranks
    exist (or after its first checkpoint), and return how the job ended."""
    launcher = subprocess.Popen(
        [sys.executable, "-m", "pathgrad", "train", "--nproc", "2", *JOB],
        cwd=folder, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + timeout
        while len(pids := rank_pids(launcher.pid)) < 2:
            if time.monotonic() > deadline or launcher.poll() is not None:
                raise AssertionError("the ranks did not start: " + launcher.stderr.read()[-2000:])
            time.sleep(0.02)
        while after_checkpoint and not any(folder.glob("runs/*/checkpoints/index.json")):
            if time.monotonic() > deadline or launcher.poll() is not None:
                raise AssertionError("no checkpoint was written: " + launcher.stderr.read()[-2000:])
            time.sleep(0.02)
        time.sleep(delay)
        os.kill(pids[victim], signal.SIGKILL)
        _, stderr = launcher.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()
    return Outcome(victim, delay, launcher.returncode, stderr)


def main(runs: int, seed: int = 0) -> int:
    # A SIGTERM (or SIGHUP) to this script still ends the job it started (the finally blocks).
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda number, frame: sys.exit(128 + number))
    draw = random.Random(seed)
    with busy_cores(2), tempfile.TemporaryDirectory() as folder:
        for attempt in range(runs):
            # Half during start-up (imports, rendezvous, the run directory, the first
            # updates), half while training, after the first checkpoint.
            victim, after = draw.randrange(2), draw.random() < 0.5
            delay = draw.uniform(0.0, 3.0) if after else draw.uniform(0.0, 30.0)
            job = Path(folder) / str(attempt)
            job.mkdir()
            outcome = kill_a_rank(job, victim, delay, after_checkpoint=after)
            miss = outcome.miss()
            when = "after the first checkpoint" if after else "after both ranks started"
            print(f"{attempt + 1}/{runs}: rank {victim} killed {delay:.1f} s {when}: "
                  f"{miss or 'ok'}: {outcome.stderr.strip()}", flush=True)  # fmt: skip
            if miss:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
