"""Checkpoints: round trip, safe loading, clear errors, atomicity, the run index."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from helpers import build_point_mass_trainer, learning_state
from pathgrad.checkpoint import latest_checkpoint, read_checkpoint, read_index
from pathgrad.policies import GaussianMLPPolicy

TESTS = Path(__file__).parent


def test_round_trip_restores_the_learning_state(tmp_path):
    source = build_point_mass_trainer(tmp_path)
    source.train(total_updates=3)
    path = source.save_checkpoint()
    assert path == str(tmp_path / "test_step_96.pt")
    target = build_point_mass_trainer(tmp_path, seed=1)
    target.load_checkpoint(path)
    for name, value in learning_state(source).items():
        assert torch.equal(value, learning_state(target)[name]), name
    assert (target.global_step, target.num_updates) == (96, 3)
    assert target.algorithm.current_learning_rate() == source.algorithm.current_learning_rate()
    assert target.algorithm.lr_schedule.step_count == 3
    assert list(target.ret_window) == list(source.ret_window)
    assert torch.equal(target.env.state["position"], source.env.state["position"])
    assert torch.equal(target.collector.observation, source.collector.observation)
    assert target.latest_checkpoint_path == path


def test_restart_scheduler_keeps_momentum_and_restarts_the_curve(tmp_path):
    source = build_point_mass_trainer(tmp_path)
    source.train(total_updates=3)
    path = source.save_checkpoint()
    target = build_point_mass_trainer(tmp_path)
    target.load_checkpoint(path, resume_scheduler="restart")
    assert target.algorithm.lr_schedule.step_count == 0
    assert target.algorithm.current_learning_rate() == 1e-2
    exp_avg = learning_state(source)["optimizer.0.exp_avg"]
    assert torch.equal(learning_state(target)["optimizer.0.exp_avg"], exp_avg)


def test_checkpoint_loads_with_plain_weights_only_torch_load(tmp_path):
    trainer = build_point_mass_trainer(tmp_path)
    checkpoint = torch.load(trainer.save_checkpoint(), weights_only=True)
    assert checkpoint["format"] == "pathgrad.checkpoint" and checkpoint["schema_version"] == 1
    assert {"policy", "algorithm", "rng", "env", "observation_normalizer"} <= set(checkpoint)


def test_missing_truncated_foreign_and_other_schema_files_are_clear_errors(tmp_path):
    trainer = build_point_mass_trainer(tmp_path)
    path = Path(trainer.save_checkpoint())
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_checkpoint(tmp_path / "nope.pt")
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match="is not a readable pathgrad checkpoint"):
        trainer.load_checkpoint(truncated)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    with pytest.raises(ValueError, match="is not a pathgrad checkpoint"):
        read_checkpoint(foreign)
    future = tmp_path / "future.pt"
    torch.save({**torch.load(path, weights_only=True), "schema_version": 99}, future)
    with pytest.raises(ValueError, match="schema version 99; this pathgrad reads version 1"):
        read_checkpoint(future)


class _Exploit:
    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_loading_never_executes_code_from_the_file(tmp_path):
    marker = tmp_path / "executed"
    exploit = _Exploit()
    exploit.marker = str(marker)
    malicious = tmp_path / "malicious.pt"
    with open(malicious, "wb") as handle:
        pickle.dump({"format": "pathgrad.checkpoint", "payload": exploit}, handle, protocol=2)
    with pytest.raises(ValueError, match="is not a readable pathgrad checkpoint"):
        read_checkpoint(malicious)
    assert not marker.exists()


def test_policy_shape_mismatch_names_the_entry_and_changes_nothing(tmp_path):
    trainer = build_point_mass_trainer(tmp_path)
    trainer.train(total_updates=1)
    path = trainer.save_checkpoint()
    other = build_point_mass_trainer(tmp_path)
    other.policy.mean_net[0] = torch.nn.Linear(6, 32)  # 16 -> 32 hidden units
    before = learning_state(other)
    message = r"'policy.mean_net.0.weight' has shape \(16, 6\), but the policy has shape \(32, 6\)"
    with pytest.raises(ValueError, match=message):
        other.load_checkpoint(path)
    assert other.global_step == 0
    assert all(torch.equal(v, learning_state(other)[k]) for k, v in before.items())


def test_structure_mismatches_are_named(tmp_path):
    trainer = build_point_mass_trainer(tmp_path)
    path = trainer.save_checkpoint()
    other = build_point_mass_trainer(tmp_path)
    other.policy.extra = torch.nn.Linear(1, 1)
    with pytest.raises(ValueError, match=r"missing entries \['extra.bias', 'extra.weight'\]"):
        other.load_checkpoint(path)
    plain = build_point_mass_trainer(tmp_path, normalize_observations=False)
    with pytest.raises(ValueError, match="'observation_normalizer' state but the trainer has no"):
        plain.load_checkpoint(path)
    wide = build_point_mass_trainer(tmp_path, num_envs=8)
    with pytest.raises(
        ValueError, match=r"env state entry 'position' has shape \(4, 2\), expected \(8, 2\)"
    ):
        wide.load_checkpoint(path)
    assert wide.env.state["position"].shape == (8, 2)


def test_index_lists_every_save_and_latest_skips_deleted_files(tmp_path):
    trainer = build_point_mass_trainer(tmp_path)
    trainer.train(total_updates=2)
    first = trainer.save_checkpoint()
    trainer.train(total_updates=3)
    second = trainer.save_checkpoint(kind="final")
    entries = read_index(tmp_path)
    assert [e["file"] for e in entries] == [
        "test_best_step_64.pt",
        "test_step_64.pt",
        "test_step_96.pt",
    ]
    assert entries[-1]["kind"] == "final" and entries[-1]["num_updates"] == 3
    assert latest_checkpoint(tmp_path) == Path(second)
    Path(second).unlink()
    assert latest_checkpoint(tmp_path) == Path(first)
    with pytest.raises(ValueError, match="kind must be one of"):
        trainer.save_checkpoint(kind="other")
    with pytest.raises(FileNotFoundError, match="No checkpoint is listed"):
        latest_checkpoint(tmp_path / "empty")


CRASH_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from helpers import build_point_mass_trainer
    trainer = build_point_mass_trainer(sys.argv[1], eval_frequency_steps=0)
    trainer.train(total_updates=1)
    trainer.save_checkpoint(sys.argv[1] + "/run.pt")
    trainer.train(total_updates=2)
    os.replace = lambda *args: os._exit(3)  # the process dies between write and replace
    trainer.save_checkpoint(sys.argv[1] + "/run.pt")
    """
)


def test_crash_between_write_and_replace_leaves_the_earlier_checkpoint(tmp_path):
    result = subprocess.run([sys.executable, "-c", CRASH_SCRIPT, str(tmp_path)], cwd=TESTS)
    assert result.returncode == 3
    checkpoint = read_checkpoint(tmp_path / "run.pt")
    assert checkpoint["num_updates"] == 1
    assert [e["num_updates"] for e in read_index(tmp_path)] == [1]
    assert latest_checkpoint(tmp_path) == tmp_path / "run.pt"
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] != []  # the dead write
    policy = GaussianMLPPolicy(6, 2, hidden_sizes=(16,), squash=True)
    policy.load_state_dict(checkpoint["policy"])
