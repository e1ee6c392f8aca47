"""Which differences between a checkpoint's config and config.yaml count as edits."""

from __future__ import annotations

import math

from pathgrad.runs.config_edits import config_edits, describe_edits

RECORDED = {
    "env": {"name": "PointMass", "num_envs": 16, "device": "cpu", "cfg": {"dt": 0.05}},
    "policy": {"hidden_sizes": (64, 64), "init_log_std": math.nan},
    "trainer": {"total_updates": 6, "num_threads": 1, "seed": 0},
    "logging": {"tensorboard": True},
}


def edited(**sections) -> dict:
    return {key: {**value, **sections.get(key, {})} for key, value in RECORDED.items()}


def test_the_same_config_has_no_edits_tuples_and_nan_included():
    current = edited(policy={"hidden_sizes": [64, 64], "init_log_std": math.nan})
    assert config_edits(RECORDED, current) == []


def test_resume_options_and_logging_are_not_edits():
    current = edited(trainer={"total_updates": 60, "num_threads": 2},
                     env={"device": "cuda"}, logging={"tensorboard": False})  # fmt: skip
    assert config_edits(RECORDED, current) == []


def test_each_edit_is_named_with_both_values():
    current = edited(env={"num_envs": 8, "cfg": {"dt": 0.05, "substeps": 2}},
                     trainer={"seed": 3})  # fmt: skip
    edits = config_edits(RECORDED, current)
    assert [key for key, _, _ in edits] == ["env.cfg.substeps", "env.num_envs", "trainer.seed"]
    text = describe_edits(edits)
    assert "env.cfg.substeps: (not set) -> 2" in text and "env.num_envs: 16 -> 8" in text
    assert describe_edits(edits, limit=1).endswith("; and 2 more")


def test_a_section_field_of_another_pathgrad_version_is_not_an_edit():
    current = edited(trainer={"a_field_added_later": True})
    assert config_edits(RECORDED, current) == []
    removed = {**RECORDED, "env": {k: v for k, v in RECORDED["env"].items() if k != "cfg"}}
    assert [key for key, _, _ in config_edits(RECORDED, removed)] == ["env.cfg.dt"]
