"""Checkpoints: round trip, safe loading, clear errors, atomicity, the run index."""

from __future__ import annotations

import json
import os
import pickle
import stat
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import warm_processes
from helpers import build_point_mass_trainer, learning_state
from pathgrad.checkpoint import latest_checkpoint, read_checkpoint, read_index, rebuild_index
from pathgrad.core.atomic_files import atomic_write, remove_stale_temporaries
from pathgrad.policies import GaussianMLPPolicy
from pathgrad.runs.config import RunConfig
from pathgrad.runs.run import build_run

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
    assert checkpoint["format"] == "pathgrad.checkpoint" and checkpoint["schema_version"] == 2
    assert {"policy", "algorithm", "rng", "env", "observation_normalizer"} <= set(checkpoint)


def test_missing_truncated_foreign_and_other_schema_files_are_clear_errors(tmp_path):
    trainer = build_point_mass_trainer(tmp_path)
    path = Path(trainer.save_checkpoint())
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_checkpoint(tmp_path / "nope.pt")
    with pytest.raises(FileNotFoundError, match="is a directory, not a checkpoint file"):
        read_checkpoint(tmp_path)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="not the zip archive torch.save writes"):
        read_checkpoint(tmp_path / "notes.txt")
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
    with pytest.raises(ValueError, match=r"version 99; this pathgrad reads versions \[1, 2\]"):
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
    with pytest.raises(ValueError, match="is not a pathgrad checkpoint: it holds Python objects"):
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
        "test_final_step_96.pt",  # a final checkpoint is named as such
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
    result = warm_processes.run([sys.executable, "-c", CRASH_SCRIPT, str(tmp_path)], cwd=TESTS)
    assert result.returncode == 3
    checkpoint = read_checkpoint(tmp_path / "run.pt")
    assert checkpoint["num_updates"] == 1
    assert [e["num_updates"] for e in read_index(tmp_path)] == [1]
    assert latest_checkpoint(tmp_path) == tmp_path / "run.pt"
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] != []  # the dead write
    policy = GaussianMLPPolicy(6, 2, hidden_sizes=(16,), squash=True)
    policy.load_state_dict(checkpoint["policy"])


def test_an_empty_file_is_a_clear_error(tmp_path):
    empty = tmp_path / "empty.pt"
    empty.touch()
    with pytest.raises(ValueError, match="is empty, not a pathgrad checkpoint"):
        read_checkpoint(empty)
    blank = tmp_path / "blank.pt"  # torch.load fails with an empty message on some inputs
    blank.write_bytes(b"\n")
    with pytest.raises(ValueError, match="is not a readable pathgrad checkpoint"):
        read_checkpoint(blank)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"checkpoints": [', "is not valid JSON"),
        ("", "is empty"),
        ("[1, 2]", "must hold an object with a 'checkpoints' list"),
        ('{"checkpoints": {"file": "a.pt"}}', "must hold an object with a 'checkpoints' list"),
        ('{"checkpoints": [3]}', r"checkpoints\[0\] must be an object whose 'file'"),
        ('{"checkpoints": [{"step": 1}]}', r"checkpoints\[0\] must be an object whose 'file'"),
        ('{"checkpoints": [{"file": "../x.pt"}]}', "name of a checkpoint in the same folder"),
    ],
)
def test_a_malformed_index_is_a_clear_error(tmp_path, text, message):
    (tmp_path / "index.json").write_text(text)
    with pytest.raises(ValueError, match=message):
        read_index(tmp_path)
    with pytest.raises(ValueError, match=message):
        latest_checkpoint(tmp_path)
    (tmp_path / "index.json").write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="cannot read"):
        read_index(tmp_path)


def test_a_save_next_to_a_corrupt_index_rebuilds_it_from_the_files(tmp_path):
    trainer = build_point_mass_trainer(tmp_path, eval_frequency_steps=0)
    trainer.train(total_updates=1)
    first = trainer.save_checkpoint()
    (tmp_path / "index.json").write_text('{"checkpoints": [')
    trainer.train(total_updates=2)
    second = trainer.save_checkpoint(kind="final")
    entries = read_index(tmp_path)
    assert [(e["file"], e["num_updates"], e["kind"]) for e in entries] == [
        (Path(first).name, 1, "periodic"),
        (Path(second).name, 2, "final"),
    ]
    (aside,) = tmp_path.glob("index.json.corrupt-*")
    assert aside.read_text() == '{"checkpoints": ['  # kept, not lost
    (tmp_path / "index.json").write_text("garbage")
    assert rebuild_index(tmp_path) == entries
    assert read_index(tmp_path) == entries


def test_the_index_is_strict_json_without_nan(tmp_path):
    trainer = build_point_mass_trainer(tmp_path)
    trainer.last_eval_metrics = {"global_step": 0.0, "eval/success_rate": float("nan")}
    trainer.save_checkpoint()
    text = (tmp_path / "index.json").read_text()
    assert "NaN" not in text
    assert json.loads(text, parse_constant=lambda name: pytest.fail(name))["checkpoints"][0][
        "eval"
    ] == {"global_step": 0.0, "eval/success_rate": None}


def test_files_get_the_permissions_of_the_umask(tmp_path):
    previous = os.umask(0o022)
    try:
        path = atomic_write(tmp_path / "a.txt", lambda handle: handle.write(b"x"))
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        os.umask(0o077)
        atomic_write(tmp_path / "b.txt", lambda handle: handle.write(b"x"))
        assert stat.S_IMODE((tmp_path / "b.txt").stat().st_mode) == 0o600
        path.chmod(0o640)  # a replaced file keeps its own permissions
        atomic_write(path, lambda handle: handle.write(b"y"))
        assert stat.S_IMODE(path.stat().st_mode) == 0o640 and path.read_bytes() == b"y"
    finally:
        os.umask(previous)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        atomic_write(tmp_path, lambda handle: handle.write(b"x"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]


def test_stale_temporaries_are_removed(tmp_path):
    (tmp_path / ".run.pt.abc123.tmp").write_bytes(b"partial")
    (tmp_path / "keep.tmp").write_bytes(b"not ours")
    (tmp_path / "run.pt").write_bytes(b"whole")
    removed = remove_stale_temporaries(tmp_path)
    assert [p.name for p in removed] == [".run.pt.abc123.tmp"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.tmp", "run.pt"]


def test_schema_version_1_files_are_migrated(tmp_path):
    checkpoint = read_checkpoint(TESTS / "data" / "checkpoint_schema_v1.pt")
    assert checkpoint["schema_version"] == 2
    assert checkpoint["next_eval_step"] is None and checkpoint["last_train_metrics"] == {}
    assert checkpoint["saved_update"] == checkpoint["num_updates"] == 2
    config = RunConfig.model_validate(checkpoint["config"])
    objects = build_run(config, tmp_path)
    objects.trainer.load_checkpoint(TESTS / "data" / "checkpoint_schema_v1.pt")
    assert (objects.trainer.global_step, objects.trainer.num_updates) == (256, 2)
    objects.trainer.train(total_updates=3)  # and training goes on from it
    assert objects.trainer.num_updates == 3


def test_restore_env_state_false_starts_a_fresh_rollout(tmp_path):
    source = build_point_mass_trainer(tmp_path, eval_frequency_steps=0)
    source.train(total_updates=3)
    path = source.save_checkpoint()
    target = build_point_mass_trainer(tmp_path, seed=1, eval_frequency_steps=0)
    untouched = target.env.state_dict()["state"]
    target.load_checkpoint(path, restore_env_state=False)
    assert target.collector.observation is None  # the next update resets the env
    assert torch.equal(target.env.state["position"], untouched["position"])
    assert float(target.episodes.running_return.abs().sum()) == 0.0
    assert list(target.ret_window) == list(source.ret_window)
    for name, value in learning_state(source).items():
        assert torch.equal(value, learning_state(target)[name]), name
    target.train(total_updates=4)
    assert target.num_updates == 4


def test_retention_keeps_the_newest_periodic_the_best_and_the_final(tmp_path):
    trainer = build_point_mass_trainer(tmp_path, save_frequency_updates=1, keep_last_checkpoints=2)
    trainer.train(total_updates=6)
    trainer.save_checkpoint(kind="final")
    trainer.train(total_updates=7)
    trainer.save_checkpoint(kind="final")
    files = sorted(path.name for path in tmp_path.glob("*.pt"))
    indexed = sorted(entry["file"] for entry in read_index(tmp_path))
    assert files == indexed  # the index names exactly the files kept
    kinds = {entry["file"]: entry["kind"] for entry in read_index(tmp_path)}
    periodic = sorted(
        (n for n, k in kinds.items() if k == "periodic"), key=lambda n: int(n.split("_")[-1][:-3])
    )
    assert len(periodic) == 2 and periodic[-1].endswith(f"step_{trainer.global_step}.pt")
    assert [n for n, k in kinds.items() if k == "final"] == [
        f"test_final_step_{trainer.global_step}.pt"
    ]
    best = [n for n, k in kinds.items() if k == "best"]
    assert trainer.best_checkpoint_path is not None  # evaluations ran and saved bests
    assert best == [Path(trainer.best_checkpoint_path).name]
    assert latest_checkpoint(tmp_path).name == f"test_final_step_{trainer.global_step}.pt"


def test_retention_must_not_be_negative():
    from pathgrad.trainer.config import DifferentiableTrainerCfg

    with pytest.raises(ValueError, match="keep_last_checkpoints cannot be negative"):
        DifferentiableTrainerCfg(keep_last_checkpoints=-1).validate()


def test_cuda_generators_of_devices_this_machine_lacks_are_left_out(monkeypatch):
    # A run saved on 4 GPUs, resumed on a machine with 1: only device 0's state is set.
    import pathgrad.checkpoint as checkpoint_module

    restored = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, i: restored.append((i, state)))
    states = [torch.full((4,), float(i), dtype=torch.float64) for i in range(4)]
    checkpoint_module.restore_cuda_rng_states(states)
    assert [i for i, _ in restored] == [0] and torch.equal(restored[0][1], states[0])
    restored.clear()
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)  # more devices than saved
    checkpoint_module.restore_cuda_rng_states(states)
    assert [i for i, _ in restored] == [0, 1, 2, 3]
