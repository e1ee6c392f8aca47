"""Several seeds and grids in one command, and their curves aggregated per grid point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from pathgrad.commands import UsageError
from pathgrad.commands.sweep import sweep_combinations
from pathgrad.runs.plotting import learning_curve_figure
from pathgrad.runs.seed_groups import group_by_config, seed_band

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
FAST = ["trainer.total_updates=3", "env.num_envs=16", "eval.frequency_steps=512",
        "eval.episodes=4", "eval.num_envs=4", "logging.tensorboard=false"]  # fmt: skip


def test_combinations_are_the_grid_times_the_seeds():
    combinations = sweep_combinations([0, 1], ["a.b=1,2", "c=x"])
    assert combinations == [
        ["a.b=1", "c=x", "trainer.seed=0"], ["a.b=1", "c=x", "trainer.seed=1"],
        ["a.b=2", "c=x", "trainer.seed=0"], ["a.b=2", "c=x", "trainer.seed=1"],
    ]  # fmt: skip
    for bad in ("a.b", "=1,2", "a.b=", "a.b=0.9,,0.95", "a.b=1,"):
        with pytest.raises(UsageError, match="expected KEY=VALUE1,VALUE2"):
            sweep_combinations(None, [bad])
    with pytest.raises(UsageError, match=r"^--grid a.b: 0.9 given twice \(one run each\).$"):
        sweep_combinations(None, ["a.b=0.9,0.9"])
    with pytest.raises(UsageError, match=r"^--seeds: 0 given twice \(one run each\).$"):
        sweep_combinations([0, 1, 0], [])


def test_seed_band_median_and_mean():
    series = [([0, 10], [0.0, 10.0]), ([0, 5, 10], [1.0, 1.0, 1.0]), ([0, 12], [2.0, 2.0])]
    x, center, low, high = seed_band(series, "median", points=11)
    assert x[0] == 0 and x[-1] == 10  # the range every run covers
    np.testing.assert_allclose(
        center, np.median([np.arange(11.0), np.ones(11), 2 * np.ones(11)], 0)
    )
    np.testing.assert_allclose(low, np.minimum(np.arange(11.0), 1.0))
    _, mean, below, above = seed_band(series, "mean", points=3)
    np.testing.assert_allclose(mean, [1.0, 8 / 3, 13 / 3])
    np.testing.assert_allclose(above - mean, mean - below)
    with pytest.raises(ValueError, match="do not overlap"):
        seed_band([([0, 1], [0, 0]), ([2, 3], [0, 0])], "median")


def test_groups_differ_by_what_tells_them_apart():
    def config(seed, gamma):
        return {"env": {"name": "Pendulum"}, "algorithm": {"name": "apg", "cfg": {"gamma": gamma}},
                "trainer": {"seed": seed}, "logging": {"runs_dir": f"r{seed}"}}  # fmt: skip

    groups = group_by_config(
        {Path(f"run{i}"): config(i % 2, 0.9 if i < 2 else 0.99) for i in range(4)}
    )
    assert groups == {
        "Pendulum, apg, gamma=0.9 (2 seeds)": [Path("run0"), Path("run1")],
        "Pendulum, apg, gamma=0.99 (2 seeds)": [Path("run2"), Path("run3")],
    }


def test_a_sweep_runs_every_combination_and_plots_them_aggregated(tmp_path):
    command = [sys.executable, "-m", "pathgrad", "train", *FAST, "--seeds", "0", "1",
               "--grid", "algorithm.cfg.gamma=0.95,0.99", "--jobs", "2"]  # fmt: skip
    result = subprocess.run(command, cwd=tmp_path, env=ENV, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    (sweep_dir,) = (tmp_path / "runs").iterdir()
    assert sweep_dir.name.startswith("point_mass-sweep-")
    runs = sorted(path for path in sweep_dir.iterdir() if path.is_dir())
    assert len(runs) == 4
    assert result.stdout.count("| completed | 3 |") == 4
    figure = learning_curve_figure(runs, aggregate="median")
    labels = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
    assert sorted(labels) == [
        "PointMass, apg, gamma=0.95 (2 seeds), median",
        "PointMass, apg, gamma=0.99 (2 seeds), median",
    ]
    assert len(figure.axes[0].collections) == 2  # one band per grid point
    plt.close(figure)
    plotted = subprocess.run(
        [sys.executable, "-m", "pathgrad", "plot", *map(str, runs), "--aggregate", "mean",
         "-o", "seeds.png"], cwd=tmp_path, env=ENV, capture_output=True, text=True,
    )  # fmt: skip
    assert plotted.returncode == 0 and (tmp_path / "seeds.png").stat().st_size > 10_000


def test_a_bad_grid_value_stops_the_sweep_before_any_run(tmp_path):
    command = [sys.executable, "-m", "pathgrad", "train", *FAST, "--seeds", "0",
               "--grid", "trainer.segment_length=8,0"]  # fmt: skip
    result = subprocess.run(command, cwd=tmp_path, env=ENV, capture_output=True, text=True)
    assert result.returncode == 2 and "segment_length must be positive" in result.stderr
    assert not (tmp_path / "runs").exists()
