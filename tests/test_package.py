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


def test_the_top_level_exports_every_algorithm_and_moved_names_still_resolve():
    import pytest

    for algorithm in ("APG", "SHAC", "SAPO", "AHAC", "SAPOEnsemble", "StiffnessAHAC"):
        assert algorithm in pathgrad.__all__ and f"{algorithm}Cfg" in pathgrad.__all__
    assert "UsageError" not in pathgrad.__all__ and "read_index" not in pathgrad.__all__
    with pytest.warns(DeprecationWarning, match="from pathgrad.checkpoint import read_index"):
        from pathgrad.checkpoint import read_index

        assert pathgrad.read_index is read_index
