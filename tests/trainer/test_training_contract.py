"""Training a user's env that breaks the contract: one line naming it, exit 2, no run left."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium.spaces import Box

import warm_processes
from helpers import LinearPolicy, ScalarEnv
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


    @register_learning_env("NanStartMass")
    class NanStartMass(PointMass):
        def _sample_initial_state(self, num):
            state = super()._sample_initial_state(num)
            velocity = state["velocity"].clone()
            velocity[num - 1, 1] = float("nan")
            return {**state, "velocity": velocity}


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
        ("NanStartMass", "NanStartMass.reset() broke the env contract: state['velocity']: not "
                         "finite (nan) in row 15, entry 1; 1 of 16 rows have such entries: the "
                         "initial state must be finite"),
        ("DoubleObservationMass", "DoubleObservationMass.reset() broke the env contract: "
                                  "observation: dtype torch.float64, but the policy's parameters "
                                  "are torch.float32: build the policy in the observations' dtype "
                                  "(or emit observations in the policy's)"),
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


class DeclaredApart(ScalarEnv):
    """A seed-level env whose space keeps Gymnasium's default float32 whatever it emits."""

    def __init__(self, dtype: torch.dtype, declared: type = np.float32) -> None:
        super().__init__([0.5, -0.3, 0.2, 0.9], episode_steps=8, dtype=dtype)
        self.single_observation_space = Box(-np.inf, np.inf, (1,), declared)
        self.single_action_space = Box(-1.0, 1.0, (1,), declared)


@pytest.mark.parametrize(
    ("emitted", "declared"), [(torch.float64, np.float32), (torch.float32, np.float64)]
)
def test_a_space_that_declares_another_dtype_trains_with_one_warning(emitted, declared):
    from pathgrad.algo import APG, APGCfg
    from pathgrad.differentiable_trainer import DifferentiableTrainer, DifferentiableTrainerCfg

    env = DeclaredApart(emitted, declared)
    policy = LinearPolicy(dtype=emitted)
    before = [p.detach().clone() for p in policy.parameters()]
    cfg = DifferentiableTrainerCfg(segment_length=4, eval_frequency_steps=0)
    algorithm = APG(APGCfg(optimizer={"name": "adam", "learning_rate": 0.05}), policy)
    trainer = DifferentiableTrainer(cfg, env, policy, algorithm)
    with pytest.warns(UserWarning, match=r"observation: expected dtype .*\(the env's dtype\), "
                      r"got .*; it trains in the dtype it emits") as caught:  # fmt: skip
        summary = trainer.train(total_updates=3)
    assert len([w for w in caught if "trains in the dtype" in str(w.message)]) == 1
    assert summary["num_updates"] == 3
    assert not all(torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))


def test_an_observation_in_another_dtype_than_the_policys_is_one_line():
    env = DeclaredApart(torch.float64)
    observation = env.reset()[0]
    check_first_result(env, "reset", (observation, {}), policy_dtype=torch.float64)
    with pytest.raises(EnvContractError) as raised:
        check_first_result(env, "reset", (observation, {}), policy_dtype=torch.float32)
    assert str(raised.value) == (
        "DeclaredApart.reset() broke the env contract: observation: dtype torch.float64, but the "
        "policy's parameters are torch.float32: build the policy in the observations' dtype (or "
        "emit observations in the policy's)."
    )


def test_an_infinite_record_in_the_state_passes_but_a_nan_or_an_infinite_observation_does_not():
    env = PointMass(4, seed=0)
    observation, info = env.reset(seed=0)
    env.state["max_penetration"] = torch.full((4,), float("inf"))  # a record's sentinel
    check_first_result(env, "reset", (observation, info))
    env.state["max_penetration"][2] = float("nan")
    with pytest.raises(EnvContractError, match=r"state\['max_penetration'\]: not finite \(nan\) "
                       r"in row 2, entry 0; 1 of 4 rows"):  # fmt: skip
        check_first_result(env, "reset", (observation, info))
    env.state["max_penetration"][2] = 0.0
    observation = observation.clone()
    observation[3, 1] = float("inf")
    with pytest.raises(EnvContractError, match=r"observation: not finite \(inf\) in row 3"):
        check_first_result(env, "reset", (observation, info))
