"""Training a user's env that breaks the contract: one line naming it, exit 2, no run left."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import warm_processes
from pathgrad.core.env_contract import EnvContractError, check_first_result
from pathgrad.envs import PointMass

PATHGRAD = str(Path(sys.executable).parent / "pathgrad")
MODULE = textwrap.dedent(
    """
    import torch
    from pathgrad import register_learning_env
    from pathgrad.envs import PointMass


    @register_learning_env("NarrowMass")
    class NarrowMass(PointMass):
        '''Its observations lack the last entry its space declares.'''

        def _observe(self, state):
            return super()._observe(state)[:, :-1]


    @register_learning_env("ColumnRewardMass")
    class ColumnRewardMass(PointMass):
        def step(self, action):
            observation, reward, terminated, truncated, info = super().step(action)
            return observation, reward.unsqueeze(-1), terminated, truncated, info


    @register_learning_env("FloatDoneMass")
    class FloatDoneMass(PointMass):
        def step(self, action):
            observation, reward, terminated, truncated, info = super().step(action)
            return observation, reward, terminated.float(), truncated, info


    @register_learning_env("DoubleObservationMass")
    class DoubleObservationMass(PointMass):
        def _observe(self, state):
            return super()._observe(state).double()
    """
)


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ("NarrowMass", "NarrowMass.reset() broke the env contract: observation: expected "
                       "shape (16, 6), got (16, 5)"),
        ("ColumnRewardMass", "ColumnRewardMass.step() broke the env contract: reward: "
                             "expected shape (16,), got (16, 1)"),
        ("FloatDoneMass", "FloatDoneMass.step() broke the env contract: terminated: expected "
                          "dtype torch.bool, got torch.float32"),
        ("DoubleObservationMass", "DoubleObservationMass.reset() broke the env contract: "
                                  "observation: expected dtype torch.float32 (the env's dtype), "
                                  "got torch.float64"),
    ],
)  # fmt: skip
def test_a_broken_contract_stops_training_in_one_line(tmp_path, env, line):
    (tmp_path / "broken_envs.py").write_text(MODULE)
    result = warm_processes.run(
        [PATHGRAD, "train", "env.module=broken_envs", f"env.name={env}", "env.num_envs=16",
         "trainer.total_updates=2", "eval.frequency_steps=0"],
        cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [f"pathgrad: error: {line}."]
    assert list((tmp_path / "runs").iterdir()) == []  # no run directory left behind


def test_the_first_results_of_a_working_env_pass_and_a_missing_info_fails():
    env = PointMass(4, seed=0)
    check_first_result(env, "reset", env.reset(seed=0))
    observation, reward, terminated, truncated, info = env.step(torch.zeros(4, 2))
    check_first_result(env, "step", (observation, reward, terminated, truncated, info))
    with pytest.raises(EnvContractError, match=r"info\['final_observation'\]: missing"):
        check_first_result(env, "step", (observation, reward, terminated, truncated, {}))
    # APG reads no final observation (the reference's envs may leave it out); shape checked if given
    check_first_result(
        env, "step", (observation, reward, terminated, truncated, {}), needs_final_observation=False
    )
    with pytest.raises(EnvContractError, match=r"info\['final_observation'\]: expected"):
        bad = {"final_observation": observation[:, :2]}
        check_first_result(
            env, "step", (observation, reward, terminated, truncated, bad),
            needs_final_observation=False,
        )  # fmt: skip
    with pytest.raises(EnvContractError, match=r"PointMass.step\(\).*expected a tuple"):
        check_first_result(env, "step", (observation, reward))
