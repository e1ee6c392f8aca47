"""Warp's start-up banner never reaches a pathgrad command, whoever imports Warp first."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("warp")

# A user's env module that imports and initializes Warp before anything of pathgrad's.
USER_MODULE = """
import warp as wp

wp.init()
WARP_ARRAY = wp.zeros(3, dtype=float)  # used at import: Warp is initialized here

from pathgrad import register_learning_env
from pathgrad.envs import PointMass


@register_learning_env("WarpFirstMass")
class WarpFirstMass(PointMass):
    pass
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_a_user_module_that_initializes_warp_first_prints_no_banner(tmp_path, verbose):
    (tmp_path / "warp_first.py").write_text(USER_MODULE)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tmp_path)}
    env.pop("PATHGRAD_WARP_VERBOSE", None)
    if verbose:
        env["PATHGRAD_WARP_VERBOSE"] = "1"  # the switch that keeps Warp's messages
    result = subprocess.run(
        [sys.executable, "-m", "pathgrad", "train", "env.module=warp_first",
         "env.name=WarpFirstMass", "env.num_envs=4", "trainer.total_updates=1",
         "eval.frequency_steps=0", "--quiet"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    output = result.stdout + result.stderr
    assert ("Warp" in output and "initialized" in output) == verbose, output
