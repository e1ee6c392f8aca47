"""pathgrad.train and pathgrad.load: the command line's work in one Python call."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import pathgrad
from pathgrad.commands import UsageError
from pathgrad.runs.config import ConfigError, load_config

FAST = ["trainer.total_updates=4", "env.num_envs=16", "eval.frequency_steps=1024",
        "eval.episodes=4", "eval.num_envs=4"]  # fmt: skip


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_train_returns_the_run_and_load_acts_like_the_trained_policy(in_tmp):
    records = []
    result = pathgrad.train(
        None, [*FAST, "trainer.normalize_observations=true", "logging.tensorboard=false"],
        progress_fn=lambda steps, metrics: records.append((steps, metrics["kind"])),
    )  # fmt: skip
    assert result.status == "completed"
    assert result.run_dir.parent == in_tmp / "runs"
    assert result.summary["num_updates"] == 4 and result.summary["status"] == "completed"
    assert (result.run_dir / "provenance.json").is_file()
    assert [steps for steps, kind in records if kind == "train"] == [512, 1024, 1536, 2048]
    assert [steps for steps, kind in records if kind == "eval"] == [1024, 2048]

    loaded = pathgrad.load(result.run_dir)
    observations = torch.randn(5, 6)
    trainer = result.trainer
    expected = result.policy.get_action(trainer.observation_normalizer.normalize(observations))
    assert torch.allclose(loaded.predict(observations), expected, atol=1e-6)
    single = loaded.predict(observations[0].numpy())  # an array in, an array out
    assert isinstance(single, np.ndarray) and single.shape == (2,)
    np.testing.assert_allclose(single, expected[0].numpy(), atol=1e-6)
    with pytest.raises(ValueError, match="deterministically"):
        loaded.predict(observations, deterministic=False)


def test_train_takes_a_run_config_and_overrides(in_tmp):
    config = load_config(None, FAST)
    result = pathgrad.train(config, ["trainer.total_updates=2", "logging.tensorboard=false"])
    assert result.summary["num_updates"] == 2
    saved = json.loads((result.run_dir / "provenance.json").read_text())["invocations"]
    assert saved[0]["command"] == "train (python)"
    assert saved[0]["overrides"] == ["trainer.total_updates=2", "logging.tensorboard=false"]


def test_a_bad_config_raises_and_writes_nothing(in_tmp):
    with pytest.raises(ConfigError, match="segment_length must be positive"):
        pathgrad.train(None, ["trainer.segment_length=0"])
    assert list(in_tmp.iterdir()) == []
    with pytest.raises(UsageError):
        pathgrad.load(in_tmp / "missing.pt")


def test_early_stopping_ends_training_like_a_budget(in_tmp):
    stop = pathgrad.EarlyStopping("train/loss", mode="min", patience=None, target=1e9)
    result = pathgrad.train(None, [*FAST, "trainer.total_updates=50"], callbacks=[stop])
    assert result.status == "stopped early" and stop.stop_training
    assert result.summary["num_updates"] == 1  # the first record already reached the target
    assert "train/loss reached" in stop.reason
    assert result.summary["last_eval_metrics"]["global_step"] == 512  # final evaluation


def test_early_stopping_counts_records_without_improvement():
    stop = pathgrad.EarlyStopping("eval/avg_reward", patience=2, min_delta=0.5)
    for value in (1.0, 2.0, 2.4, 2.3):
        stop("eval", {"eval/avg_reward": value})
        stop("train", {"train/loss": 0.0})  # other records do not count
    assert stop.stop_training and stop.best == 2.0
    with pytest.raises(ValueError, match="patience"):
        pathgrad.EarlyStopping(patience=0)
    with pytest.raises(ValueError, match="give a patience, a target or both"):
        pathgrad.EarlyStopping(patience=None)
