"""``pathgrad resume RUN --device X``: a run continued on another torch device than its own."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from helpers import copy_run, run_cli, train_run
from pathgrad.checkpoint import read_checkpoint
from pathgrad.core.run_index import latest_checkpoint
from pathgrad.envs import PointMass
from pathgrad.runs.run import SWEEP_FILE

SHORT = ["configs/point_mass.yaml", "env.num_envs=8", "trainer.total_updates=2",
         "eval.frequency_steps=0", "logging.tensorboard=false", "--quiet"]  # fmt: skip
CUDA_STATE = torch.arange(16, dtype=torch.uint8)  # the size a CUDA (Philox) generator saves


def loaded(generator_state: torch.Tensor, seed: int) -> PointMass:
    """A PointMass of its own ``seed`` loaded with a saved state holding ``generator_state``."""
    source = PointMass(num_envs=8, seed=0)
    env = PointMass(num_envs=8, seed=seed)
    env.load_state_dict({**source.state_dict(), "generator": generator_state})
    return env


def draws_equal(first: PointMass, second: PointMass) -> bool:
    one, two = first.draw_reset_states(), second.draw_reset_states()
    return all(torch.equal(one[key], two[key]) for key in one)


def test_a_generator_state_of_another_device_type_reseeds_deterministically():
    # Envs of different seeds: equal draws come from the saved state alone.
    assert draws_equal(loaded(CUDA_STATE, seed=1), loaded(CUDA_STATE.clone(), seed=2))
    other = CUDA_STATE.clone()
    other[-1] += 1  # another offset of the same generator
    assert not draws_equal(loaded(CUDA_STATE, seed=1), loaded(other, seed=1))


def test_a_generator_state_of_the_same_device_type_still_restores_exactly():
    source = PointMass(num_envs=8, seed=3)
    source.draw_reset_states()  # a state past the seed
    saved = source.state_dict()
    env = PointMass(num_envs=8, seed=4)
    env.load_state_dict(saved)
    assert torch.equal(env.generator.get_state(), source.generator.get_state())
    assert draws_equal(env, source)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    return train_run(tmp_path_factory.mktemp("device"), *SHORT)


@pytest.fixture
def run_copy(trained, tmp_path) -> Path:
    return copy_run(trained, tmp_path)


def as_if_trained_on_cuda(run_dir: Path) -> None:
    """Give the run's checkpoints what a CUDA run saves: 16-byte env generators, CUDA RNG."""
    for path in (run_dir / "checkpoints").glob("*.pt"):
        contents = torch.load(path, weights_only=True)
        for name in ("env", "eval_env"):
            if contents.get(name) is not None:
                contents[name]["generator"] = CUDA_STATE.clone()
        contents["rng"]["cuda"] = [CUDA_STATE.clone()]
        torch.save(contents, path)


def updates(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return [record for record in records if "num_updates" in record]


def resume(run_dir: Path, *args: str) -> tuple[int, str, str]:
    return run_cli(["resume", str(run_dir), *args], cwd=run_dir.parent)


def test_resume_on_cpu_continues_and_records_the_device(run_copy):
    code, _, stderr = resume(run_copy, "--total-updates", "3", "--device", "cpu", "--quiet")
    assert code == 0, stderr
    summary = json.loads((run_copy / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["num_updates"] == 3
    assert updates(run_copy)[-1]["num_updates"] == 3
    config = yaml.safe_load((run_copy / "config.yaml").read_text())
    assert config["env"]["device"] == "cpu" and config["trainer"]["total_updates"] == 3
    last = json.loads((run_copy / "provenance.json").read_text())["invocations"][-1]
    assert last["command"] == "resume" and "env.device=cpu" in last["overrides"]
    assert last["argv"][-3:-1] == ["--device", "cpu"]


def test_a_checkpoint_saved_on_cuda_continues_on_cpu_the_same_way_twice(trained, tmp_path):
    runs, generators = [], []
    for name in ("first", "second"):
        run_dir = Path(shutil.copytree(trained, tmp_path / name))
        as_if_trained_on_cuda(run_dir)
        code, _, stderr = resume(run_dir, "--total-updates", "3", "--device", "cpu", "--quiet")
        assert code == 0, stderr
        last = updates(run_dir)[-1]
        runs.append({key: value for key, value in last.items() if key.startswith("train/")})
        assert last["num_updates"] == 3
        final = read_checkpoint(latest_checkpoint(run_dir / "checkpoints"))
        assert final["num_updates"] == 3
        generators.append(final["env"]["generator"])
    assert runs[0] == runs[1]
    assert generators[0].numel() == 5056 and torch.equal(generators[0], generators[1])


def test_an_unavailable_device_is_one_line_naming_env_device_and_changes_nothing(run_copy):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    before = {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file()}
    code, stdout, stderr = resume(run_copy, "--total-updates", "3", "--device", "cuda")
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "env.device" in lines[0] and "cuda" in lines[0], stderr
    assert "Traceback" not in stderr and stdout == ""
    assert (run_copy / "config.yaml").read_bytes() == before[run_copy / "config.yaml"]
    assert {p: p.read_bytes() for p in run_copy.rglob("*") if p.is_file()} == before


def test_a_sweep_folder_refuses_device_naming_the_flag(tmp_path):
    (tmp_path / SWEEP_FILE).write_text("{}")
    code, _, stderr = run_cli(["resume", str(tmp_path), "--device", "cpu"], cwd=tmp_path)
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "--device" in lines[0] and "sweep" in lines[0], stderr
