"""Shipped configs: package data, found by name from any folder, listed by `pathgrad configs`."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import warm_processes
from helpers import ROOT
from pathgrad.runs.builtin_configs import CONFIG_FOLDER, builtin_config_names, resolve_config

PATHGRAD = str(Path(sys.executable).parent / "pathgrad")
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def pathgrad(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return warm_processes.run([PATHGRAD, *args], cwd=cwd, env=ENV)


def test_the_clone_s_configs_folder_is_the_shipped_one():
    assert (ROOT / "configs").resolve() == CONFIG_FOLDER.resolve()
    assert "point_mass" in builtin_config_names() and "reacher_shac" in builtin_config_names()


def test_a_config_s_name_works_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argument in ("reacher", "reacher.yaml", "configs/reacher.yaml"):
        assert resolve_config(argument) == CONFIG_FOLDER / "reacher.yaml", argument
    assert resolve_config("elsewhere/reacher.yaml") is None
    assert resolve_config("nothing") is None
    (tmp_path / "configs").mkdir()
    mine = tmp_path / "configs" / "reacher.yaml"
    mine.write_text("env: {name: Pendulum}\n")
    assert resolve_config("configs/reacher.yaml") == Path("configs/reacher.yaml")  # a file wins
    printed = pathgrad("train", "pendulum_shac", "--print-config", cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    assert "name: Pendulum" in printed.stdout and "name: shac" in printed.stdout
    local = pathgrad("train", "configs/reacher.yaml", "--print-config", cwd=tmp_path)
    assert "name: Pendulum" in local.stdout
    missing = pathgrad("train", "nothing_like_it", cwd=tmp_path)
    assert missing.returncode == 2
    assert "`pathgrad configs` lists them" in missing.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["configs"]


def test_pathgrad_configs_lists_every_shipped_config(tmp_path):
    result = pathgrad("configs", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for name in builtin_config_names():
        assert name in result.stdout
    assert "NewtonAnt" in result.stdout and "shac" in result.stdout


def test_the_wheel_carries_the_configs(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation",
         "-q", "-w", str(tmp_path)],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("pathgrad-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {Path(name).stem for name in names if name.startswith("pathgrad/configs/")}
    assert shipped == set(builtin_config_names())
