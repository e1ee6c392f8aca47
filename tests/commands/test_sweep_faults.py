"""Faults of a sweep: signals, kill -9, finishing it, cells that cannot start, naming."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pathgrad.cli import main
from pathgrad.commands import UsageError
from pathgrad.commands.sweep import sweep_combinations
from pathgrad.commands.sweep_record import cell_names, run_dir_state
from pathgrad.runs.run import read_metrics

PATHGRAD = [sys.executable, "-m", "pathgrad"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
QUICK = ["env.num_envs=16", "eval.frequency_steps=512", "eval.episodes=4", "eval.num_envs=4",
         "logging.tensorboard=false"]  # fmt: skip
FAST = ["trainer.total_updates=3", *QUICK]
# Runs that last until a signal; a checkpoint every 20 updates shows they are training.
LONG = ["trainer.total_updates=100000", "env.num_envs=16", "eval.frequency_steps=0",
        "logging.tensorboard=false", "trainer.save_frequency_updates=20",
        "trainer.keep_last_checkpoints=2"]  # fmt: skip


def _processes(test) -> list[int]:
    """Other processes for which ``test(/proc/PID)`` holds."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if test(entry):
                    found.append(int(entry.name))
    return sorted(found)


def sweep_runs(sweep_dir: Path) -> list[int]:
    """A sweep's runs, however started: the processes whose stderr is a log in ``sweep_dir``."""
    return _processes(lambda entry: Path(os.readlink(entry / "fd" / "2")).parent == sweep_dir)


def processes_in(folder: Path) -> list[int]:
    """The processes working under ``folder`` (a test's sweeps, their runs and helpers)."""
    return _processes(lambda entry: Path(os.readlink(entry / "cwd")).is_relative_to(folder))


@pytest.fixture
def sweeps(tmp_path):
    """Sweep processes a test starts; they and their runs are killed at its end."""
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    for pid in processes_in(tmp_path):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL) if os.getpgid(pid) == pid else os.kill(pid, 9)


def start_sweep(sweeps: list, cwd: Path, *args: str) -> subprocess.Popen:
    process = subprocess.Popen([*PATHGRAD, "train", *args], cwd=cwd, env=ENV, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)  # fmt: skip
    sweeps.append(process)
    return process


def pathgrad(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*PATHGRAD, *args], cwd=cwd, env=ENV, capture_output=True, text=True)


def wait_for(condition, what: str, timeout: float = 120.0, process=None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the sweep ended before {what}: {process.communicate()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def summary(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}


def record(sweep_dir: Path) -> dict:
    return json.loads((sweep_dir / "sweep.json").read_text())


def one_line(stderr: str, *fragments: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


SEEDED = ["seed=0", "seed=1", "seed=2"]


def start_long_sweep(sweeps: list, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    """Three cells two at a time, until both running runs have saved a checkpoint."""
    sweep_dir = tmp_path / "sweep"
    process = start_sweep(sweeps, tmp_path, *LONG, "--seeds", "0", "1", "2", "--jobs", "2",
                          "--sweep-dir", str(sweep_dir))  # fmt: skip
    saved = [sweep_dir / name / "checkpoints" / "index.json" for name in SEEDED[:2]]
    wait_for(lambda: all(path.is_file() for path in saved), "two checkpoints", process=process)
    return process, sweep_dir


def finish_with_budget(sweep_dir: Path, tmp_path: Path) -> None:
    """``pathgrad resume SWEEP --total-updates N`` finishes every cell, the cut ones resumed."""
    done = {name: summary(sweep_dir / name).get("num_updates", 0) for name in SEEDED}
    budget = max(done.values()) + 4
    result = pathgrad("resume", str(sweep_dir), "--total-updates", str(budget), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert [cell["state"] for cell in record(sweep_dir)["cells"]] == ["completed"] * 3
    assert record(sweep_dir)["budget"] == {"total_updates": budget}
    for name in SEEDED:
        assert summary(sweep_dir / name)["status"] == "completed"
        updates = [r["num_updates"] for r in read_metrics(sweep_dir / name) if r["kind"] == "train"]
        assert updates == list(range(1, budget + 1)), name  # continued, not started again
        invocations = json.loads((sweep_dir / name / "provenance.json").read_text())["invocations"]
        assert [entry["command"] for entry in invocations] == (
            ["train", "resume"] if done[name] else ["train"]
        )
    again = pathgrad("resume", str(sweep_dir), cwd=tmp_path)
    assert again.returncode == 0 and "(3 already finished)" in again.stdout


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_the_sweep_reaches_every_run_and_no_other_starts(tmp_path, sweeps, signum):
    process, sweep_dir = start_long_sweep(sweeps, tmp_path)
    runs = sweep_runs(sweep_dir)
    assert len(runs) == 2 and all(os.getsid(pid) == pid for pid in runs)  # own sessions
    process.send_signal(signum)  # the sweep alone, as Ctrl-C at a terminal would now
    _, stderr = process.communicate(timeout=120)
    word, status = ("interrupted", 130) if signum == signal.SIGINT else ("terminated", 143)
    assert process.returncode == status, stderr
    one_line(stderr, f"pathgrad: sweep {word};", str(sweep_dir), f"pathgrad resume {sweep_dir}")
    assert sweep_runs(sweep_dir) == []
    wait_for(lambda: not processes_in(tmp_path), "the sweep's helpers to end", timeout=10)
    states = [cell["state"] for cell in record(sweep_dir)["cells"]]
    assert states == [word, word, "pending"]
    for name in SEEDED[:2]:
        final = summary(sweep_dir / name)
        assert final["status"] == word and "final" in Path(final["latest_checkpoint_path"]).name
        assert Path(final["latest_checkpoint_path"]).is_file()
    assert not (sweep_dir / SEEDED[2]).exists()  # no cell started after the signal
    if signum == signal.SIGTERM:
        finish_with_budget(sweep_dir, tmp_path)


def test_kill_9_of_the_sweep_leaves_no_orphans_and_resume_finishes_it(tmp_path, sweeps):
    process, sweep_dir = start_long_sweep(sweeps, tmp_path)
    assert len(sweep_runs(sweep_dir)) == 2
    process.kill()
    process.wait()
    wait_for(lambda: not processes_in(tmp_path), "the runs and helpers to end by themselves")
    for name in SEEDED[:2]:
        assert summary(sweep_dir / name)["status"] == "terminated"  # final checkpoint written
    assert [cell["state"] for cell in record(sweep_dir)["cells"]] == ["running"] * 2 + ["pending"]
    finish_with_budget(sweep_dir, tmp_path)  # from the run directories, not the stale record


def test_the_same_command_with_sweep_dir_runs_only_the_missing_cells(tmp_path, capfd):
    sweep_dir = tmp_path / "sweep"
    args = ["train", *FAST, "--seeds", "0", "1", "--grid", "algorithm.cfg.gamma=0.95,0.99",
            "--jobs", "2", "--sweep-dir", str(sweep_dir)]  # fmt: skip
    first = pathgrad(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    names = ["gamma=0.95_seed=0", "gamma=0.95_seed=1", "gamma=0.99_seed=0", "gamma=0.99_seed=1"]
    assert sorted(path.name for path in sweep_dir.iterdir() if path.is_dir()) == names
    for row in ("| gamma=0.95 | 0 | completed | 3 |", "| gamma=0.99 | 1 | completed | 3 |"):
        assert row in first.stdout
    cells = record(sweep_dir)["cells"]
    assert cells[1] == {**cells[1], "grid": {"algorithm.cfg.gamma": "0.95"}, "seed": 1,
                        "overrides": ["algorithm.cfg.gamma=0.95", "trainer.seed=1"],
                        "run_dir": "gamma=0.95_seed=1", "state": "completed"}  # fmt: skip
    shutil.rmtree(sweep_dir / names[3])  # never started
    cut = sweep_dir / names[1]
    (cut / "summary.json").write_text(json.dumps({**summary(cut), "status": "terminated"}))
    kept = {name: (sweep_dir / name / "summary.json").read_bytes() for name in names[::2]}
    second = pathgrad(*args, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "(2 already finished)" in second.stdout
    assert {name: (sweep_dir / name / "summary.json").read_bytes() for name in names[::2]} == kept
    assert summary(sweep_dir / names[3])["status"] == "completed"
    invocations = json.loads((cut / "provenance.json").read_text())["invocations"]
    assert [entry["command"] for entry in invocations] == ["train", "resume"]
    assert summary(cut)["status"] == "completed"
    everything = {path: path.read_bytes() for path in sweep_dir.rglob("*") if path.is_file()
                  and path.name not in ("sweep.json", ".lock")}  # fmt: skip
    resumed = pathgrad("resume", str(sweep_dir), cwd=tmp_path)
    assert resumed.returncode == 0 and "(4 already finished)" in resumed.stdout
    assert {path: path.read_bytes() for path in everything} == everything
    grid = args.index("--grid") + 1
    for changed, fragment in (
        ({args.index("1"): "1 2"}, "--seeds 0 1 2 (recorded: 0 1)"),
        ({grid: "algorithm.cfg.gamma=0.9"}, "--grid algorithm.cfg.gamma=0.9 (recorded: "),
        ({1: f"{args[1]} algorithm.cfg.max_grad_norm=0.5"}, "the overrides "),
    ):
        other = [part for i, arg in enumerate(args) for part in changed.get(i, arg).split(" ")]
        assert main(other) == 2
        one_line(capfd.readouterr().err, str(sweep_dir), fragment)


@pytest.mark.parametrize("sweep_dir", [None, "chosen"])
def test_a_cell_whose_warmup_exceeds_its_budget_stops_the_sweep_before_any_run(tmp_path, sweep_dir):
    where = [] if sweep_dir is None else ["--sweep-dir", str(tmp_path / sweep_dir)]
    result = pathgrad("train", *QUICK, "algorithm.cfg.lr_scheduler.warmup_updates=2",
                      "--seeds", "0", "--grid", "trainer.total_updates=3,2", *where,
                      cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2
    one_line(result.stderr, "sweep cell trainer.total_updates=2 trainer.seed=0",
             "warmup_updates (2) must be smaller")  # fmt: skip
    assert sorted(path.name for path in tmp_path.iterdir()) == []  # no sweep folder, no run


def test_cells_are_named_readably_uniquely_and_safely():
    def cells(grid: dict[str, list[str]]) -> list[dict]:
        keys = list(grid)
        rows = [[]]
        for key in keys:
            rows = [[*row, value] for row in rows for value in grid[key]]
        return [{"grid": dict(zip(keys, row, strict=True)), "seed": 0} for row in rows]

    values = ["{name: linear, warmup: 10}", "x/../y", "A", "a"]
    names = cell_names(cells({"algorithm.cfg.lr_scheduler": values}), True)
    assert [name for _, name in names] == [
        "lr_scheduler=name_linear_warmup_10_seed=0",
        "lr_scheduler=x_.._y_seed=0",
        "lr_scheduler=A_seed=0",
        "lr_scheduler=a_seed=0-2",  # unique on case-insensitive file systems
    ]
    assert names[0][0] == "lr_scheduler={name: linear, warmup: 10}"
    clash = cell_names(cells({"algorithm.cfg.lr": ["1"], "critic.lr": ["2"]}), False)
    assert clash == [("algorithm.cfg.lr=1 critic.lr=2", "algorithm.cfg.lr=1_critic.lr=2")]
    (long,) = cell_names(cells({"k": ["v" * 300]}), True)
    assert len(long[1]) < 60 and long[1].endswith("_seed=0") and "/" not in long[1]


def test_a_grid_key_given_twice_is_refused():
    with pytest.raises(UsageError, match="given twice"):
        sweep_combinations(None, ["a=1", "a=2"])


def test_resuming_a_sweep_refuses_nproc_and_a_bad_record(tmp_path, capfd):
    (tmp_path / "sweep.json").write_text('{"version": 1, "cells": []}')
    assert main(["resume", str(tmp_path), "--nproc", "2"]) == 2
    one_line(capfd.readouterr().err, "--nproc cannot be used with a sweep")
    assert main(["resume", str(tmp_path)]) == 2
    one_line(capfd.readouterr().err, "is not a pathgrad sweep record")
    (tmp_path / "sweep.json").write_text("{")
    assert main(["resume", str(tmp_path)]) == 2
    one_line(capfd.readouterr().err, "cannot read")


def _record(**changes):
    cell = {"grid": {}, "seed": 0, "overrides": ["trainer.seed=0"], "state": "pending",
            "label": "seed=0", "run_dir": "seed=0"}  # fmt: skip
    cells = [{**cell, **changes.pop("cell", {})}, *changes.pop("more_cells", [])]
    return {"version": 1, "config": None, "overrides": [], "grid": [], "seeds": [0],
            "cells": cells, **changes}  # fmt: skip


@pytest.mark.parametrize(
    "record, problem",
    [
        (_record(cell={"state": "bogus"}), 'cells[0].state is "bogus", expected one of pending'),
        (_record(cell={"overrides": "trainer.seed=0"}),
         'cells[0].overrides is "trainer.seed=0", expected a list of key=value strings'),
        (_record(cell={"run_dir": "../elsewhere"}), "cells[0].run_dir is \"../elsewhere\", "
         "expected a folder name inside the sweep folder"),
        (_record(more_cells=[_record()["cells"][0]]), 'cells[1].run_dir "seed=0" is another'),
        (_record(jobs=0), "jobs is 0, expected a positive integer"),
        (_record(budget={"total_updates": "5"}), "budget is {\"total_updates\": \"5\"}"),
        ({k: v for k, v in _record().items() if k != "config"}, "it has no config"),
        (_record(version=True), "its version is true"),
    ],
)  # fmt: skip
def test_a_malformed_sweep_record_is_named_by_its_field(tmp_path, capfd, record, problem):
    (tmp_path / "sweep.json").write_text(json.dumps(record))
    assert main(["resume", str(tmp_path)]) == 2
    message = one_line(capfd.readouterr().err, "is not a pathgrad sweep record (version 1): ")
    assert problem in message
    assert sorted(path.name for path in tmp_path.iterdir()) == ["sweep.json"]


def test_plot_of_a_sweep_folder_s_glob_skips_its_sweep_json(tmp_path, capfd):
    sweep_dir = tmp_path / "sweep"
    for seed in (0, 1):
        run_dir = sweep_dir / f"seed={seed}"
        run_dir.mkdir(parents=True)
        (run_dir / "config.yaml").write_text(f"trainer: {{seed: {seed}}}\n")
        lines = [{"kind": "eval", "time": float(step), "global_step": float(step),
                  "eval/avg_reward": float(seed + step)} for step in (1, 2, 3)]  # fmt: skip
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (sweep_dir / "sweep.json").write_text("{}")
    paths = sorted(str(path) for path in sweep_dir.glob("*"))  # what the shell's * gives
    status = main(["plot", *paths, "--aggregate", "median", "-o", str(tmp_path / "c.png")])
    assert status == 0, capfd.readouterr().err


def test_what_a_cell_needs_is_read_from_its_run_directory(tmp_path):
    run_dir = tmp_path / "cell"
    assert run_dir_state(run_dir) == "new"
    run_dir.mkdir()
    assert run_dir_state(run_dir) == "new"
    (run_dir / ".lock").write_text("123\n")  # killed before its config.yaml was written
    assert run_dir_state(run_dir) == "new" and not any(run_dir.iterdir())
    (run_dir / "config.yaml").write_text("{}\n")  # killed before its first checkpoint
    assert run_dir_state(run_dir) == "cut"
    for status, state in (("terminated", "cut"), ("failed", "cut"), ("completed", "finished"),
                          ("stopped early", "finished"), ("diverged", "finished")):  # fmt: skip
        (run_dir / "summary.json").write_text(json.dumps({"status": status}))
        assert run_dir_state(run_dir) == state, status
    (run_dir / "config.yaml").unlink()
    (run_dir / "summary.json").unlink()
    (run_dir / "metrics.jsonl").write_text("")
    with pytest.raises(UsageError, match="no config.yaml"):
        run_dir_state(run_dir)


def test_a_sweep_budget_below_a_cell_s_work_is_refused_and_changes_nothing(tmp_path, capfd):
    sweep_dir = tmp_path / "sweep"
    args = ["train", "trainer.total_updates=2", "env.num_envs=8", "eval.frequency_steps=0",
            "logging.tensorboard=false", "--sweep-dir", str(sweep_dir), "--quiet",
            "--seeds", "0", "1"]  # fmt: skip
    assert main(args) == 0
    capfd.readouterr()
    before = (sweep_dir / "sweep.json").read_text()
    assert main(["resume", str(sweep_dir), "--total-updates", "1"]) == 2
    refusal = ("--total-updates 1 is below the 2 updates sweep cell trainer.seed=0 (seed=0) "
               "has done; give at least 2 (nothing was changed).")  # fmt: skip
    one_line(capfd.readouterr().err, refusal)
    assert (sweep_dir / "sweep.json").read_text() == before
    assert main(["resume", str(sweep_dir), "--quiet"]) == 0  # still a finished sweep
    assert {cell["state"] for cell in record(sweep_dir)["cells"]} == {"completed"}
    capfd.readouterr()
    assert main(["plot", str(sweep_dir)]) == 2  # the folder, not its runs: said how
    one_line(capfd.readouterr().err, f"`pathgrad plot {sweep_dir}/* --aggregate median`")
