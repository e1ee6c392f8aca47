"""Faults of eval, export, render and pathgrad.load: one line on stderr, exit 2, nothing left."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

import pathgrad
import warm_processes
from helpers import copy_run, train_run
from pathgrad.checkpoint import latest_checkpoint
from pathgrad.cli import main
from pathgrad.core import atomic_files
from pathgrad.runs.errors import UsageError

PATHGRAD = str(Path(sys.executable).parent / "pathgrad")
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
FAST = ["trainer.total_updates=6", "eval.frequency_steps=4096", "env.num_envs=16", "--quiet"]
OUTPUTS = {"eval": [], "export": ["-o", "policy.pt2"], "render": ["-o", "rollout.gif"]}

# A child process, as torch's zip writer aborts the process it runs in on a failing write.
FULL_DISK = """
import errno, os, sys
from pathgrad.core import atomic_files
from pathgrad.cli import main

class Full:
    def __init__(self, handle): self.handle = handle
    def __enter__(self): return self
    def __exit__(self, *exc_info): self.handle.close()
    def __getattr__(self, name): return getattr(self.handle, name)
    def write(self, data): raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

class FullDiskOs:
    def __getattr__(self, name): return getattr(os, name)
    def fdopen(self, *args, **kwargs): return Full(os.fdopen(*args, **kwargs))

atomic_files.os = FullDiskOs()
sys.exit(main(sys.argv[1:]))
"""


def pathgrad_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return warm_processes.run([PATHGRAD, *args], cwd=cwd, env=ENV)


def one_line(stderr: str, *fragments: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    for fragment in fragments:
        assert fragment.lower() in lines[0].lower(), (fragment, lines[0])
    return lines[0]


def run_main(capfd, *args: str) -> tuple[int, str]:
    status = main(list(args))
    return status, capfd.readouterr().err


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    return train_run(tmp_path_factory.mktemp("trained"), *FAST)


@pytest.fixture
def run_copy(trained, tmp_path) -> Path:
    return copy_run(trained, tmp_path)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("name", ["policy.pt2", "policy.onnx"])
def test_export_on_a_full_disk_is_one_line_and_leaves_no_file(trained, tmp_path, name):
    output = tmp_path / "out" / name
    output.parent.mkdir()
    result = warm_processes.run(
        [sys.executable, "-c", FULL_DISK, "export", str(trained), "-o", str(output)],
        cwd=tmp_path, env=ENV,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    one_line(result.stderr, str(output), "no space left on device")
    assert list(output.parent.iterdir()) == []


def test_export_into_a_read_only_folder_is_one_line(trained, in_tmp, capfd, monkeypatch):
    def read_only(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), kwargs.get("dir"))

    monkeypatch.setattr(atomic_files, "tempfile", types.SimpleNamespace(mkstemp=read_only))
    status, stderr = run_main(capfd, "export", str(trained), "-o", "locked/policy.pt2")
    assert status == 2
    one_line(stderr, "locked/policy.pt2", "permission denied")
    assert [path.name for path in in_tmp.iterdir()] == ["locked"]
    assert list((in_tmp / "locked").iterdir()) == []


@pytest.mark.parametrize("name", ["rollout.gif", "rollout.mp4"])
def test_render_into_an_unwritable_folder_prints_only_pathgrad_s_line(trained, tmp_path, name):
    if name.endswith(".mp4"):
        pytest.importorskip("imageio_ffmpeg")
    output = f"/proc/{name}"  # unwritable even for root
    result = pathgrad_cli("render", str(trained), "-o", output, "--every", "50", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    one_line(result.stderr, "pathgrad: error:", output)
    assert result.stdout == ""


def test_a_failing_ffmpeg_is_one_line_of_its_last_words(trained, in_tmp, capfd, monkeypatch):
    import pathgrad.rendering

    ffmpeg = in_tmp / "ffmpeg"
    ffmpeg.write_text("#!/bin/sh\necho 'frame=1' >&2\necho 'No space left on device' >&2\nexit 1\n")
    ffmpeg.chmod(0o755)
    monkeypatch.setattr(pathgrad.rendering, "_ffmpeg", lambda: str(ffmpeg))
    status, stderr = run_main(capfd, "render", str(trained), "-o", "out/rollout.mp4",
                              "--every", "50")  # fmt: skip
    assert status == 2
    one_line(stderr, "out/rollout.mp4", "ffmpeg", "no space left on device")
    assert list((in_tmp / "out").iterdir()) == []


def test_render_creates_missing_output_folders_as_export_and_plot_do(trained, in_tmp, capfd):
    for command, name in (("render", "rollout.gif"), ("export", "policy.pt2")):
        output = in_tmp / command / "new" / name
        status, stderr = run_main(capfd, command, str(trained), "-o", str(output),
                                  *(["--every", "50"] if command == "render" else []))  # fmt: skip
        assert status == 0, stderr
        assert output.is_file()
        assert [path.name for path in output.parent.iterdir()] == [name]  # no temporary left


@pytest.mark.parametrize("case", ["empty", "other files", "checkpoints folder"])
@pytest.mark.parametrize("command", list(OUTPUTS))
def test_a_folder_that_is_not_a_run_is_named_as_such(trained, in_tmp, capfd, command, case):
    if case == "checkpoints folder":
        target = Path(shutil.copytree(trained / "checkpoints", in_tmp / "target"))
    else:
        target = in_tmp / "target"
        target.mkdir()
        if case == "other files":
            (target / "notes.txt").write_text("not a run")
    status, stderr = run_main(capfd, command, str(target), *OUTPUTS[command])
    assert status == 2
    line = one_line(stderr, str(target), "is not a run directory", "config.yaml",
                    "a run directory", "a checkpoint file")  # fmt: skip
    assert "index.json" not in line
    assert [path.name for path in in_tmp.iterdir()] == ["target"]


def test_a_run_without_checkpoints_says_so(run_copy, in_tmp, capfd):
    checkpoints = run_copy / "checkpoints"
    kept = in_tmp / "kept.pt"
    shutil.move(next(checkpoints.glob("*final*.pt")), kept)
    (checkpoints / "index.json").unlink()
    for command in OUTPUTS:  # checkpoint files but no index: one of them is named
        status, stderr = run_main(capfd, command, str(run_copy), *OUTPUTS[command])
        assert status == 2
        one_line(stderr, str(run_copy), "no index.json", "best_step_3072.pt")
    shutil.rmtree(checkpoints)
    for command in OUTPUTS:
        status, stderr = run_main(capfd, command, str(run_copy), *OUTPUTS[command])
        assert status == 2
        line = one_line(stderr, str(run_copy), "has no checkpoint yet", "a checkpoint file")
        assert "index.json" not in line
    assert sorted(path.name for path in in_tmp.iterdir()) == ["kept.pt", "run"]


def set_config(run_dir: Path, section: str, key: str, value) -> None:
    path = run_dir / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config[section][key] = value
    path.write_text(yaml.safe_dump(config))


def test_a_latest_checkpoint_of_another_env_is_refused(run_copy, in_tmp, capfd):
    set_config(run_copy, "env", "name", "Pendulum")  # the run says Pendulum, its files PointMass
    latest = latest_checkpoint(run_copy / "checkpoints")
    for command in OUTPUTS:
        status, stderr = run_main(capfd, command, str(run_copy), *OUTPUTS[command])
        assert status == 2
        one_line(stderr, str(latest), "PointMass", "Pendulum")
    with pytest.raises(UsageError, match="Pendulum"):
        pathgrad.load(run_copy)
    assert [path.name for path in in_tmp.iterdir()] == ["run"]
    status, stderr = run_main(capfd, "eval", str(latest), "--episodes", "2", "--json")
    assert status == 0, stderr  # the file itself, asked for by name, is still used


def test_a_latest_checkpoint_of_other_policy_sizes_is_refused(run_copy, capfd):
    set_config(run_copy, "policy", "hidden_sizes", [32])
    status, stderr = run_main(capfd, "eval", str(run_copy))
    assert status == 2
    one_line(stderr, "policy.hidden_sizes", "[64, 64]", "[32]")
    with pytest.raises(UsageError, match="hidden_sizes"):
        pathgrad.load(run_copy)


def test_usage_error_is_a_value_error(in_tmp):
    assert issubclass(UsageError, ValueError)
    with pytest.raises(UsageError, match="is not a run directory"):
        pathgrad.load(in_tmp)
