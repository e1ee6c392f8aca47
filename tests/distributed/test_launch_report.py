"""The launcher's last line: which rank ended the job, whatever order the ranks ended in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pathgrad.distributed.launch_report import (
    LOST_CONTACT_EXIT,
    announce_run_dir,
    announced_run_dir,
    failure_report,
    signal_report,
)


def run_with_checkpoints(root: Path, *kinds: str) -> Path:
    run_dir = root / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    entries = []
    for update, kind in enumerate(kinds, start=1):
        name = f"step_{update}.pt"
        (run_dir / "checkpoints" / name).write_bytes(b"x")
        entries.append({"file": name, "num_updates": update, "kind": kind})
    (run_dir / "checkpoints" / "index.json").write_text(json.dumps({"checkpoints": entries}))
    return run_dir


@pytest.mark.parametrize(
    "codes",
    [
        {1: -9},  # the agent saw the killed rank alone
        {1: -9, 0: 143},  # ... and then stopped the survivor
        {0: LOST_CONTACT_EXIT, 1: -9},  # the survivor noticed first
        {0: 143, 1: -9, 2: LOST_CONTACT_EXIT},
        {1: -9, 0: -9},  # the survivor outlived the agent's SIGTERM: the first seen is named
    ],
)
def test_the_killed_rank_is_named_whoever_noticed_first(tmp_path, codes):
    run_dir = run_with_checkpoints(tmp_path, "periodic", "periodic")
    nproc = max(codes) + 1
    line, status = failure_report(codes, nproc, run_dir)
    others = ", ".join(f"rank {r}" for r in range(nproc) if r != 1)
    verb = "was" if nproc == 2 else "were"
    assert line == (
        f"pathgrad: error: rank 1 of {nproc} was killed by SIGKILL; {others} {verb} stopped; "
        f"the last checkpoint (update 2, {run_dir / 'checkpoints' / 'step_2.pt'}) is intact: "
        f"resume with `pathgrad resume {run_dir}`."
    )
    assert status == 137


def test_within_a_kind_the_rank_the_agent_saw_end_first_is_named():
    line, _ = failure_report({1: -9, 0: -9}, 2, None)
    assert line.startswith("pathgrad: error: rank 1 of 2 was killed by SIGKILL; rank 0 was")
    line, _ = failure_report({0: -9, 1: -9}, 2, None)
    assert line.startswith("pathgrad: error: rank 0 of 2 was killed by SIGKILL; rank 1 was")


def test_a_rank_that_said_its_error_is_not_repeated_and_keeps_its_status():
    assert failure_report({0: 1, 1: LOST_CONTACT_EXIT}, 2, None) == (None, 1)
    assert failure_report({0: 2, 1: 2}, 2, None) == (None, 2)  # bad input, said by rank 0
    assert failure_report({1: 1, 0: 143}, 2, None) == (None, 1)  # the agent stopped rank 0


def test_a_stop_signal_a_status_of_its_own_and_lost_contact_alone(tmp_path):
    run_dir = run_with_checkpoints(tmp_path, "periodic", "final")
    line, status = failure_report({1: 143, 0: 143}, 2, run_dir)
    assert status == 143 and line.startswith(
        "pathgrad: terminated: SIGTERM stopped the 2 ranks; a final checkpoint (update 2, "
    )
    line, status = failure_report({1: 7, 0: 143}, 2, None)
    assert status == 7 and line == (
        "pathgrad: error: rank 1 of 2 exited with status 7; rank 0 was stopped; no run "
        "directory is left (the job ended before its first update)."
    )
    line, status = failure_report({0: LOST_CONTACT_EXIT, 1: LOST_CONTACT_EXIT}, 2, None)
    assert status == 1 and "the 2 ranks lost contact with each other" in line


def test_a_run_without_checkpoints_or_with_a_broken_index(tmp_path):
    run_dir = run_with_checkpoints(tmp_path)
    line, _ = failure_report({0: -15}, 2, run_dir)
    assert line.endswith(
        f"no checkpoint was written yet: `pathgrad resume {run_dir}` starts the run again "
        "from the beginning."
    )
    (run_dir / "checkpoints" / "index.json").write_text("{not json")
    assert failure_report({0: -15}, 2, run_dir)[0] == line  # never raises


def test_the_launchers_own_signal(tmp_path):
    assert signal_report(2, None) == (
        "pathgrad: interrupted: every rank stopped; no run directory is left (the job ended "
        "before its first update).",
        130,
    )
    assert signal_report(15, None)[1] == 143


def test_rank_0_announces_its_run_directory_to_the_launcher(tmp_path, monkeypatch):
    note = tmp_path / "note"
    assert announced_run_dir(note) is None
    monkeypatch.setenv("PATHGRAD_LAUNCH_RUN_DIR_FILE", str(note))
    monkeypatch.setenv("RANK", "1")
    announce_run_dir(tmp_path / "runs" / "a")
    assert announced_run_dir(note) is None  # only rank 0 writes
    monkeypatch.setenv("RANK", "0")
    announce_run_dir(tmp_path / "runs" / "a")
    assert announced_run_dir(note) == (tmp_path / "runs" / "a").resolve()
