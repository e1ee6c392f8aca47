"""A Newton env's relative model file is found beside its module; a missing one is one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import warm_processes

pytest.importorskip("newton")

from pathgrad.envs.newton.robots.reacher import ASSET  # noqa: E402

PATHGRAD = str(Path(sys.executable).parent / "pathgrad")
MODULE = textwrap.dedent(
    """
    from pathgrad import register_learning_env
    from pathgrad.envs.newton.robots.reacher import NewtonReacher


    @register_learning_env("MyArm")
    class MyArm(NewtonReacher):
        default_model_file = "{model}"   # beside this module
    """
)


def user_code(folder: Path, model: str) -> Path:
    code = folder / "code"
    code.mkdir()
    (code / "my_arm_env.py").write_text(MODULE.format(model=model))
    shutil.copy(ASSET, code / "arm.xml")
    return code


def run(*args: str, cwd: Path, code: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(code)}
    return warm_processes.run([PATHGRAD, *args], cwd=cwd, env=env)


def test_a_relative_model_file_is_found_beside_its_module_from_any_folder(tmp_path):
    code = user_code(tmp_path, "arm.xml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run("check-env", "MyArm", "--module", "my_arm_env", "--no-gradients",
                 cwd=elsewhere, code=code)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_missing_model_file_is_one_line_naming_where_it_was_looked_for(tmp_path):
    code = user_code(tmp_path, "no_such_arm.xml")
    result = run("train", "env.module=my_arm_env", "env.name=MyArm", "--quiet",
                 cwd=tmp_path, code=code)  # fmt: skip
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line == (
        f"pathgrad: config error: env.cfg: model_file '{code / 'no_such_arm.xml'}' does not exist."
    )
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_given_relative_model_file_is_looked_for_here_then_beside_the_module(
    tmp_path, monkeypatch
):
    from pathgrad.envs.newton.robots.reacher import NewtonReacher

    monkeypatch.chdir(tmp_path)
    env = object.__new__(NewtonReacher)  # the lookup needs no model
    beside = ASSET.parent.parent  # the folder of the module defining NewtonReacher
    assert env._resolve_model_file("assets/planar_arm.xml") == str(ASSET)
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "planar_arm.xml").write_text("<mujoco/>")
    here = env._resolve_model_file("assets/planar_arm.xml")
    assert here == str(tmp_path / "assets" / "planar_arm.xml")
    with pytest.raises(FileNotFoundError) as missing:
        env._resolve_model_file("arms/x.xml")
    assert str(missing.value) == (
        f"model_file: neither '{tmp_path / 'arms/x.xml'}' nor '{beside / 'arms/x.xml'}' exists."
    )


def test_a_config_file_s_relative_model_file_lies_beside_it(tmp_path, monkeypatch):
    from pathgrad.runs.config_sources import model_files_beside

    (tmp_path / "robot").mkdir()
    shutil.copy(ASSET, tmp_path / "robot" / "arm.xml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    data = {"env": {"cfg": {"model_file": "arm.xml"}, "train_cfg": {"model_file": "x.xml"}}}
    missing = model_files_beside(data, tmp_path / "robot")  # as load_config does
    assert missing == [("train_cfg", "x.xml")]
    assert data["env"]["cfg"]["model_file"] == str(tmp_path / "robot" / "arm.xml")
    assert data["env"]["train_cfg"]["model_file"] == "x.xml"  # found nowhere: left as given
    (elsewhere / "arm.xml").write_text("<mujoco/>")  # the working directory's wins
    data = {"env": {"cfg": {"model_file": "arm.xml"}}}
    model_files_beside(data, tmp_path / "robot")
    assert data["env"]["cfg"]["model_file"] == "arm.xml"


def test_a_config_file_s_model_file_found_nowhere_names_the_three_places(tmp_path, monkeypatch):
    from helpers import isolate_env_registry
    from pathgrad.runs.config import ConfigError, load_config

    isolate_env_registry(monkeypatch)
    monkeypatch.delitem(sys.modules, "file_arm_env", raising=False)

    code = tmp_path / "code"
    code.mkdir()
    (code / "file_arm_env.py").write_text(textwrap.dedent("""
        from pathgrad import register_learning_env
        from pathgrad.envs.newton.base import NewtonEnv


        @register_learning_env("FileArm")
        class FileArm(NewtonEnv):  # only configured here, never built
            pass
    """))  # fmt: skip
    monkeypatch.syspath_prepend(str(code))
    (tmp_path / "robot").mkdir()
    config_file = tmp_path / "robot" / "run.yaml"
    config_file.write_text("env:\n  name: FileArm\n  module: file_arm_env\n"
                           "  cfg:\n    model_file: arms/my_arm.xml\n")  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(ConfigError) as caught:
        load_config(config_file)
    places = [elsewhere, tmp_path / "robot", code]
    assert str(caught.value) == (
        "env.cfg.model_file: no file 'arms/my_arm.xml' in the working directory, beside the "
        "config file or beside FileArm's module (looked at "
        + ", ".join(f"'{place / 'arms/my_arm.xml'}'" for place in places)
        + ")."
    )
    (code / "arms").mkdir()  # beside the class's module: the env finds it there
    shutil.copy(ASSET, code / "arms" / "my_arm.xml")
    assert load_config(config_file).env.cfg["model_file"] == "arms/my_arm.xml"
    config = load_config(config_file, ["env.cfg.model_file=other.xml"])  # an override:
    assert config.env.cfg["model_file"] == "other.xml"  # relative to here, the env's to check
