"""The real `pathgrad` console script, driven in subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

import warm_processes
from helpers import ROOT, run_cli
from pathgrad import __version__ as PATHGRAD_VERSION
from pathgrad.checkpoint import read_checkpoint, read_index
from pathgrad.export import read_metadata
from pathgrad.normalization import RunningObservationNormalizer
from pathgrad.policies import GaussianMLPPolicy
from pathgrad.runs.config import load_config

PATHGRAD = str(Path(sys.executable).parent / "pathgrad")
FAST = ["trainer.total_updates=6", "eval.frequency_steps=4096", "env.num_envs=16", "--quiet"]


def pathgrad(
    *args: str, cwd: Path, check: bool = True, process: bool = False
) -> subprocess.CompletedProcess:
    """The command's result: run in this process, or with ``process`` the installed script."""
    if process:
        result = subprocess.run([PATHGRAD, *args], cwd=cwd, capture_output=True, text=True)
    else:
        code, stdout, stderr = run_cli(args, cwd=cwd)
        result = subprocess.CompletedProcess([PATHGRAD, *args], code, stdout, stderr)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def only_run(tmp_path: Path) -> Path:
    (run_dir,) = (tmp_path / "runs").iterdir()
    return run_dir


def train_records(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "train"]


def test_default_task_is_the_point_mass_config():
    assert load_config(None) == load_config(ROOT / "configs" / "point_mass.yaml")
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        load_config(path)  # every shipped config is valid


def test_train_writes_a_complete_run_directory(tmp_path):
    pathgrad("train", str(ROOT / "configs" / "point_mass.yaml"), *FAST, cwd=tmp_path, process=True)
    run_dir = only_run(tmp_path)
    assert run_dir.name.startswith("point_mass-")
    assert {p.name for p in run_dir.iterdir()} >= {
        "config.yaml",
        "checkpoints",
        "tb",
        "metrics.jsonl",
        "summary.json",
        "learning_curve.png",
    }
    records = train_records(run_dir)
    assert [r["num_updates"] for r in records] == [1, 2, 3, 4, 5, 6]
    assert all(r["global_step"] == 16 * 32 * r["num_updates"] for r in records)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["num_updates"] == 6
    assert summary["last_eval_metrics"]["global_step"] == 6 * 16 * 32  # final evaluation
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    evaluations = [r for r in map(json.loads, lines) if r["kind"] == "eval"]
    best = max(evaluations, key=lambda r: r["eval/avg_reward"])  # the first of equals
    assert summary["best_evaluation"] == {"metric": "eval/avg_reward",
                                          "value": best["eval/avg_reward"],
                                          "global_step": best["global_step"],
                                          "time": best["time"]}  # fmt: skip
    kinds = [e["kind"] for e in read_index(run_dir / "checkpoints")]
    assert kinds[-1] == "final" and "best" in kinds
    assert list((run_dir / "tb").iterdir())
    assert (run_dir / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_config_yaml_repeats_the_run_exactly(tmp_path):
    pathgrad("train", *FAST, "logging.runs_dir=first", cwd=tmp_path)
    (first,) = (tmp_path / "first").iterdir()
    pathgrad(
        "train", str(first / "config.yaml"), "logging.runs_dir=second", "--quiet", cwd=tmp_path
    )
    (second,) = (tmp_path / "second").iterdir()
    ignore = {"time", "charts/SPS"}
    strip = lambda records: [{k: v for k, v in r.items() if k not in ignore} for r in records]  # noqa: E731
    assert strip(train_records(first)) == strip(train_records(second))


def test_resume_continues_counters_curves_and_logs(tmp_path):
    pathgrad("train", *FAST, cwd=tmp_path)
    run_dir = only_run(tmp_path)
    result = pathgrad("resume", str(run_dir), "--total-updates", "10", cwd=tmp_path)
    assert "resuming" in result.stdout and "update 6" in result.stdout
    records = train_records(run_dir)
    assert [r["num_updates"] for r in records] == list(range(1, 11))
    times = [r["time"] for r in records]
    assert times == sorted(times)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["num_updates"] == 10 and summary["global_step"] == 10 * 16 * 32
    assert load_config(run_dir / "config.yaml").trainer.total_updates == 10
    pathgrad(
        "resume",
        str(run_dir),
        "--total-updates",
        "11",
        "--restart-scheduler",
        "--quiet",
        cwd=tmp_path,
    )
    assert train_records(run_dir)[-1]["num_updates"] == 11


def test_eval_plot_and_envs(tmp_path):
    pathgrad("train", *FAST, cwd=tmp_path)
    run_dir = only_run(tmp_path)
    result = pathgrad(
        "eval", str(run_dir), "--episodes", "5", "--seed", "3", "--json", cwd=tmp_path
    )
    metrics = json.loads(result.stdout)
    assert metrics["episodes"] == 5 and metrics["num_updates"] == 6
    assert {"eval/avg_reward", "eval/success_rate", "eval/final_distance"} <= set(metrics)
    again = json.loads(
        pathgrad(
            "eval", str(run_dir), "--episodes", "5", "--seed", "3", "--json", cwd=tmp_path
        ).stdout
    )
    assert again == metrics
    table = pathgrad("eval", str(next((run_dir / "checkpoints").glob("*final*.pt"))), cwd=tmp_path)
    assert "eval/avg_reward" in table.stdout
    pathgrad("plot", str(run_dir), str(run_dir), "-o", "both.png", cwd=tmp_path)
    assert (tmp_path / "both.png").read_bytes()[:4] == b"\x89PNG"
    pathgrad("plot", str(run_dir), "--metric", "final_distance", "-o", "d.png", cwd=tmp_path)
    assert (tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG"
    unknown = pathgrad("plot", str(run_dir), "--metric", "speed", cwd=tmp_path, check=False)
    assert unknown.returncode == 2 and "no run has the evaluation metric 'eval/speed'" in (
        unknown.stderr
    )
    with warnings.catch_warnings(record=True) as caught:  # a listing, not a wall of notes
        warnings.simplefilter("always")
        listing = pathgrad("envs", cwd=tmp_path).stdout
    assert not [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    for name in ("PointMass", "Pendulum", "MountainCarContinuous", "Reacher", "Quadrotor"):
        assert name in listing


def run_exported(path: Path, observations: torch.Tensor) -> torch.Tensor:
    """Actions of an exported file, loaded without pathgrad (torch.export or onnxruntime)."""
    if path.suffix == ".pt2":
        return torch.export.load(str(path)).module()(observations)
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path))
    return torch.from_numpy(session.run(None, {"observation": observations.numpy()})[0])


@pytest.mark.parametrize("name", ["policy.pt2", "policy.onnx"])
def test_export_round_trip_matches_the_policy(tmp_path, name):
    pathgrad("train", *FAST, "trainer.normalize_observations=true", cwd=tmp_path)
    run_dir = only_run(tmp_path)
    checkpoint_path = next((run_dir / "checkpoints").glob("*final*.pt"))
    result = pathgrad("export", str(run_dir), "-o", name, cwd=tmp_path)
    assert "observations [B, 6] -> actions" in result.stdout
    checkpoint = read_checkpoint(checkpoint_path)
    policy = GaussianMLPPolicy(6, 2, squash=True)  # the default config squashes
    policy.load_state_dict(checkpoint["policy"])
    normalizer = RunningObservationNormalizer(6)
    normalizer.load_state_dict(checkpoint["observation_normalizer"])
    assert float(normalizer.count) > 0
    for batch in (1, 32):  # any batch size
        observations = torch.randn(batch, 6) * 3
        expected = policy.get_action(normalizer.normalize(observations))
        assert torch.allclose(run_exported(tmp_path / name, observations), expected, atol=1e-5)
    metadata = read_metadata(tmp_path / name)
    assert metadata["env"] == "PointMass" and metadata["action_space"]["shape"] == [2]
    assert metadata["observation_space"]["shape"] == [6]
    assert metadata["source_checkpoint"] == str(checkpoint_path)
    assert metadata["observation_normalizer_folded_in"] is True
    assert metadata["pathgrad_version"] == PATHGRAD_VERSION
    assert metadata["torch_version"] == torch.__version__


def test_export_refuses_other_formats_and_writes_nothing(tmp_path):
    pathgrad("train", *FAST, cwd=tmp_path)
    result = pathgrad("export", str(only_run(tmp_path)), "-o", "policy.pt", cwd=tmp_path,
                      check=False)  # fmt: skip
    assert result.returncode == 2
    assert "give a .pt2 (torch.export) or .onnx file name" in result.stderr
    assert not (tmp_path / "policy.pt").exists()


@pytest.mark.parametrize(
    ("signum", "status", "code"),
    [(signal.SIGINT, "interrupted", 130), (signal.SIGTERM, "terminated", 143)],
)
def test_signals_leave_a_resumable_run(tmp_path, signum, status, code):
    process = warm_processes.start(
        [PATHGRAD, "train", "trainer.total_updates=100000", "env.num_envs=16", "--quiet"],
        cwd=tmp_path,
    )
    deadline = time.time() + 120
    while time.time() < deadline:
        runs = list((tmp_path / "runs").glob("*/metrics.jsonl"))
        if runs and len(runs[0].read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == code, stderr
    run_dir = only_run(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == status
    stopped_at = summary["num_updates"]
    assert not list(run_dir.rglob("*.tmp"))  # no half-written file
    entries = read_index(run_dir / "checkpoints")
    assert entries[-1]["kind"] == "final" and entries[-1]["num_updates"] == stopped_at
    pathgrad(
        "resume", str(run_dir), "--total-updates", str(stopped_at + 2), "--quiet", cwd=tmp_path
    )
    assert train_records(run_dir)[-1]["num_updates"] == stopped_at + 2


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    return str(path)


MALFORMED = [
    ("trainr:\n  seed: 1\n", "trainr: unknown key (did you mean 'trainer'?)"),
    (
        "trainer:\n  segment_lenght: 8\n",
        "trainer.segment_lenght: unknown key (did you mean 'segment_length'?)",
    ),
    (
        "trainer:\n  segment_length: abc\n",
        "trainer.segment_length: input should be a valid integer",
    ),
    ("trainer:\n  segment_length: 0\n", "trainer: segment_length must be positive."),
    (
        "trainer:\n  rollout_mode: tbptt\n",
        "trainer: rollout_mode must be 'segmented' or 'complete'.",
    ),
    (
        "trainer:\n  total_timesteps: 1000\n  total_updates: 5\n",
        "trainer: give exactly one of total_timesteps and total_updates",
    ),
    ("env:\n  device: cuda:7\n", "env.device: 'cuda:7' is not available"),
    ("env:\n  device: gpu\n", "env.device: 'gpu' is not a torch device"),
    ("trainer:\n  seed: -1\n", "trainer.seed: input should be greater than or equal to 0"),
    ("trainer:\n  best_eval_mode: best\n", "trainer: best_eval_mode must be 'min' or 'max'."),
    ("env:\n  name: PointMas\n", "env.name: unknown env 'PointMas' (did you mean 'PointMass'?)"),
    ("env:\n  num_envs: -4\n", "env.num_envs: input should be greater than 0"),
    ("env:\n  dtype: float16\n", "env.dtype: input should be 'float32' or 'float64'"),
    ("env:\n  cfg:\n    dampng: 1.0\n", "env.cfg.dampng: unknown key (did you mean 'damping'?)"),
    ("env:\n  cfg:\n    dt: fast\n", "env.cfg.dt: input should be a valid number"),
    ("env:\n  cfg:\n    num_env: 8\n", "env.cfg.num_env: unknown key (did you mean 'env.num_envs'"),
    ("env:\n  cfg:\n    dt: -0.1\n", "env.cfg: dt must be positive"),
    ("env:\n  cfg:\n    seed: 3\n", "env.cfg.seed: set by the env section or trainer.seed"),
    ("algorithm:\n  name: ppo\n", "algorithm.name: Unknown algorithm 'ppo'"),
    (
        "algorithm:\n  cfg:\n    gama: 0.9\n",
        "algorithm.cfg.gama: unknown key (did you mean 'gamma'?)",
    ),
    (
        "algorithm:\n  cfg:\n    learning_rate: 0.1\n",
        "algorithm.cfg.learning_rate: unknown key "
        "(did you mean 'algorithm.cfg.optimizer.learning_rate'?)",
    ),
    (
        "algorithm:\n  cfg:\n    optimizer:\n      learning_rat: 0.1\n",
        "algorithm.cfg.optimizer.learning_rat: unknown key (did you mean 'learning_rate'?)",
    ),
    (
        "algorithm:\n  cfg:\n    optimizer:\n      learning_rate: -1.0\n",
        "algorithm.cfg: optimizer.learning_rate must be positive",
    ),
    (
        "algorithm:\n  cfg:\n    gamma: nope\n",
        "algorithm.cfg.gamma: input should be a valid number",
    ),
    (
        "algorithm:\n  cfg:\n    lr_scheduler: {name: plateau}\n",
        "algorithm.cfg: lr_scheduler.name must be one of",
    ),
    ("policy:\n  activation: swish\n", "policy.activation: input should be"),
    ("policy:\n  hidden_sizes: 64\n", "policy.hidden_sizes: input should be a valid list"),
    ("eval:\n  episodes: 0\n", "eval.episodes: input should be greater than 0"),
    ("logging:\n  wandb: yes please\n", "logging.wandb: input should be a valid boolean"),
    ("- just\n- a list\n", "must hold a mapping of sections"),
    (
        "algorithm:\n  name: shac\ntrainer:\n  rollout_mode: complete\n",
        "SHAC supports rollout_mode",
    ),
    ("algorithm:\n  name: shac\n  cfg:\n    lam: 2.0\n", "algorithm.cfg: lam must be in [0, 1]"),
    ("trainer:\n  seed: [1\n", "YAML syntax error in"),
    ("# my robot, to fill in\n", "config file 'bad.yaml' holds no sections (it is empty"),
    ("", "config file 'bad.yaml' holds no sections"),
    (  # PyYAML would keep the second section alone
        "trainer:\n  total_updates: 5\nenv:\n  name: PointMass\ntrainer:\n  seed: 3\n",
        "'bad.yaml' line 5, column 1: key 'trainer' is given twice (first at line 1)",
    ),
    ("env: {name: PointMass, name: Pendulum}\n", "key 'name' is given twice (first at line 1)"),
    (b"env:\n  name: Point\xe9Mass\n", "config file 'bad.yaml' is not UTF-8 text (byte 18"),
    (  # checked before the run directory exists, not at the first update
        "trainer:\n  total_updates: 500\nalgorithm:\n  cfg:\n    lr_scheduler:\n"
        "      name: linear\n      kwargs: {total_iters: 100}\n",
        "algorithm.cfg.lr_scheduler: The learning-rate schedule ends after 100 updates",
    ),
    (
        "trainer:\n  total_updates: 5\nalgorithm:\n  cfg:\n    lr_scheduler:\n"
        "      name: linear\n      warmup_updates: 5\n",
        "lr_scheduler.warmup_updates (5) must be smaller than the update budget (5)",
    ),
]


def test_malformed_configs_exit_2_naming_the_key_and_write_nothing(tmp_path):
    assert len(MALFORMED) >= 15
    for index, (text, expected) in enumerate(MALFORMED):
        folder = tmp_path / f"case{index}"
        folder.mkdir()
        bad = folder / "bad.yaml"
        bad.write_bytes(text) if isinstance(text, bytes) else bad.write_text(text)
        if index == 0:  # the installed command, once; the others in this process
            command = [PATHGRAD, "train", "bad.yaml", "--quiet"]
            result = subprocess.run(command, cwd=folder, capture_output=True, text=True)
            code, stderr = result.returncode, result.stderr
        else:
            code, _, stderr = run_cli(["train", "bad.yaml", "--quiet"], cwd=folder)
        assert code == 2, (text, stderr)
        assert expected in stderr, (expected, stderr)
        assert len(stderr.strip().splitlines()) == 1, stderr
        assert [p.name for p in folder.iterdir()] == ["bad.yaml"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["train", "missing.yaml"], "cannot read config file 'missing.yaml'"),
        (["train", "trainer.seed"], "cannot read config file 'trainer.seed'"),
        (["train", "trainer.segment_length=0"], "trainer: segment_length must be positive."),
        (["train", "trainer..seed=1"], "override 'trainer..seed=1' must look like"),
        (["resume", "nowhere"], "'nowhere' does not exist."),
        (["plot", "nowhere"], "'nowhere' does not exist."),
        (["eval", "nothing.pt"], "Checkpoint 'nothing.pt' does not exist."),
    ],
)
def test_command_line_errors_exit_2(tmp_path, args, expected):
    code, _, stderr = run_cli(args, cwd=tmp_path)
    assert code == 2 and expected in stderr, stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["resume", "notes.txt"], "'notes.txt' is a file, not a run directory."),
        (["resume", "folder"], "'folder' is not a run directory (no config.yaml)."),
        (["eval", "notes.txt"], "'notes.txt' is not a readable pathgrad checkpoint (truncated, "
         "corrupted or foreign file): not the zip archive torch.save writes."),
        (["eval", "folder/x.pt"], "'folder/x.pt' is not a run directory (no config.yaml, no "
         "checkpoints/); give a run directory or a checkpoint file."),
    ],
)  # fmt: skip
def test_a_path_of_the_wrong_kind_is_named_as_such(tmp_path, args, expected):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "folder" / "x.pt").mkdir(parents=True)
    code, _, stderr = run_cli(args, cwd=tmp_path)
    assert code == 2 and stderr.strip() == f"pathgrad: error: {expected}", stderr


def test_wandb_offline_logging_and_a_clear_error_without_wandb(tmp_path):
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    command = [PATHGRAD, "train", *FAST, "logging.wandb=true"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    assert list((only_run(tmp_path) / "wandb").glob("offline-run-*"))

    shadow = tmp_path / "no_wandb" / "wandb"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('wandb is not installed')\n")
    env["PYTHONPATH"] = str(shadow.parent)
    (tmp_path / "fresh").mkdir()
    result = subprocess.run(
        command, cwd=tmp_path / "fresh", capture_output=True, text=True, env=env
    )
    assert result.returncode == 2
    assert "logging.wandb: true needs the 'wandb' package" in result.stderr
    assert list((tmp_path / "fresh").iterdir()) == []


def test_configuration_reference_is_up_to_date():
    from pathgrad.runs.config_reference import reference_markdown

    generated = reference_markdown()
    assert (ROOT / "docs" / "configuration.md").read_text() == generated, (
        "run: python -m pathgrad.runs.config_reference > docs/configuration.md"
    )
    config = load_config(None).model_dump()
    for section, values in config.items():
        for key in values:
            assert f"`{section}.{key}`" in generated


def test_shac_trains_through_the_command_line(tmp_path):
    pathgrad("train", "algorithm.name=shac", "algorithm.cfg.critic_epochs=2", *FAST, cwd=tmp_path)
    records = train_records(only_run(tmp_path))
    assert len(records) == 6 and all(r["train/value_loss"] is not None for r in records)
    assert "train/explained_variance" in records[-1]


def test_print_config_prints_the_resolved_config_and_writes_nothing(tmp_path):
    result = pathgrad("train", "trainer.seed=3", "env.num_envs=8", "--print-config", cwd=tmp_path)
    (tmp_path / "printed.yaml").write_text(result.stdout)
    printed = load_config(tmp_path / "printed.yaml")
    assert printed.trainer.seed == 3 and printed.env.num_envs == 8
    assert printed == load_config(None, ["trainer.seed=3", "env.num_envs=8"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["printed.yaml"]  # no run


def test_a_run_records_where_it_came_from(tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "notes.txt").write_text("a")
    subprocess.run(["git", "add", "notes.txt"], cwd=tmp_path, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c"],
        cwd=tmp_path, check=True,
    )  # fmt: skip
    (tmp_path / "notes.txt").write_text("changed")  # a dirty working tree
    pathgrad("train", *FAST, "trainer.seed=5", cwd=tmp_path)
    run_dir = only_run(tmp_path)
    pathgrad("resume", str(run_dir), "--total-updates", "8", "--quiet", cwd=tmp_path)
    entries = json.loads((run_dir / "provenance.json").read_text())["invocations"]
    assert [entry["command"] for entry in entries] == ["train", "resume"]
    first = entries[0]
    assert first["argv"][1:] == ["train", *FAST, "trainer.seed=5"]
    assert "trainer.seed=5" in first["overrides"]
    assert first["git"]["dirty"] is True and len(first["git"]["commit"]) == 40
    assert first["torch_version"] == torch.__version__
    assert first["pathgrad_version"] == PATHGRAD_VERSION and first["world_size"] == 1
    assert entries[1]["overrides"][0] == "trainer.total_updates=8"
