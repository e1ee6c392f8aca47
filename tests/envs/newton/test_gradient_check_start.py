"""A robot that starts on its joint limits and the ground fails a finite-difference check
for the wrong reason: check-env names the switches and starts away from them on request."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import pytest
import torch

import warm_processes

pytest.importorskip("newton")
pytest.importorskip("gymnasium")

from pathgrad.envs.newton.robots.gymnasium_locomotion import GymnasiumWalker2d  # noqa: E402
from pathgrad.testing import check_env_gradients  # noqa: E402
from pathgrad.testing.gradient_start import first_switch  # noqa: E402
from pathgrad.testing.gradients import GradcheckError  # noqa: E402

PATHGRAD = str(Path(sys.executable).parent / "pathgrad")


def walker() -> GymnasiumWalker2d:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the file's unapplied options, the substeps chosen
        return GymnasiumWalker2d(2, seed=0)


def test_a_start_on_limits_fails_and_the_smooth_start_passes():
    env = walker()
    env.reset(seed=0)
    start = {key: value.clone() for key, value in env.state.items()}
    near = env.switches_near(start)
    assert any(phrase.startswith("thigh_joint") and "upper limit 0" in phrase for phrase in near)
    assert any("of the ground" in phrase for phrase in near)
    with pytest.raises(GradcheckError, match="disagrees with central finite differences"):
        check_env_gradients(env, 5, initial_state=start)

    smooth = env.smooth_start_state(start, steps=5)
    assert env.switches_near(smooth) == []
    for coordinate, low, high, _ in env._limited_coordinates(smooth["joint_q"].shape[1]):
        values = smooth["joint_q"][:, coordinate]
        assert bool(((values >= low + 0.1 - 1e-6) & (values <= high - 0.1 + 1e-6)).all())
    lifted = smooth["joint_q"][:, 1] - start["joint_q"][:, 1]  # rootz: the robot went up
    assert bool((lifted > 0).all())
    assert torch.equal(smooth["joint_qd"], start["joint_qd"])
    assert check_env_gradients(env, 5, initial_state=smooth, reset_at_step=None)


def test_a_chain_that_reaches_a_limit_is_named_and_the_chain_before_it_passes():
    # Large actions swing the smooth-started walker's thighs onto their limits within the
    # check's chain: check-env names the step and the limits (first_switch); the chain
    # before that step (--steps) agrees with central differences.
    env = walker()
    env.reset(seed=0)
    smooth = env.smooth_start_state({key: value.clone() for key, value in env.state.items()})
    step, reached = first_switch(env, smooth, 5, seed=0, action_scale=4.0)
    assert step == 1 and any("thigh_joint" in phrase and "past its upper limit" in phrase
                             for phrase in reached)  # fmt: skip
    with pytest.raises(GradcheckError, match="disagrees with central finite differences"):
        check_env_gradients(env, 5, action_scale=4.0, initial_state=smooth, reset_at_step=None)
    assert check_env_gradients(env, step, action_scale=4.0, initial_state=smooth,
                               reset_at_step=None)  # fmt: skip
    assert first_switch(env, smooth, 5, seed=0, action_scale=0.01) is None


@pytest.mark.slow
def test_check_env_says_why_a_gradient_check_failed_and_what_to_try(tmp_path):
    environ = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = warm_processes.run(
        [PATHGRAD, "check-env", "GymnasiumWalker2d", "max_episode_steps=20"],
        cwd=tmp_path, env=environ,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    (why,) = [line for line in result.stdout.splitlines() if line.startswith("  why:")]
    assert "thigh_joint" in why and "Try --start smooth" in why
    smooth = warm_processes.run(
        [PATHGRAD, "check-env", "GymnasiumWalker2d", "max_episode_steps=20", "--start", "smooth"],
        cwd=tmp_path, env=environ,
    )  # fmt: skip
    assert smooth.returncode == 0, smooth.stdout + smooth.stderr
    assert "gradients: ok" in smooth.stdout
    swinging = warm_processes.run(
        [PATHGRAD, "check-env", "GymnasiumWalker2d", "max_episode_steps=20", "--start", "smooth",
         "--action-scale", "4"],
        cwd=tmp_path, env=environ,
    )  # fmt: skip
    assert swinging.returncode == 1, swinging.stdout + swinging.stderr
    (why,) = [line for line in swinging.stdout.splitlines() if line.startswith("  why:")]
    assert "reaches a switch at step 1: thigh_joint" in why and "--steps 1" in why


def test_a_smooth_start_needs_an_env_that_has_one(tmp_path):
    result = warm_processes.run(
        [PATHGRAD, "check-env", "Pendulum", "--start", "smooth"],
        cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 2
    assert "--start smooth: Pendulum has no smooth_start_state(state)" in result.stderr


@pytest.mark.parametrize(("option", "message"), [
    (["--steps", "0"], "--steps 0: give a chain of at least 1 step."),
    (["--action-scale", "-1"], "--action-scale -1.0: give a positive number."),
])  # fmt: skip
def test_a_bad_chain_option_is_a_usage_error(tmp_path, option, message):
    result = warm_processes.run(
        [PATHGRAD, "check-env", "Pendulum", *option],
        cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 2
    assert message in result.stderr
