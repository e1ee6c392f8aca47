"""Kill or signal a training run at chosen instants, resume it, compare with an uninterrupted run.

After a SIGKILL anywhere (inside a checkpoint write, between a checkpoint and
its index entry, during an evaluation, after a metrics line) or a handled
SIGINT/SIGTERM, ``pathgrad resume`` must leave metrics.jsonl, summary.json,
the TensorBoard scalars and the checkpoints equal to those of a run that was
never interrupted.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import warm_processes
from helpers import TESTS
from pathgrad.checkpoint import read_checkpoint, read_index

PATHGRAD = str(Path(sys.executable).parent / "pathgrad")
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
# 7 updates of 8 envs x 16 steps; evaluations every 2 updates and of the final policy,
# periodic saves every 3 updates: every kind of record and file is written.
RUN = [
    "train",
    "trainer.total_updates=7",
    "env.num_envs=8",
    "trainer.segment_length=16",
    "trainer.save_frequency_updates=3",
    "trainer.normalize_observations=true",
    "policy.hidden_sizes=[16]",
    "eval.frequency_steps=256",
    "eval.num_envs=4",
    "eval.episodes=4",
    "--quiet",
]
TIMING = {"time", "charts/SPS", "elapsed_time_sec", "training_fps", "saved_at"}


def run_command(args: list[str], cwd: Path, fault: tuple[str, int] | None = None) -> int:
    command = [PATHGRAD, *args]
    if fault is not None:
        script = str(TESTS / "fault_run.py")
        command = [sys.executable, script, fault[0], str(fault[1]), "--", *args]
    result = warm_processes.run(command, cwd=cwd, env=ENV)  # a process of its own, started warm
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode


def only_run(folder: Path) -> Path:
    (run_dir,) = (folder / "runs").iterdir()
    return run_dir


def without_timing(value):
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [without_timing(item) for item in value]
    if isinstance(value, str) and value.endswith(".pt"):
        return Path(value).name  # run directories differ by their time stamp
    return value


def outcome(run_dir: Path) -> dict:
    """Everything a finished run leaves, with wall-clock values left out."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    scalars = {
        tag: [(e.step, None if tag == "charts/SPS" else e.value) for e in events.Scalars(tag)]
        for tag in events.Tags()["scalars"]
    }
    entries = read_index(run_dir / "checkpoints")
    kept = [e for e in entries if e["kind"] != "final"] + entries[-1:]
    checkpoints = {}
    for entry in kept:
        checkpoint = read_checkpoint(run_dir / "checkpoints" / entry["file"])
        checkpoints[entry["file"]] = {
            "entry": without_timing(entry),
            "policy": checkpoint["policy"],
            "optimizer": checkpoint["algorithm"]["optimizer"]["state"],
            "normalizer": checkpoint["observation_normalizer"]["mean"],
            "env": checkpoint["env"]["state"],
            "rng": checkpoint["rng"]["torch"],
        }
    return {
        "records": without_timing(records),
        "summary": without_timing(summary),
        "scalars": scalars,
        "checkpoints": checkpoints,
        "files": sorted(p.name for p in (run_dir / "checkpoints").glob("*.pt")),
    }


def assert_same(resumed: dict, reference: dict) -> None:
    assert resumed["records"] == reference["records"]
    assert resumed["summary"] == reference["summary"]
    assert resumed["scalars"] == reference["scalars"]
    assert list(resumed["checkpoints"]) == list(reference["checkpoints"])
    for name, expected in reference["checkpoints"].items():
        got = resumed["checkpoints"][name]
        assert got["entry"] == expected["entry"], name
        for part in ("policy", "env"):
            for key, tensor in expected[part].items():
                assert torch.equal(got[part][key], tensor), (name, part, key)
        assert torch.equal(got["normalizer"], expected["normalizer"]), name
        assert torch.equal(got["rng"], expected["rng"]), name
        for index, state in expected["optimizer"].items():
            for key, tensor in state.items():
                assert torch.equal(got["optimizer"][index][key], tensor), (name, index, key)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("reference")
    assert run_command(RUN, folder) == 0
    return outcome(only_run(folder))


FAULTS = [
    ("kill_after_update", 1, -9),  # before any checkpoint: resume starts over
    ("kill_after_update", 3, -9),  # before the periodic save of update 3
    ("kill_after_update", 4, -9),  # before the evaluation of update 4
    ("kill_in_replace", 2, -9),  # inside the first checkpoint write
    ("kill_in_replace", 5, -9),
    ("kill_after_replace", 2, -9),  # a checkpoint in place, its index entry not
    ("kill_after_replace", 4, -9),
    ("kill_in_eval", 2, -9),
    ("sigterm_in_eval", 1, 143),  # the evaluation is lost and done again after resume
    ("sigterm_in_eval", 4, 143),  # the final evaluation
    ("sigint_in_update", 5, 130),  # the update is recorded, its post-update work pending
    ("kill_in_final_save", 1, -9),  # after the final evaluation, before the final checkpoint
]


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "count", "code"), FAULTS)
def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path, reference, fault, count, code):
    assert run_command(RUN, tmp_path, (fault, count)) == code
    run_dir = only_run(tmp_path)
    for _ in range(3):
        summary = run_dir / "summary.json"
        if summary.is_file() and json.loads(summary.read_text())["status"] == "completed":
            break
        assert run_command(["resume", str(run_dir), "--quiet"], tmp_path) == 0
    assert not list(run_dir.rglob("*.tmp"))
    assert_same(outcome(run_dir), reference)


@pytest.mark.slow
def test_resuming_a_completed_run_changes_nothing(tmp_path, reference):
    assert run_command(RUN, tmp_path) == 0
    run_dir = only_run(tmp_path)
    assert run_command(["resume", str(run_dir), "--quiet"], tmp_path) == 0
    resumed = outcome(run_dir)
    assert resumed["summary"]["last_train_metrics"]["num_updates"] == 7
    assert_same(resumed, reference)
