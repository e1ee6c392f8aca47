"""A bug in the user's own env: its frames shown, one line naming its line, the run kept."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from helpers import isolate_env_registry, run_cli
from pathgrad.core import env_registry
from pathgrad.core.crash_report import describe, print_crash, user_frame
from pathgrad.env import get_registered_learning_env_names
from pathgrad.envs.base import check_constants

# A user's env module: a reward that breaks after some steps, a constructor that can break.
ENV_MODULE = """
from pathgrad.env import register_learning_env
from pathgrad.envs import PointMass


@register_learning_env("{name}")
class Buggy(PointMass):
    steps = 0

    def __init__(self, *args, init_bug=None, **kwargs):
        super().__init__(*args, **kwargs)
        if init_bug == "index":
            self.gains = [1.0, 2.0][5]
        if init_bug == "type":
            self.gains = 1.0 + None

    def _reward(self, state, action, next_state):
        type(self).steps += 1
        if type(self).steps > {fail_after}:
            return next_state["velocity_typo"].sum(-1)
        return super()._reward(state, action, next_state)
"""
QUICK = ["env.num_envs=8", "eval.frequency_steps=0", "logging.tensorboard=false", "--quiet"]


def users_env(tmp_path: Path, monkeypatch, name: str, fail_after: int) -> tuple[Path, int]:
    """Write the module (named after the env); its reward bug's line. The registry is restored."""
    isolate_env_registry(monkeypatch)
    path = tmp_path / f"{name.lower()}_envs.py"
    path.write_text(ENV_MODULE.format(name=name, fail_after=fail_after))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, path.stem, raising=False)
    return path, line_of(path, 'return next_state["velocity_typo"].sum(-1)')


def line_of(path: Path, code: str) -> int:
    return 1 + [line.strip() for line in path.read_text().splitlines()].index(code)


def train(tmp_path: Path, name: str, *overrides: str) -> tuple[int, str, str]:
    module = f"env.module={name.lower()}_envs"
    return run_cli(["train", f"env.name={name}", module, *QUICK, *overrides], cwd=tmp_path)


def test_a_bug_in_the_users_reward_names_its_line_and_keeps_the_run(tmp_path, monkeypatch):
    path, line = users_env(tmp_path, monkeypatch, "BuggyReward", fail_after=100)
    code, _, stderr = train(tmp_path, "BuggyReward", "trainer.total_updates=20")
    assert code == 1, stderr
    where = f"{path}:{line} in _reward"
    last = stderr.strip().splitlines()[-1]
    assert last == f"pathgrad: error: KeyError: 'velocity_typo' at {where}"
    assert f'File "{path}", line {line}, in _reward' in stderr
    assert "pathgrad/trainer/trainer.py" not in stderr and "PATHGRAD_TRACEBACK=full" in stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["num_updates"] >= 1
    assert summary["error"] == f"KeyError: 'velocity_typo' at {where}"
    note = re.search(r"The run (\S+) stopped as failed after update (\d+); its checkpoint (\S+)",
                     stderr)  # fmt: skip
    assert note and Path(note[1]) == Path("runs") / run_dir.name, stderr
    assert int(note[2]) == summary["num_updates"] and (tmp_path / note[3]).is_file()
    assert f"pathgrad resume {note[1]}" in stderr

    monkeypatch.setenv("PATHGRAD_TRACEBACK", "full")
    code, _, stderr = train(tmp_path, "BuggyReward", "trainer.total_updates=20")
    assert code == 1 and "Traceback (most recent call last)" in stderr
    assert "pathgrad/trainer/trainer.py" in stderr  # every frame


@pytest.mark.parametrize(("bug", "code", "message"), [
    ("index", 1, "pathgrad: error: IndexError: list index out of range at {where}"),
    ("type", 2, "pathgrad: config error: env.cfg: unsupported operand type(s) for +: 'float' and "
                "'NoneType' (at {where})"),
])  # fmt: skip
def test_a_bug_in_the_users_constructor_names_its_line(tmp_path, monkeypatch, bug, code, message):
    name = f"BuggyInit{bug.title()}"
    path, _ = users_env(tmp_path, monkeypatch, name, fail_after=10**9)
    bad = "self.gains = [1.0, 2.0][5]" if bug == "index" else "self.gains = 1.0 + None"
    where = f"{path}:{line_of(path, bad)} in __init__"
    status, _, stderr = train(tmp_path, name, f"env.cfg.init_bug={bug}")
    assert status == code, stderr
    assert stderr.strip().splitlines()[-1] == message.format(where=where)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_check_env_names_the_users_line_that_raised(tmp_path, monkeypatch):
    path, line = users_env(tmp_path, monkeypatch, "BuggyCheck", fail_after=0)
    status, stdout, _ = run_cli(["check-env", "BuggyCheck", "--module", "buggycheck_envs"],
                                cwd=tmp_path)  # fmt: skip
    assert status == 1
    where = f"{path}:{line} in _reward"
    assert f"contract: FAILED: raised KeyError: 'velocity_typo' at {where}" in stdout


def test_an_error_without_a_frame_of_the_users_keeps_its_whole_traceback(capsys):
    with pytest.raises(ValueError) as caught:
        check_constants(positive={"gain": -1.0})
    error = caught.value
    assert user_frame(error).filename == __file__  # the user's call is where it came from
    error.__traceback__ = error.__traceback__.tb_next  # as if pathgrad had called it itself
    text = "ValueError: gain must be positive, got -1.0."
    assert user_frame(error) is None and describe(error) == text
    print_crash(error)
    stderr = capsys.readouterr().err
    assert "Traceback (most recent call last)" in stderr and "check_constants" in stderr
    assert stderr.strip().splitlines()[-1] == f"pathgrad: error: {text}"


def test_a_bug_in_the_first_update_says_the_run_was_removed(tmp_path, monkeypatch):
    users_env(tmp_path, monkeypatch, "BuggyAtOnce", fail_after=0)
    code, _, stderr = train(tmp_path, "BuggyAtOnce", "trainer.total_updates=20")
    assert code == 1, stderr
    assert "stopped as failed in its first update, before anything was saved" in stderr
    assert "is removed (train again once the cause is fixed)" in stderr
    assert "pathgrad resume" not in stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


DETACHED_MODULE = """
from pathgrad.env import register_learning_env
from pathgrad.envs import PointMass


@register_learning_env("DetachedReward")
class DetachedReward(PointMass):
    def _reward(self, state, action, next_state):
        return super()._reward(state, action, next_state).detach()
"""


@pytest.mark.parametrize("rollout", ["segmented", "complete"])
def test_a_detached_reward_is_named_before_the_first_update(tmp_path, monkeypatch, rollout):
    get_registered_learning_env_names()
    monkeypatch.setattr(env_registry, "_REGISTRY", dict(env_registry._REGISTRY))
    monkeypatch.setattr(env_registry, "_DISPLAY_NAMES", dict(env_registry._DISPLAY_NAMES))
    (tmp_path / "detached_envs.py").write_text(DETACHED_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "detached_envs", raising=False)
    extra = ["trainer.rollout_mode=complete", "env.cfg.max_episode_steps=32"]
    code, _, stderr = run_cli(
        ["train", "env.name=DetachedReward", "env.module=detached_envs", *QUICK,
         *(extra if rollout == "complete" else [])],
        cwd=tmp_path,
    )  # fmt: skip
    assert code == 2, stderr
    assert stderr.strip().splitlines()[-1] == (
        "pathgrad: error: DetachedReward.step() broke the env contract: reward: no reward of "
        "the first 32 steps has a gradient path to the "
        "actions (detached, `.item()`, or rebuilt from NumPy?), so the return gives the policy "
        "no gradient; `pathgrad check-env` names the step."
    )
    assert "Traceback" not in stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


INPLACE_MODULE = """
from pathgrad.env import register_learning_env
from pathgrad.envs import PointMass


@register_learning_env("InPlaceWrite")
class InPlaceWrite(PointMass):
    def _dynamics(self, state, action):
        following = super()._dynamics(state, action)
        velocity = following["velocity"]
        wobble = velocity.sin()
        velocity.mul_(0.99)
        return {**following, "velocity": velocity + 1e-3 * wobble}
"""


def test_an_in_place_write_is_named_by_the_line_whose_saved_tensor_it_changed(
    tmp_path, monkeypatch, capsys
):
    isolate_env_registry(monkeypatch)
    path = tmp_path / "inplace_envs.py"
    path.write_text(INPLACE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "inplace_envs", raising=False)
    line = line_of(path, "wobble = velocity.sin()")
    message = (
        f"the tensor saved by `wobble = velocity.sin()` at inplace_envs.py:{line} in _dynamics "
        "was changed afterwards by an in-place write (x.mul_(...), x += ..., x[i] = ...), so "
        "its gradient cannot be computed; compute a new tensor instead"
    )
    code, _, stderr = run_cli(
        ["train", "env.name=InPlaceWrite", "env.module=inplace_envs", *QUICK], cwd=tmp_path
    )
    assert code == 2, stderr
    (last,) = stderr.strip().splitlines()  # no torch traceback, no anomaly-mode warnings
    assert last.startswith(f"pathgrad: error: {message}")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    code, out, _ = run_cli(["check-env", "InPlaceWrite", "--module", "inplace_envs"], cwd=tmp_path)
    assert code == 1 and f"gradients: FAILED: {message}" in out
