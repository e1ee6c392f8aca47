"""trainer.num_threads: one thread for small batches, only free CPUs for large ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from pathgrad.runs.config import ConfigError, load_config
from pathgrad.runs.run import build_run
from pathgrad.trainer.threads import THREADED_BATCH_ENVS, free_cpus, resolve_num_threads

PATHGRAD = str(Path(sys.executable).parent / "pathgrad")


def test_auto_uses_one_thread_for_small_batches_and_free_cpus_for_large_ones():
    quiet = {}
    assert resolve_num_threads("auto", 64, environ=quiet, free=2) == (
        1,
        f"auto: 64 envs < {THREADED_BATCH_ENVS}",
    )
    assert resolve_num_threads("auto", 16384, environ=quiet, free=2)[0] == 2
    assert resolve_num_threads("auto", 16384, environ=quiet, free=1)[0] == 1  # a core is busy
    assert resolve_num_threads("auto", 64, environ={"OMP_NUM_THREADS": "3"}) == (
        3,
        "auto: OMP_NUM_THREADS",
    )
    assert resolve_num_threads(4, 64) == (4, "set")
    assert 1 <= free_cpus() <= (os.cpu_count() or 1)
    for bad in (0, -1, "many", 1.5, True):
        with pytest.raises(ValueError, match="num_threads must be 'auto' or a positive integer"):
            resolve_num_threads(bad, 64)


def test_the_trainer_applies_the_count_and_the_config_records_it():
    before = torch.get_num_threads()
    try:
        config = load_config(None, ["trainer.num_threads=2", "trainer.total_updates=1"])
        objects = build_run(config, Path("unused"))
        assert objects.trainer.num_threads == 2 and torch.get_num_threads() == 2
        config = load_config(None, ["trainer.total_updates=1"])
        assert config.trainer.num_threads == "auto"
        objects = build_run(config, Path("unused"))
        assert objects.trainer.num_threads == 1 and torch.get_num_threads() == 1
        assert config.trainer.num_threads == 1  # what config.yaml will hold
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ConfigError, match="trainer: num_threads must be 'auto' or a positive"):
        load_config(None, ["trainer.num_threads=0"])


def test_the_command_line_prints_and_records_the_effective_count(tmp_path):
    result = subprocess.run(
        [PATHGRAD, "train", "trainer.total_updates=1", "--num-threads", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "torch threads: 1 (set)" in result.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["trainer"]["num_threads"] == 1
    bad = subprocess.run(
        [PATHGRAD, "train", "--num-threads", "lots"], cwd=tmp_path, capture_output=True, text=True
    )
    assert bad.returncode == 2 and "num_threads must be 'auto' or a positive integer" in bad.stderr


def test_the_benchmarks_option_parses_and_names_bad_values():
    import argparse

    from pathgrad.trainer.threads import num_threads_argument, per_batch_size

    assert num_threads_argument("auto") == "auto" and num_threads_argument("2") == 2
    for bad in ("0", "lots", "-1"):
        with pytest.raises(argparse.ArgumentTypeError, match="num_threads must be 'auto'"):
            num_threads_argument(bad)
    before = torch.get_num_threads()
    try:
        assert per_batch_size(1, [64, 256]) == "threads 1 (per batch size: 64 envs 1, 256 envs 1)"
    finally:
        torch.set_num_threads(before)
