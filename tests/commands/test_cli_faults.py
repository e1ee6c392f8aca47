"""Bad files, paths and timing at the command line: one line on stderr, exit 2, nothing lost."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import warm_processes
from helpers import copy_run, run_cli, train_run
from pathgrad.checkpoint import read_index
from pathgrad.runs.config import load_config
from pathgrad.runs.run import RunLock, create_run_dir

PATHGRAD = str(Path(sys.executable).parent / "pathgrad")
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
FAST = ["trainer.total_updates=6", "eval.frequency_steps=4096", "env.num_envs=16", "--quiet"]


def pathgrad(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The command's result, run in this process (the tests that need a process start one)."""
    code, stdout, stderr = run_cli(args, cwd=cwd)
    return subprocess.CompletedProcess([PATHGRAD, *args], code, stdout, stderr)


def assert_usage_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    return train_run(tmp_path_factory.mktemp("trained"), *FAST)


@pytest.fixture
def run_copy(trained, tmp_path) -> Path:
    return copy_run(trained, tmp_path)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"checkpoints": [', "is not valid JSON"),
        ("", "is empty"),
        ('{"checkpoints": 3}', "'checkpoints' list"),
        ('{"checkpoints": [{"kind": "final"}]}', "checkpoints[0] must be an object"),
    ],
)
def test_a_malformed_index_stops_resume_and_eval_and_loses_nothing(run_copy, text, fragment):
    index = run_copy / "checkpoints" / "index.json"
    index.write_text(text)
    before = snapshot(run_copy)
    assert_usage_error(pathgrad("resume", str(run_copy), cwd=run_copy.parent), fragment,
                       "--rebuild-index")  # fmt: skip
    assert_usage_error(pathgrad("eval", str(run_copy), cwd=run_copy.parent), fragment)
    after = snapshot(run_copy)
    after.pop(".lock", None)
    before.pop(".lock", None)
    assert after == before


def test_rebuild_index_and_an_explicit_checkpoint_recover_a_run(run_copy):
    (run_copy / "checkpoints" / "index.json").write_text('{"checkpoints": [')
    result = pathgrad("resume", str(run_copy), "--rebuild-index", "--total-updates", "8",
                      "--quiet", cwd=run_copy.parent)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert read_index(run_copy / "checkpoints")[-1]["num_updates"] == 8
    assert list((run_copy / "checkpoints").glob("index.json.corrupt-*"))
    first = next((run_copy / "checkpoints").glob("*_final_step_3072.pt"))  # update 6
    result = pathgrad("resume", str(run_copy), "--checkpoint", str(first), "--total-updates",
                      "9", "--quiet", cwd=run_copy.parent)  # fmt: skip
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (run_copy / "metrics.jsonl").read_text().splitlines()]
    assert [r["num_updates"] for r in records if r["kind"] == "train"] == list(range(1, 10))


def test_bad_checkpoint_files_are_one_line_errors(trained, tmp_path):
    empty = tmp_path / "empty.pt"
    empty.touch()
    assert_usage_error(pathgrad("eval", str(empty), cwd=tmp_path), "is empty")
    final = next((trained / "checkpoints").glob("*final*.pt"))
    checkpoint = torch.load(final, weights_only=True)
    invalid = tmp_path / "invalid.pt"
    torch.save({**checkpoint, "config": {**checkpoint["config"], "env": {"num_envs": -1}}}, invalid)
    assert_usage_error(pathgrad("eval", str(invalid), cwd=tmp_path),
                       "carries an invalid run config", "env.num_envs")  # fmt: skip
    assert_usage_error(pathgrad("eval", str(final), "--device", "nope", cwd=tmp_path),
                       "--device: 'nope' is not a torch device")  # fmt: skip
    policy = dict(checkpoint["config"]["policy"], hidden_sizes=[32])
    mismatched = tmp_path / "mismatched.pt"
    torch.save({**checkpoint, "config": {**checkpoint["config"], "policy": policy}}, mismatched)
    for command in ("eval", "export"):
        extra = ["-o", str(tmp_path / "p.pt2")] if command == "export" else []
        assert_usage_error(pathgrad(command, str(mismatched), *extra, cwd=tmp_path),
                           "does not match its own config")  # fmt: skip
    foreign = tmp_path / "foreign.pt"
    foreign.write_bytes(b"not a checkpoint at all")
    assert_usage_error(pathgrad("eval", str(foreign), cwd=tmp_path), "is not a readable")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "empty.pt", "foreign.pt", "invalid.pt", "mismatched.pt"
    ]  # fmt: skip


def test_unwritable_outputs_are_one_line_errors(trained, tmp_path):
    final = str(next((trained / "checkpoints").glob("*final*.pt")))
    assert_usage_error(pathgrad("export", final, "-o", "/proc/x.pt2", cwd=tmp_path), "/proc/x.pt2")
    assert_usage_error(pathgrad("export", final, "-o", str(tmp_path), cwd=tmp_path),
                       "is a directory")  # fmt: skip
    assert_usage_error(pathgrad("plot", str(trained), "-o", "/proc/c.png", cwd=tmp_path),
                       "/proc/c.png")  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_plot_without_output_never_overwrites(trained, tmp_path):
    (tmp_path / "curves.png").write_bytes(b"mine")
    result = pathgrad("plot", str(trained), cwd=tmp_path)
    assert result.returncode == 0 and "curves-1.png" in result.stdout, result.stderr
    assert (tmp_path / "curves.png").read_bytes() == b"mine"
    assert (tmp_path / "curves-1.png").read_bytes()[:4] == b"\x89PNG"


def test_a_cut_metrics_line_and_stale_temporaries_do_not_stop_resume(run_copy):
    with open(run_copy / "metrics.jsonl", "a") as handle:
        handle.write('{"kind": "train", "global_step": 99')
    stale = run_copy / "checkpoints" / ".point_mass_step_9.pt.x1y2.tmp"
    stale.write_bytes(b"partial")
    result = pathgrad("resume", str(run_copy), "--total-updates", "7", "--quiet",
                      cwd=run_copy.parent)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert not stale.exists()
    lines = (run_copy / "metrics.jsonl").read_text().splitlines()
    assert all(json.loads(line) for line in lines)
    assert pathgrad("plot", str(run_copy), "-o", "c.png", cwd=run_copy.parent).returncode == 0


def test_resume_budgets_below_the_work_done_are_refused(run_copy):
    config = (run_copy / "config.yaml").read_bytes()
    result = pathgrad("resume", str(run_copy), "--total-updates", "2", cwd=run_copy.parent)
    assert_usage_error(result, "--total-updates 2 is below the 6 updates")
    assert_usage_error(pathgrad("resume", str(run_copy), "--total-timesteps", "100",
                                cwd=run_copy.parent), "is below the 3,072 env steps")  # fmt: skip
    assert (run_copy / "config.yaml").read_bytes() == config


def test_a_run_in_use_cannot_be_resumed_twice(run_copy):
    with RunLock(run_copy):
        assert_usage_error(pathgrad("resume", str(run_copy), cwd=run_copy.parent),
                           "is in use by another pathgrad process", str(os.getpid()))  # fmt: skip
    result = pathgrad("resume", str(run_copy), "--quiet", cwd=run_copy.parent)
    assert result.returncode == 0, result.stderr


def test_eval_arguments_are_checked(trained, tmp_path):
    result = pathgrad("eval", str(trained), "--episodes", "99999999999999999999", cwd=tmp_path)
    assert_usage_error(result, "--episodes must be between 1 and 1,000,000")
    assert_usage_error(pathgrad("eval", str(trained), "--seed", "-1", cwd=tmp_path), "--seed")


def test_run_directories_are_unique_under_concurrency(tmp_path):
    config = load_config(None, [f"logging.runs_dir={tmp_path}"])
    created: list[Path] = []
    threads = [
        threading.Thread(target=lambda: created.append(create_run_dir(config, now=0.0)))
        for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(created)) == 8 and all(path.is_dir() for path in created)


def test_two_trainings_started_together_both_run(tmp_path):
    command = [PATHGRAD, "train", "trainer.total_updates=2", "env.num_envs=4",
               "eval.frequency_steps=0", "--quiet"]  # fmt: skip
    processes = [warm_processes.start(command, cwd=tmp_path, env=ENV) for _ in range(2)]
    for process in processes:
        assert process.wait(timeout=120) == 0, process.output()[1]
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 2 and all((run / "summary.json").is_file() for run in runs)


def test_runs_are_named_after_the_env_with_user_permissions(tmp_path):
    previous = os.umask(0o022)
    try:
        result = subprocess.run(
            [
                PATHGRAD,
                "train",
                "env.name=Pendulum",
                "trainer.total_updates=1",
                "env.num_envs=4",
                "eval.frequency_steps=0",
                "eval.final=false",  # no evaluation, so no best checkpoint
                "--quiet",
            ],  # fmt: skip
            cwd=tmp_path,
            env=ENV,
            capture_output=True,
            text=True,
        )
    finally:
        os.umask(previous)
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("pendulum-")
    assert [p.name for p in (run_dir / "checkpoints").glob("*.pt")] == [
        "pendulum_final_step_128.pt"
    ]
    for path in run_dir.rglob("*"):
        if path.is_file() and path.name != ".lock":
            assert stat.S_IMODE(path.stat().st_mode) & 0o044 == 0o044, path


@pytest.mark.parametrize("delay", [0.1, 0.2, 0.25, 0.3, 0.35, 0.5, 1.0, 2.5])
def test_ctrl_c_at_any_moment_of_start_up_exits_cleanly(tmp_path, delay):
    # As from a terminal: SIGINT delivered (a test runner in the background may ignore it,
    # and an ignored SIGINT is inherited). The first ~20 ms (more on a loaded machine) are
    # Python's own start-up.
    process = subprocess.Popen(
        [PATHGRAD, "train", "trainer.total_updates=100000", "env.num_envs=4"],
        cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    time.sleep(delay)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    if "init_import_site" in stderr:  # interrupted before Python itself was up (a loaded
        # machine): Python's own exit, before any line of pathgrad's code ran
        assert process.returncode == 1 and stderr.rstrip().endswith("KeyboardInterrupt"), stderr
        return
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) <= 1, stderr
    runs = list((tmp_path / "runs").glob("*")) if (tmp_path / "runs").is_dir() else []
    for run_dir in runs:  # a run that got started is resumable
        done = json.loads((run_dir / "summary.json").read_text())["num_updates"]
        result = pathgrad(
            "resume", str(run_dir), "--total-updates", str(done + 1), "--quiet", cwd=tmp_path
        )
        assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("signum", "status", "line"), [
    (signal.SIGINT, 130, "pathgrad: interrupted"), (signal.SIGTERM, 143, "pathgrad: terminated"),
])  # fmt: skip
def test_a_signal_during_start_up_ends_the_process_even_where_a_library_would_swallow_it(
    signum, status, line
):
    # torch's NumPy initialisation clears any exception raised while NumPy imports (C code),
    # so a KeyboardInterrupt raised there was lost and the run trained on. While nothing is
    # written, a signal ends the process instead of raising.
    code = (
        "import os, signal, time\n"
        "from pathgrad.commands import signals_exit\n"
        "with signals_exit():\n"
        "    try:\n"
        f"        os.kill(os.getpid(), {int(signum)}); time.sleep(5)\n"
        "    except BaseException:\n"
        "        pass\n"
        "print('swallowed')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == status
    assert result.stdout == "" and result.stderr.strip() == line


def test_the_outcome_names_a_stale_evaluation_as_the_last_one(capsys, tmp_path):
    from types import SimpleNamespace

    from pathgrad.runs.outcome import print_outcome

    trainer = SimpleNamespace(
        global_step=4096,
        num_updates=8,
        last_eval_metrics={"global_step": 2048.0, "eval/avg_reward": -3.0},
        skips=SimpleNamespace(total=0),
    )
    print_outcome(trainer, "terminated", tmp_path, "final.pt", None, False)
    assert "last evaluation at step 2,048: return -3" in capsys.readouterr().out
    trainer.last_eval_metrics["global_step"] = 4096.0
    print_outcome(trainer, "completed", tmp_path, "final.pt", None, False)
    assert "final evaluation at step 4,096: return -3\n" in capsys.readouterr().out
    for rate, shown in ((float("nan"), ""), (0.75, ", success rate 0.75")):  # NaN: no measure
        trainer.last_eval_metrics["eval/success_rate"] = rate
        print_outcome(trainer, "completed", tmp_path, "final.pt", None, False)
        assert f"final evaluation at step 4,096: return -3{shown}\n" in capsys.readouterr().out


PADDED_MASS = """
import numpy as np
import torch
from gymnasium.spaces import Box
from pathgrad import register_learning_env
from pathgrad.envs import PointMass


@register_learning_env("PaddedMass")
class PaddedMass(PointMass):
    '''PointMass with EXTRA zero entries at the end of its observations.'''

    EXTRA = {extra}
    observation_dim = 6 + EXTRA

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.single_observation_space = Box(-np.inf, np.inf, (6 + self.EXTRA,), np.float32)

    def _observe(self, state):
        observation = super()._observe(state)
        return torch.cat([observation, observation.new_zeros(len(observation), self.EXTRA)], -1)
"""


def test_a_checkpoint_of_an_env_whose_spaces_changed_names_the_space_and_both_sizes(tmp_path):
    (tmp_path / "padded.py").write_text(PADDED_MASS.format(extra=1))
    result = warm_processes.run(
        [PATHGRAD, "train", "env.module=padded", "env.name=PaddedMass", *FAST],
        cwd=tmp_path, env=ENV,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    (tmp_path / "padded.py").write_text(PADDED_MASS.format(extra=3))  # the env changed
    for command in ("eval", "export"):
        extra = ["-o", str(tmp_path / "p.pt2")] if command == "export" else []
        result = warm_processes.run([PATHGRAD, command, str(run_dir), *extra], cwd=tmp_path,
                                    env=ENV)  # fmt: skip
        assert_usage_error(
            result,
            "was trained for an observation of size 7, but the env's observation has size 9 "
            "now: the env's observation space changed since training (its config did not)",
        )
    assert not (tmp_path / "p.pt2").exists()


def test_eval_takes_env_options_and_refuses_anything_else(trained, tmp_path):
    """``pathgrad eval RUN env.cfg.KEY=VALUE``: the env's options change for these episodes
    (a command to follow, a heavier mass); other keys and unknown options are named."""
    from pathgrad.runs.loading import load, load_for_evaluation

    config, _, _ = load_for_evaluation(trained, None, ["env.cfg.mass=3.0"])
    assert config.env.cfg["mass"] == 3.0
    assert load(trained, env_options=["env.cfg.mass=3.0"]).env.mass == 3.0
    light = json.loads(pathgrad("eval", str(trained), "--json", cwd=tmp_path).stdout)
    heavy = pathgrad("eval", str(trained), "--json", "env.cfg.max_force=0.1", cwd=tmp_path)
    assert heavy.returncode == 0, heavy.stderr
    assert json.loads(heavy.stdout)["eval/avg_reward"] != light["eval/avg_reward"]
    assert_usage_error(pathgrad("eval", str(trained), "env.num_envs=2", cwd=tmp_path),
                       "only the env's options can change here, as env.cfg.KEY=VALUE")  # fmt: skip
    assert_usage_error(pathgrad("eval", str(trained), "env.cfg.wings=2", cwd=tmp_path),
                       "env.cfg.wings=2: ", "wings")  # fmt: skip
