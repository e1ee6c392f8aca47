"""Resume meets damaged runs and full disks: nothing lost, nothing restarted, one line each."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest
import torch
from test_cli_faults import FAST, assert_usage_error, pathgrad, snapshot

import pathgrad.checkpoint as checkpoint_module
import pathgrad.runs.run as run_module
from helpers import ROOT, copy_run, run_cli, train_run
from pathgrad.checkpoint import read_checkpoint, read_index
from pathgrad.cli import main

SAVING = ["trainer.total_updates=6", "trainer.save_frequency_updates=2",
          "trainer.keep_last_checkpoints=2", "eval.frequency_steps=0", "eval.final=false",
          "env.num_envs=16", "--quiet"]  # fmt: skip


@pytest.fixture(scope="module")
def saving(tmp_path_factory) -> Path:
    """A run with periodic checkpoints at updates 4 and 6 (2 was pruned) and a final one."""
    return train_run(tmp_path_factory.mktemp("saving"), *SAVING)


@pytest.fixture
def run_copy(saving, tmp_path) -> Path:
    return copy_run(saving, tmp_path)


def unchanged(before: dict, after: dict) -> bool:
    return {k: v for k, v in before.items() if k != ".lock"} == {
        k: v for k, v in after.items() if k != ".lock"
    }


def damage(path: Path, how: str) -> None:
    if how == "truncated":
        path.write_bytes(path.read_bytes()[:4000])
    elif how == "payload":
        torch.save({"format": "pathgrad.checkpoint", "payload": Path(".")}, path)
    else:  # a schema this pathgrad does not know
        contents = torch.load(path, weights_only=True)
        torch.save({**contents, "schema_version": 99}, path)


@pytest.mark.parametrize("how", ["truncated", "payload", "newer schema"])
@pytest.mark.parametrize("index", ["deleted", "--rebuild-index"])
def test_a_run_whose_checkpoints_are_all_unreadable_is_refused_and_kept(run_copy, how, index):
    directory = run_copy / "checkpoints"
    for path in directory.glob("*.pt"):
        damage(path, how)
    if index == "deleted":
        (directory / "index.json").unlink()
    before = snapshot(run_copy)
    extra = ["--rebuild-index"] if index == "--rebuild-index" else []
    result = pathgrad("resume", str(run_copy), *extra, cwd=run_copy.parent)
    assert_usage_error(result, "none can be read", "point_mass_", "nothing was changed")
    assert "from the start" not in result.stdout
    assert unchanged(before, snapshot(run_copy))


def test_a_run_whose_checkpoints_are_gone_is_refused(run_copy):
    shutil.rmtree(run_copy / "checkpoints")
    before = snapshot(run_copy)
    result = pathgrad("resume", str(run_copy), cwd=run_copy.parent)
    assert_usage_error(result, "summary.json names", "holds none", "nothing was changed")
    assert unchanged(before, snapshot(run_copy))


def test_a_run_stopped_before_its_first_save_starts_again(run_copy):
    # A kill before the first checkpoint: metrics lines, no checkpoint, no summary.
    shutil.rmtree(run_copy / "checkpoints")
    (run_copy / "summary.json").unlink()
    result = pathgrad("resume", str(run_copy), "--total-updates", "3", cwd=run_copy.parent)
    assert result.returncode == 0, result.stderr
    assert "from the start (no checkpoint was saved before it stopped)" in result.stdout
    records = [json.loads(line) for line in (run_copy / "metrics.jsonl").read_text().splitlines()]
    assert [r["num_updates"] for r in records if r["kind"] == "train"] == [1, 2, 3]


def test_a_checkpoint_saved_before_the_first_update_resumes_as_a_fresh_run(tmp_path):
    """A run stopped before its first update (a signal, a budget of 0) saved its envs
    unreset; the resume resets them as the fresh run does, and repeats it exactly."""
    quiet = ["eval.frequency_steps=0", "env.num_envs=8", "--quiet"]
    (tmp_path / "fresh").mkdir()
    (tmp_path / "stopped").mkdir()
    fresh = train_run(tmp_path / "fresh", "trainer.total_updates=3", *quiet)
    stopped = train_run(tmp_path / "stopped", "trainer.total_updates=0", *quiet)
    assert read_index(stopped / "checkpoints")[-1]["num_updates"] == 0
    code, _, stderr = run_cli(["resume", str(stopped), "--total-updates", "3", "--quiet"])
    assert code == 0, stderr

    def losses(run_dir: Path) -> list[float]:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return [r["train/loss"] for r in map(json.loads, lines) if r["kind"] == "train"]

    assert losses(stopped) == losses(fresh) and len(losses(fresh)) == 3


def test_a_wrongly_typed_metrics_line_is_dropped_with_a_warning(run_copy):
    path = run_copy / "metrics.jsonl"
    lines = path.read_text().splitlines()
    lines.insert(2, '{"kind": "train", "num_updates": "abc"}')
    path.write_text("\n".join(lines) + "\n")
    plot = pathgrad("plot", str(run_copy), "-o", "c.png", cwd=run_copy.parent)
    assert_usage_error(plot, "line 3", "num_updates that is not a number")
    result = pathgrad("resume", str(run_copy), "--total-updates", "8", "--quiet",
                      cwd=run_copy.parent)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"pathgrad: warning: '{path}' line 3 has a num_updates that is not a number (\"abc\"); "
        "the line is dropped"
    ]
    assert json.loads((run_copy / "summary.json").read_text())["status"] == "completed"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["num_updates"] for r in records if r["kind"] == "train"] == list(range(1, 9))


def test_a_cut_last_metrics_line_is_named_and_written_again_from_the_checkpoint(run_copy):
    """The last line (update 6, which the final checkpoint holds) cut short: the resume
    says so and writes it again from the checkpoint's metrics; nothing is lost."""
    path = run_copy / "metrics.jsonl"
    lines = path.read_text().splitlines()
    assert json.loads(lines[-1])["num_updates"] == 6
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:25])  # a write stopped midway
    result = pathgrad("resume", str(run_copy), "--total-updates", "8", "--quiet",
                      cwd=run_copy.parent)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"pathgrad: warning: '{path}' line {len(lines)} is cut short (a write stopped midway); "
        "the line is dropped",
        f"pathgrad: warning: '{path}' had no train line for num_updates 6, the checkpoint's; "
        "it is written again from the checkpoint",
    ]
    sixth = json.loads(path.read_text().splitlines()[5])
    assert {k: v for k, v in sixth.items() if k != "time"} == {
        k: v for k, v in json.loads(lines[-1]).items() if k != "time"
    }
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["num_updates"] for r in records if r["kind"] == "train"] == list(range(1, 9))


def test_unlisted_checkpoints_are_taken_in_and_then_pruned(run_copy):
    directory = run_copy / "checkpoints"
    entries = read_index(directory)
    # A kill (or a full disk) between the last periodic file and its index entry.
    newest = [e for e in entries if e["kind"] == "periodic"][-1]
    kept = [e for e in entries if e["file"] != newest["file"] and e["kind"] != "final"]
    (directory / "index.json").write_text(json.dumps({"checkpoints": kept}))
    for final in directory.glob("*_final_*.pt"):
        final.unlink()
    (directory / "stray.pt").write_bytes(b"half a file")
    result = pathgrad("resume", str(run_copy), "--total-updates", "12", cwd=run_copy.parent)
    assert result.returncode == 0, result.stderr
    assert f"from {newest['file']}: update {newest['num_updates']}" in result.stdout
    (warning,) = result.stderr.splitlines()
    assert warning.startswith(
        f"pathgrad: warning: '{directory / 'stray.pt'}' cannot be read and is left out of "
        "index.json: is not a readable pathgrad checkpoint"
    ), warning
    files = sorted(path.name for path in directory.glob("*.pt"))
    assert files == ["point_mass_final_step_6144.pt", "point_mass_step_5120.pt",
                     "point_mass_step_6144.pt", "stray.pt"]  # fmt: skip
    assert {e["file"] for e in read_index(directory)} == set(files) - {"stray.pt"}


def no_space(limit_path: str):
    def write(path, writer):
        if limit_path in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return original(path, writer)

    original = checkpoint_module.atomic_write
    return write


def test_a_full_disk_during_training_ends_the_run_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(checkpoint_module, "atomic_write", no_space("_step_2048"))
    code = main(["train", *SAVING, "trainer.keep_last_checkpoints=0"])
    assert code == 1
    (run_dir,) = Path("runs").iterdir()
    first = run_dir / "checkpoints" / "point_mass_step_1024.pt"
    assert capsys.readouterr().err.splitlines() == [
        f"pathgrad: error: cannot write '{run_dir}/checkpoints/point_mass_step_2048.pt': no "
        f"space left on device; the run stopped after update 4 and its last checkpoint "
        f"{first} is intact (`pathgrad resume {run_dir}` once the cause is fixed)."
    ]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and "no space left on device" in summary["error"]
    assert read_checkpoint(first)["num_updates"] == 2
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    assert main(["resume", str(run_dir), "--quiet"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and "error" not in summary


def test_a_train_that_cannot_write_its_config_leaves_no_run_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)

    def full(path, writer):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(run_module, "atomic_write", full)
    assert main(["train", *FAST]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert "No space left on device" in line and "config.yaml" in line
    assert list((tmp_path / "runs").iterdir()) == []


def test_train_into_a_named_run_directory_never_takes_a_used_one(tmp_path):
    result = pathgrad("train", *FAST, "--run-dir", "mine/first", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "mine" / "first" / "summary.json").is_file()
    before = snapshot(tmp_path / "mine")
    again = pathgrad("train", *FAST, "--run-dir", "mine/first", cwd=tmp_path)
    assert_usage_error(again, "--run-dir: 'mine/first' already holds files", "pathgrad resume")
    assert snapshot(tmp_path / "mine") == before
    (tmp_path / "empty").mkdir()
    assert pathgrad("train", *FAST, "--run-dir", "empty", cwd=tmp_path).returncode == 0
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("find", "replace", "named"),
    [
        ("learning_rate: 0.003", "learning_rate: 0.01",
         "algorithm.cfg.optimizer.learning_rate: 0.003 -> 0.01"),
        ("num_envs: 16", "num_envs: 8", "env.num_envs: 16 -> 8"),
        ("  - 64\n  - 64\n", "  - 32\n  - 64\n", "policy.hidden_sizes: [64, 64] -> [32, 64]"),
        ("  cfg: {}\n  train_cfg", "  cfg: {dt: 0.1}\n  train_cfg", "env.cfg.dt: (not set) -> 0.1"),
    ],
)  # fmt: skip
def test_an_edited_config_yaml_is_refused_naming_the_key(run_copy, find, replace, named):
    config_file = run_copy / "config.yaml"
    text = config_file.read_text()
    assert find in text
    config_file.write_text(text.replace(find, replace, 1))
    before = snapshot(run_copy)
    result = pathgrad("resume", str(run_copy), "--total-updates", "8", cwd=run_copy.parent)
    assert_usage_error(result, "differs from the config", named, "nothing was changed")
    assert unchanged(before, snapshot(run_copy))
    config_file.write_text(text)  # undone: the run resumes
    result = pathgrad("resume", str(run_copy), "--total-updates", "8", "--num-threads", "1",
                      "--quiet", cwd=run_copy.parent)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert read_index(run_copy / "checkpoints")[-1]["num_updates"] == 8


def test_resume_options_and_logging_edits_are_not_edits(run_copy):
    config_file = run_copy / "config.yaml"
    config_file.write_text(
        config_file.read_text().replace("tensorboard: true", "tensorboard: false")
    )
    result = pathgrad("resume", str(run_copy), "--total-timesteps", "4096", "--quiet",
                      cwd=run_copy.parent)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert json.loads((run_copy / "summary.json").read_text())["num_updates"] == 8  # 16 x 32 each


def test_an_emptied_config_yaml_is_refused_with_where_the_config_is_kept(run_copy):
    (run_copy / "config.yaml").write_text("# cleared by an editor\n")
    before = snapshot(run_copy)
    result = pathgrad("resume", str(run_copy), "--total-updates", "8", cwd=run_copy.parent)
    assert_usage_error(
        result, "config.yaml' holds no sections", "each checkpoint holds the config it was trained"
    )
    assert unchanged(before, snapshot(run_copy))


def test_a_damaged_provenance_file_is_kept_aside_not_overwritten(run_copy):
    (run_copy / "provenance.json").write_text("garbage")
    result = pathgrad("resume", str(run_copy), "--total-updates", "7", "--quiet",
                      cwd=run_copy.parent)  # fmt: skip
    assert result.returncode == 0, result.stderr
    (aside,) = run_copy.glob("provenance.json.corrupt-*")
    assert aside.read_text() == "garbage"
    assert result.stderr.splitlines() == [
        f"pathgrad: warning: '{run_copy / 'provenance.json'}' could not be read "
        f"(JSONDecodeError); it is kept as '{aside.name}' and a new one started"
    ]
    (entry,) = json.loads((run_copy / "provenance.json").read_text())["invocations"]
    assert entry["command"] == "resume"


def test_another_task_s_checkpoint_is_named_as_such(run_copy, tmp_path):
    (tmp_path / "other").mkdir()
    other = train_run(tmp_path / "other", str(ROOT / "configs" / "pendulum.yaml"),
                      "trainer.total_updates=1", "env.num_envs=8", "eval.frequency_steps=0",
                      "--quiet")  # fmt: skip
    (foreign,) = (other / "checkpoints").glob("*final*.pt")
    before = snapshot(run_copy)
    result = pathgrad("resume", str(run_copy), "--checkpoint", str(foreign), cwd=run_copy.parent)
    assert_usage_error(result, f"{foreign} was trained with env.name Pendulum, but "
                       f"{run_copy / 'config.yaml'} has PointMass: the checkpoint is another "
                       "run's, or the file was edited; nothing was changed.")  # fmt: skip
    assert unchanged(before, snapshot(run_copy))


def test_an_unreadable_latest_checkpoint_names_the_newest_readable_one(run_copy):
    directory = run_copy / "checkpoints"
    latest = directory / read_index(directory)[-1]["file"]
    damage(latest, "truncated")
    before = snapshot(run_copy)
    result = pathgrad("resume", str(run_copy), "--total-updates", "8", cwd=run_copy.parent)
    earlier = directory / read_index(directory)[-2]["file"]
    advice = (f"The newest readable checkpoint is '{earlier.name}' (update 6): "
              f"`pathgrad resume {run_copy} --checkpoint {earlier}` continues from it")  # fmt: skip
    assert_usage_error(result, f"'{latest}' is not a readable pathgrad checkpoint", advice)
    assert unchanged(before, snapshot(run_copy))
