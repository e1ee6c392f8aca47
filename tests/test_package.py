"""The package's public surface: lazy names, submodules, the registry without extra imports."""

from __future__ import annotations

import subprocess
import sys

import pathgrad

SCRIPT = """
import sys
import pathgrad
assert "torch" not in sys.modules, "import pathgrad must stay light"
assert pathgrad.envs.PointMass.__name__ == "PointMass"  # a submodule, without importing it
from pathgrad import APG, DifferentiableTrainer  # public names load on first use
from pathgrad.env import build_learning_env  # the registry knows the built-in envs by itself
assert build_learning_env("Pendulum", num_envs=1, device="cpu").num_envs == 1
print("ok")
"""


def test_public_names_load_on_first_use_in_a_fresh_interpreter():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_every_public_name_resolves():
    for name in pathgrad.__all__:
        assert getattr(pathgrad, name) is not None, name
    assert set(pathgrad.__all__) <= set(dir(pathgrad))
