"""Faults of data-parallel jobs: a failing rank ends the job at once, in rank 0's one line."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from killed_ranks import busy_cores, kill_a_rank
from test_distributed import TORCHRUN, wait_for

from pathgrad.checkpoint import latest_checkpoint, read_checkpoint
from pathgrad.runs.run import RunLock

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
PATHGRAD = [sys.executable, "-m", "pathgrad"]
SMALL = ["env.num_envs=16", "trainer.total_updates=4", "eval.frequency_steps=0",
         "trainer.save_frequency_updates=2", "--quiet"]  # fmt: skip
needs_proc = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")

# Rank 0 finds the disk full from its second periodic checkpoint on (imported at start-up).
FULL_DISK = """
import os
if os.environ.get("RANK") == "0" and os.environ.get("PATHGRAD_TEST_FULL_DISK"):
    import errno
    import pathgrad.checkpoint as checkpoint

    original = checkpoint.atomic_write

    def atomic_write(path, write):
        if "_step_2048" not in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return original(path, write)

    checkpoint.atomic_write = atomic_write
"""


def child_pids(pid: int) -> list[int]:
    """Children of every thread of ``pid``."""
    tasks = Path(f"/proc/{pid}/task").iterdir()
    return [int(c) for task in tasks for c in (task / "children").read_text().split()]


def ended(pid: int) -> bool:
    """Gone, or a zombie no one has reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def run(*args: str, cwd: Path, env: dict | None = None, timeout: float = 120):
    started = time.monotonic()
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env or ENV,
                            timeout=timeout)  # fmt: skip
    return result, time.monotonic() - started


def one_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    return lines[0]


def start_job(folder: Path, command: list[str]) -> subprocess.Popen:
    """``command`` training a run too long to finish, in a session of its own, once it has
    written its first checkpoint (stderr piped)."""
    launcher = subprocess.Popen(
        [*command, *SMALL, "trainer.total_updates=100000"],
        cwd=folder, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_for(lambda: any(folder.glob("runs/*/checkpoints/index.json")), 120, "a checkpoint")
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
        raise
    return launcher


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("trained")
    result, _ = run(*PATHGRAD, "train", *SMALL, cwd=folder)
    assert result.returncode == 0, result.stderr
    (run_dir,) = (folder / "runs").iterdir()
    return run_dir


def test_bad_input_under_nproc_is_one_line_before_any_rank_starts(tmp_path):
    result, _ = run(*PATHGRAD, "train", "--nproc", "2", "env.num_envs=-1", cwd=tmp_path)
    assert result.returncode == 2
    assert one_line(result).startswith("pathgrad: config error: env.num_envs:")
    result, _ = run(*PATHGRAD, "train", "--nproc", "2", "--seeds", "0", "1", cwd=tmp_path)
    assert result.returncode == 2
    assert "--nproc cannot be combined with --seeds or --grid" in one_line(result)
    assert list(tmp_path.iterdir()) == []


def test_a_run_in_use_is_refused_at_once_under_nproc_and_under_torchrun(trained):
    with RunLock(trained):
        result, seconds = run(*PATHGRAD, "resume", str(trained), "--nproc", "2", cwd=trained)
        assert result.returncode == 2
        assert "is in use by another pathgrad process" in one_line(result)
        # Under the user's own torchrun rank 0 alone meets the lock; rank 1 must not wait.
        result, seconds = run(*TORCHRUN, "--nproc-per-node=2", "-m", "pathgrad", "resume",
                              str(trained), cwd=trained)  # fmt: skip
    assert result.returncode != 0
    assert seconds < 60, seconds
    assert "is in use by another pathgrad process" in result.stderr


def test_a_rank_out_of_disk_space_ends_the_job_within_seconds(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(FULL_DISK)
    env = {**ENV, "PYTHONPATH": str(tmp_path), "PATHGRAD_TEST_FULL_DISK": "1"}
    result, seconds = run(*PATHGRAD, "train", "--nproc", "2", *SMALL, cwd=tmp_path, env=env)
    assert result.returncode == 1, result.stderr[-3000:]
    assert seconds < 90, seconds  # not the 300 s collective timeout
    line = one_line(result)
    assert line.startswith("pathgrad: error: cannot write '") and "no space left" in line, line
    (run_dir,) = (tmp_path / "runs").iterdir()
    checkpoint = read_checkpoint(latest_checkpoint(run_dir / "checkpoints"))
    assert checkpoint["num_updates"] == 2 and checkpoint["data_parallel"]["world_size"] == 2


@needs_proc
@pytest.mark.parametrize("launch", ["--nproc", "torchrun"])
def test_killing_the_launcher_ends_its_ranks_with_a_final_checkpoint(tmp_path, launch):
    command = (
        [*PATHGRAD, "train", "--nproc", "2"]
        if launch == "--nproc"
        else [*TORCHRUN, "--nproc-per-node=2", "-m", "pathgrad", "train"]
    )
    launcher = start_job(tmp_path, command)
    try:
        ranks = child_pids(launcher.pid)
        assert len(ranks) == 2, ranks
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        wait_for(lambda: all(ended(pid) for pid in ranks), 90, "the ranks to end")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "terminated"
    final = read_checkpoint(latest_checkpoint(run_dir / "checkpoints"))
    assert final["kind"] == "final" and final["num_updates"] == summary["num_updates"]


@needs_proc
def test_sigterm_to_the_launcher_stops_every_rank_with_a_final_checkpoint(tmp_path):
    launcher = start_job(tmp_path, [*PATHGRAD, "train", "--nproc", "2"])
    try:
        launcher.send_signal(signal.SIGTERM)
        _, stderr = launcher.communicate(timeout=90)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode == 143, stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "terminated"
    final = read_checkpoint(latest_checkpoint(run_dir / "checkpoints"))
    assert final["kind"] == "final" and final["num_updates"] == summary["num_updates"]
    run_dir = run_dir.resolve()
    assert stderr.strip() == (  # the launcher's one line, no rank's, no agent's
        "pathgrad: terminated: every rank stopped; a final checkpoint (update "
        f"{final['num_updates']}, {latest_checkpoint(run_dir / 'checkpoints')}) is intact: "
        f"resume with `pathgrad resume {run_dir}`."
    ), stderr


@needs_proc
@pytest.mark.parametrize(("victim", "after_checkpoint", "delay"), [(0, True, 0.5), (1, False, 3.0)])
def test_a_rank_killed_under_load_ends_the_job_in_the_launchers_one_line(
    tmp_path, victim, after_checkpoint, delay
):
    # Both cores busy, so that the agent may stop the survivor before it notices: the line
    # is the launcher's, whatever the order (tests/distributed/killed_ranks.py: 20 in a row).
    with busy_cores(2):
        outcome = kill_a_rank(tmp_path, victim, delay, after_checkpoint=after_checkpoint)
    assert outcome.miss() is None, (outcome.miss(), outcome.stderr[-3000:])
    if after_checkpoint:
        assert "checkpoint (update " in outcome.stderr


@needs_proc
def test_sigterm_to_one_rank_under_the_launcher_is_one_line_with_the_final_checkpoint(tmp_path):
    launcher = start_job(tmp_path, [*PATHGRAD, "train", "--nproc", "2"])
    try:
        (rank,) = [pid for pid in child_pids(launcher.pid) if rank_of(pid) == 1]
        os.kill(rank, signal.SIGTERM)
        _, stderr = launcher.communicate(timeout=90)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(launcher.pid, signal.SIGKILL)
    assert launcher.returncode == 143, stderr
    line = one_line(subprocess.CompletedProcess([], 143, "", stderr))
    (run_dir,) = (tmp_path / "runs").iterdir()
    run_dir = run_dir.resolve()
    final = read_checkpoint(latest_checkpoint(run_dir / "checkpoints"))
    assert final["kind"] == "final"
    assert line == (
        "pathgrad: terminated: SIGTERM stopped the 2 ranks; a final "
        f"checkpoint (update {final['num_updates']}, {latest_checkpoint(run_dir / 'checkpoints')}"
        f") is intact: resume with `pathgrad resume {run_dir}`."
    )


def rank_of(pid: int) -> int | None:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    values = dict(item.split(b"=", 1) for item in environ if b"=" in item)
    return int(values[b"RANK"]) if b"RANK" in values else None
