"""check_env and ``pathgrad check-env``: every check fails on the broken env it exists for."""

from __future__ import annotations

import re
import textwrap
from importlib.util import find_spec

import pytest
import torch

import pathgrad
from helpers import ScalarEnv
from pathgrad.cli import main
from pathgrad.envs import BatchedDifferentiableEnv, PointMass
from pathgrad.testing import check_env
from pathgrad.testing.env_check import CHECKS

BUILTIN = [
    "CartPoleSwingUp",
    "DiffRLCartPoleSwingUp",
    "MountainCarContinuous",
    "Pendulum",
    "PointMass",
    "Quadrotor",
    "Reacher",
]


class Spring(BatchedDifferentiableEnv):
    """``v' = v + 0.1 (a - x)``, ``x' = x + 0.1 v'``, reward ``-x'^2 - 0.1 a^2``; 4 steps."""

    observation_dim = 2
    action_dim = 1
    default_max_episode_steps = 4

    def _sample_initial_state(self, num):
        return {"x": self._uniform(-1.0, 1.0, num), "v": self._uniform(-0.5, 0.5, num)}

    def _dynamics(self, state, action):
        v = state["v"] + 0.1 * (action[:, 0] - state["x"])
        return {"x": state["x"] + 0.1 * v, "v": v}

    def _reward(self, state, action, next_state):
        return -(next_state["x"] ** 2) - 0.1 * action[:, 0] ** 2

    def _observe(self, state):
        return torch.stack([state["x"], state["v"]], dim=-1)

    def _terminated(self, state):
        return state["x"].abs() > 3.0

    def _metrics(self, state):
        return {"distance": state["x"].abs().detach()}


class DetachedReward(Spring):
    def _reward(self, state, action, next_state):
        return super()._reward(state, action, next_state).detach()


class NumpyReward(Spring):
    def _reward(self, state, action, next_state):
        reward = super()._reward(state, action, next_state).detach().numpy()
        return torch.from_numpy(reward.copy())


class NanAfterTwoSteps(Spring):
    """Row 1's velocity becomes NaN at the third step of every episode."""

    def _dynamics(self, state, action):
        next_state = super()._dynamics(state, action)
        broken = (self.elapsed_steps == 2) & (torch.arange(self.num_envs) == 1)
        v = torch.where(broken, torch.nan, next_state["v"])
        return {"x": state["x"] + 0.1 * v, "v": v}


class HiddenNan(Spring):
    """An unobserved state entry that turns NaN in row 1 (the outputs stay finite)."""

    def _sample_initial_state(self, num):
        return {**super()._sample_initial_state(num), "w": torch.zeros(num)}

    def _dynamics(self, state, action):
        broken = (self.elapsed_steps == 1) & (torch.arange(self.num_envs) == 1)
        return {**super()._dynamics(state, action), "w": torch.where(broken, torch.nan, 0.0)}


class NanJacobian(Spring):
    """A finite reward whose backward is NaN: ``0 * d sqrt(u)/du`` at ``u = 0``."""

    def _reward(self, state, action, next_state):
        u = next_state["x"] - next_state["x"].detach()  # always 0, with gradient 1
        return super()._reward(state, action, next_state) + 0.0 * torch.sqrt(u)


class NarrowObservation(Spring):
    def _observe(self, state):
        return super()._observe(state)[:, :1]


class Float64Observation(Spring):
    def _observe(self, state):
        return super()._observe(state).double()


class ColumnReward(Spring):
    def _reward(self, state, action, next_state):
        return super()._reward(state, action, next_state).unsqueeze(-1)


class FloatDone(Spring):
    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        return observation, reward, terminated.float(), truncated.float(), info


class GlobalRandomReset(Spring):
    """Draws its initial states from torch's global generator: a seed changes nothing."""

    def _sample_initial_state(self, num):
        return {"x": torch.rand(num) * 2 - 1, "v": torch.zeros(num)}


class ForgetfulLoad(Spring):
    """Restores the state tensors only: not the step counters, not the generator."""

    def load_state_dict(self, state):
        self.state = {key: value.clone() for key, value in state["state"].items()}


class ResettingDetach(Spring):
    def detach_state(self):
        self.reset()
        return super().detach_state()


class LeakyDetach(Spring):
    """Returns a detached observation but keeps the graph of the carried state."""

    def detach_state(self):
        return self._observe(self.state).detach()


BROKEN = [  # env, the checks that fail, a failure of the first one
    (DetachedReward, {"gradients"}, r"^the reward of step 0 has no gradient path to the actions"),
    (NumpyReward, {"gradients"}, r"reward of step 0 has no gradient path .*NumPy"),
    (NanJacobian, {"gradients"}, r"^the Jacobian of the reward of step 0 .* is nan"),
    (
        NanAfterTwoSteps,
        {"rollout", "gradients"},
        r"^step 2, row 1: reward is nan; also not finite: observation, .*state\['v'\]",
    ),
    (HiddenNan, {"rollout"}, r"^step 1, row 1: state\['w'\] is nan$"),
    (
        NarrowObservation,
        {"contract"},
        r"^observation: expected shape \(2, 2\), got \(2, 1\) \(reset\(seed=0\)\)$",
    ),
    (
        Float64Observation,
        {"contract"},
        r"^observation: expected dtype torch.float32 \(the env's dtype\), got torch.float64",
    ),
    (ColumnReward, {"contract"}, r"^reward: expected shape \(2,\), got \(2, 1\) \(step 0\)$"),
    (FloatDone, {"contract"}, r"^terminated: expected dtype torch.bool, got torch.float32"),
    (
        GlobalRandomReset,  # its auto-resets draw from the global generator too: not restored
        {"reproducibility", "state_dict"},
        r"^the observation of reset\(seed=0\) differs \(row 0\) between two runs",
    ),
    (ForgetfulLoad, {"state_dict"}, r"^after load_state_dict\(\), step \d's \w+ differs"),
    (ResettingDetach, {"detach_state"}, r"^detach_state\(\) returned an observation that is not"),
    (LeakyDetach, {"detach_state"}, r"next step's reward still depends .*the graph is not cut"),
]


@pytest.mark.parametrize(
    ("env_type", "failing", "message"), BROKEN, ids=[entry[0].__name__ for entry in BROKEN]
)
def test_each_check_fails_on_the_env_it_exists_for(env_type, failing, message):
    result = check_env(env_type(2, seed=0))
    assert [check.name for check in result] == list(CHECKS)  # every check ran
    assert not result and not result.passed
    assert {check.name for check in result if not check.passed} == failing, str(result)
    first = sorted(failing, key=CHECKS.index)[0]
    assert any(re.search(message, line) for line in result[first].failures), str(result)
    assert all("\n" not in failure for failure in result.failures)
    assert len(str(result).splitlines()) == len(CHECKS) - len(failing) + len(result.failures)


class ManyFaults(NarrowObservation, DetachedReward, FloatDone):
    """Three faults at once: all are listed, none hides another."""


def test_all_failures_are_listed_one_line_each():
    result = check_env(ManyFaults(2, seed=0))
    failures = result.failures
    assert "contract: observation: expected shape (2, 2), got (2, 1) (reset(seed=0))" in failures
    assert any(f.startswith("contract: terminated: expected dtype torch.bool") for f in failures)
    assert any(f.startswith("contract: truncated: expected dtype torch.bool") for f in failures)
    assert any(f.startswith("gradients: the reward of step 0 has no gradient") for f in failures)
    assert "contract: FAILED: observation: expected shape (2, 2)" in str(result)
    assert result["reproducibility"].passed and result["state_dict"].passed


def test_a_working_env_passes_and_says_what_was_checked():
    result = check_env(Spring(3, seed=0))
    assert result and result.failures == [], str(result)
    lines = str(result).splitlines()
    assert lines[0].startswith("contract: ok (reset and 5 steps")
    assert "rollout: ok (8 steps, 6 episodes finished over 3 rows, all finite)" in lines
    assert lines[-1] == (
        "gradients: ok (5 steps through an auto-reset, against central finite differences "
        "(float32 step))"
    )
    assert check_env(Spring(2, dtype="float64")).passed


@pytest.mark.parametrize("name", BUILTIN)
def test_every_builtin_torch_env_passes(name):
    result = check_env(pathgrad.build_learning_env(name, num_envs=2, device="cpu", seed=0))
    assert result.passed, str(result)


def test_a_float32_env_against_its_float64_twin_and_gradients_left_out():
    twin = PointMass(2, dtype="float64", obstacles=[])
    result = check_env(PointMass(2, obstacles=[]), reference_env=twin)
    assert result.passed and "float64 reference env's Jacobian" in result["gradients"].note
    skipped = check_env(DetachedReward(2), gradients=False)
    assert skipped.passed and skipped["gradients"].skipped


def test_an_env_written_against_the_bare_contract():
    result = check_env(ScalarEnv([0.3, -0.2], episode_steps=3))
    assert result.passed, str(result)
    assert result["state_dict"].skipped and "replayed from reset" in result["gradients"].note
    detached = check_env(ScalarEnv([0.3, -0.2], reward_hook=lambda reward, _: reward.detach()))
    assert detached["gradients"].failures == (
        "the reward of step 0 has no gradient path to the actions or the carried state "
        "(detached, or rebuilt from NumPy?)",
    )


def test_a_newton_env_passes():
    pytest.importorskip("newton", reason="the Newton backend needs pathgrad[newton]")
    from pathgrad.envs.newton import NewtonCartPoleSwingUp

    result = check_env(NewtonCartPoleSwingUp(2, seed=0, max_episode_steps=5))
    assert result.passed, str(result)


# The command ------------------------------------------------------------------------------

BROKEN_MODULE = """
import pathgrad
from pathgrad.envs import PointMass


class DetachedPointMass(PointMass):
    def _reward(self, state, action, next_state):
        return super()._reward(state, action, next_state).detach()


pathgrad.register_learning_env("CheckEnvDetachedPointMass", DetachedPointMass, override=True)
"""


def test_the_command_prints_a_line_per_check_and_exits_0(capsys):
    assert main(["check-env", "PointMass", "max_episode_steps=10", "--num-envs", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "check-env PointMass: 3 envs, float32, cpu, seed 0"
    assert [line.split(":")[0] for line in lines[1:-2]] == list(CHECKS)
    assert all(": ok" in line for line in lines[1:-2]) and "20 steps" in lines[5]
    assert lines[-2].startswith(
        "window gradients: norm of d(window return)/d(first action), median (max) of 3 envs: "
        "1 step "
    )
    assert lines[-1] == "PointMass: all 6 checks passed"


def test_the_command_checks_an_env_of_a_module_and_exits_1(tmp_path, monkeypatch, capsys):
    (tmp_path / "check_env_broken_envs.py").write_text(textwrap.dedent(BROKEN_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["check-env", "CheckEnvDetachedPointMass", "--module", "check_env_broken_envs"]
    assert main([*argv, "max_episode_steps=8", "--dtype", "float64"]) == 1
    out = capsys.readouterr().out
    assert "check-env CheckEnvDetachedPointMass: 2 envs, float64" in out
    assert "gradients: FAILED: the reward of step 0 has no gradient path" in out
    assert "contract: ok" in out and "CheckEnvDetachedPointMass: 1 of 6 checks failed" in out


def test_an_unknown_name_says_what_the_module_registered(tmp_path, monkeypatch, capsys):
    (tmp_path / "registers_nothing.py").write_text("class MyBot:\n    pass\n")
    (tmp_path / "registers_one.py").write_text(
        "from pathgrad import register_learning_env\nfrom pathgrad.envs import PointMass\n\n"
        "register_learning_env('MyWalker', PointMass)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from helpers import isolate_env_registry


    isolate_env_registry(monkeypatch)
    assert main(["check-env", "MyBot", "--module", "registers_nothing"]) == 2
    assert "(env.module 'registers_nothing' was imported but registered no env: decorate the " \
        'env class with @register_learning_env("Name")' in capsys.readouterr().err  # fmt: skip
    assert main(["check-env", "MyBot", "--module", "registers_one"]) == 2
    assert "unknown env 'MyBot' (env.module 'registers_one' registered MyWalker); registered:" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["NoSuchEnv"],
         r"^pathgrad: error: unknown env 'NoSuchEnv'; registered: (\w+, )*CartPoleSwingUp, "),
        (["Pendelum"], r"unknown env 'Pendelum' \(did you mean 'Pendulum'\?\)"),
        (["PointMass", "bogus=1"], r"^pathgrad: config error: env.cfg.bogus: unknown key"),
        (["PointMass", "dt"], r"'dt' is not an env argument: give key=value"),
        (["PointMass", "--module", "no_such_module"], r"--module no_such_module: cannot import"),
        pytest.param(
            ["NewtonReacher", "--dtype", "float64"],
            r"env.dtype: NewtonReacher computes in float32",
            marks=pytest.mark.skipif(find_spec("newton") is None, reason="needs newton"),
        ),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(argv, message, capsys):
    assert main(["check-env", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1
    assert re.search(message, captured.err), captured.err
