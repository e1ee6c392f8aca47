"""Envs defined outside pathgrad: a config's env.module, the pathgrad.envs entry points,
and what an env declares it supports."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import warm_processes
from pathgrad.env import get_registered_learning_env_names
from pathgrad.runs.config import ConfigError, load_config

PATHGRAD = str(Path(sys.executable).parent / "pathgrad")

MODULE = textwrap.dedent(
    """
    from pathgrad.env import register_learning_env
    from pathgrad.envs import PointMass


    @register_learning_env("MyPointMass")
    class MyPointMass(PointMass):
        '''PointMass under another name, registered from outside pathgrad.'''


    @register_learning_env("Float32OnlyMass")
    class Float32OnlyMass(PointMass):
        supported_dtypes = ("float32",)
        supports_torch_compile = False
    """
)
PLUGIN = textwrap.dedent(
    """
    from pathgrad.envs import PointMass


    class PluginMass(PointMass):
        '''Registered through the entry point's name.'''
    """
)


@pytest.fixture
def user_code(tmp_path, monkeypatch) -> Path:
    """User modules and an installed plugin on the path; the registry is restored after."""
    import pathgrad.env
    from pathgrad.core import env_registry

    get_registered_learning_env_names()  # the built-in envs first
    monkeypatch.setattr(env_registry, "_REGISTRY", dict(env_registry._REGISTRY))
    monkeypatch.setattr(env_registry, "_DISPLAY_NAMES", dict(env_registry._DISPLAY_NAMES))
    monkeypatch.setattr(pathgrad.env, "_plugins_loaded", False)
    for name in ("my_envs", "plugin_envs"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    code = tmp_path / "code"
    code.mkdir()
    (code / "my_envs.py").write_text(MODULE)
    (code / "plugin_envs.py").write_text(PLUGIN)
    info = code / "plugin_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[pathgrad.envs]\nPluginMass = plugin_envs:PluginMass\nBroken = no_such_module:Env\n"
    )
    monkeypatch.syspath_prepend(str(code))
    return code


def run(*args: str, cwd: Path, code: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
    return warm_processes.run([PATHGRAD, *args], cwd=cwd, env=env)


def test_a_config_module_registers_envs_for_train_eval_and_envs(tmp_path, user_code):
    fast = ["trainer.total_updates=1", "env.num_envs=4", "eval.frequency_steps=0", "--quiet"]
    result = run("train", "env.module=my_envs", "env.name=MyPointMass", *fast,
                 cwd=tmp_path, code=user_code)  # fmt: skip
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("my_point_mass-")
    assert "module: my_envs" in (run_dir / "config.yaml").read_text()
    assert run("eval", str(run_dir), "--json", cwd=tmp_path, code=user_code).returncode == 0
    listing = run("envs", "--module", "my_envs", cwd=tmp_path, code=user_code).stdout
    assert "MyPointMass" in listing and "PluginMass" in listing


def test_the_command_finds_an_env_module_in_the_working_directory(tmp_path):
    # As `python -m pathgrad` does; the console script puts its own folder first instead.
    (tmp_path / "here_envs.py").write_text(MODULE.replace("MyPointMass", "HerePointMass"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)

    def here(*args: str) -> subprocess.CompletedProcess:
        return warm_processes.run([PATHGRAD, *args], cwd=tmp_path, env=env)

    fast = ["trainer.total_updates=1", "env.num_envs=4", "eval.frequency_steps=0", "--quiet"]
    result = here("train", "env.module=here_envs", "env.name=HerePointMass", *fast)
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    for command in (["eval", str(run_dir)], ["resume", str(run_dir), "--total-updates", "2"],
                    ["export", str(run_dir), "-o", "p.pt2"]):  # fmt: skip
        result = here(*command)
        assert result.returncode == 0, (command, result.stderr)


def test_an_entry_point_registers_an_env_and_a_broken_one_only_warns(user_code):
    with pytest.warns(UserWarning, match="env plugin 'Broken = no_such_module:Env' failed"):
        names = get_registered_learning_env_names()
    assert "PluginMass" in names
    config = load_config(None, ["env.name=PluginMass"])
    assert config.trainer.experiment_name == "plugin_mass"


def test_a_module_that_cannot_be_imported_is_a_config_error(tmp_path, user_code):
    with pytest.raises(ConfigError, match="env.module: cannot import 'nowhere_envs'"):
        load_config(None, ["env.module=nowhere_envs"])
    result = run("train", "env.module=nowhere_envs", cwd=tmp_path, code=user_code)
    assert result.returncode == 2 and "env.module: cannot import" in result.stderr
    assert list(tmp_path.iterdir()) == [user_code]


@pytest.mark.parametrize("given", ["my_envs.py", "envs/my_envs.py"])
def test_a_file_path_as_env_module_names_the_import_name(user_code, given):
    folder = (Path.cwd() / given).parent.resolve()
    expected = (
        f"env.module: cannot import '{given}': ImportError: give the module's import name, "
        f"not a file path: 'my_envs', with its folder ({folder}) the working directory"
    )
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_config(None, [f"env.module={given}"])


def test_an_error_in_the_users_module_names_its_line(tmp_path, monkeypatch, user_code):
    (tmp_path / "raising_envs.py").write_text("import math\n\nrate = math.log(0.0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    expected = (f"env.module: cannot import 'raising_envs': ValueError: math domain error at "
                f"{tmp_path / 'raising_envs.py'}:3 in <module>")  # fmt: skip
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_config(None, ["env.module=raising_envs"])


def test_what_an_env_supports_is_honoured(user_code):
    base = ["env.module=my_envs", "env.name=Float32OnlyMass"]
    with pytest.raises(ConfigError, match="env.dtype: Float32OnlyMass computes in float32"):
        load_config(None, [*base, "env.dtype=float64"])
    with pytest.raises(ConfigError, match="trainer.torch_compile: Float32OnlyMass cannot be"):
        load_config(None, [*base, "trainer.torch_compile=true"])
    from my_envs import Float32OnlyMass

    from helpers import LinearPolicy
    from pathgrad.algo import APG, APGCfg
    from pathgrad.differentiable_trainer import DifferentiableTrainer, DifferentiableTrainerCfg

    policy = LinearPolicy()
    with pytest.raises(ValueError, match="torch_compile: Float32OnlyMass cannot be compiled"):
        DifferentiableTrainer(
            DifferentiableTrainerCfg(torch_compile=True),
            Float32OnlyMass(2),
            policy,
            APG(APGCfg(), policy),
        )
