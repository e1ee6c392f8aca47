"""pathgrad render: a readable GIF of the right length for every built-in env."""

from __future__ import annotations

import math

import numpy as np
import pytest
from PIL import Image

import pathgrad
from helpers import ROOT
from pathgrad.cli import main
from pathgrad.env import build_learning_env

CONFIGS = {
    "PointMass": "configs/point_mass.yaml",
    "Pendulum": "configs/pendulum.yaml",
    "CartPoleSwingUp": "configs/cartpole_swingup.yaml",
    "MountainCarContinuous": "configs/mountain_car.yaml",
    "Reacher": "configs/reacher.yaml",
    "Quadrotor": "configs/quadrotor.yaml",
}
QUICK = ["trainer.total_updates=1", "env.num_envs=4", "eval.frequency_steps=0",
         "logging.tensorboard=false", "trainer.update_horizon=null"]  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One single-update run per built-in env."""
    import os
    from pathlib import Path

    root = ROOT
    folder = tmp_path_factory.mktemp("renders")
    previous = Path.cwd()
    os.chdir(folder)
    try:
        return {
            name: pathgrad.train(str(root / config), QUICK).run_dir
            for name, config in CONFIGS.items()
        }
    finally:
        os.chdir(previous)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_render_writes_a_readable_gif_with_a_frame_per_drawn_step(runs, tmp_path, capsys, name):
    every = 40
    output = tmp_path / f"{name}.gif"
    assert main(["render", str(runs[name]), "-o", str(output), "--every", str(every),
                 "--episodes", "2", "--fps", "10"]) == 0  # fmt: skip
    frames = int(capsys.readouterr().out.split(", ")[-1].split()[0])
    with Image.open(output) as image:
        assert image.n_frames == frames
        image.seek(frames - 1)
        pixels = np.asarray(image.convert("L"), dtype=np.float32)
        assert pixels.std() > 5  # something was drawn, not a blank frame
    steps = build_learning_env(name, num_envs=1, device="cpu").max_episode_steps
    expected = 2 * (math.ceil(steps / every) + 1)  # each episode: every 40th step and its end
    if name == "MountainCarContinuous":
        assert 4 <= frames <= expected  # an episode may end at the goal
    else:
        assert frames == expected
    assert [path.name for path in tmp_path.iterdir()] == [f"{name}.gif"]  # no temporary left


def test_render_refuses_other_formats_and_bad_counts(runs, tmp_path, capsys):
    run = str(runs["Pendulum"])
    assert main(["render", run, "-o", str(tmp_path / "x.png")]) == 2
    assert main(["render", run, "-o", str(tmp_path / "x.gif"), "--episodes", "0"]) == 2
    assert "give a .gif or .mp4 file name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_newton_env_renders_through_its_torch_twin_drawing(tmp_path, monkeypatch, capsys):

    root = ROOT
    monkeypatch.chdir(tmp_path)
    run = pathgrad.train(str(root / "configs/newton_reacher.yaml"), QUICK).run_dir
    assert main(["render", str(run), "-o", "reacher.gif", "--every", "25"]) == 0
    frames = int(capsys.readouterr().out.split(", ")[-1].split()[0])
    with Image.open(tmp_path / "reacher.gif") as image:
        assert image.n_frames == frames > 2


def test_render_writes_an_mp4_with_a_frame_per_drawn_step(runs, tmp_path, capsys):
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    output = tmp_path / "pendulum.mp4"
    assert main(["render", str(runs["Pendulum"]), "-o", str(output), "--every", "20"]) == 0
    frames = int(capsys.readouterr().out.split(", ")[-1].split()[0])
    assert frames == 200 // 20 + 1
    counted, _ = imageio_ffmpeg.count_frames_and_secs(str(output))
    assert counted == frames
