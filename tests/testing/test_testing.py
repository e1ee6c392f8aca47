"""check_env_gradients catches wrong gradients, cut gradient paths, NaN and a broken contract."""

from __future__ import annotations

import re

import pytest
import torch
from torch.autograd.gradcheck import GradcheckError

from helpers import ScalarEnv
from pathgrad.envs import PointMass
from pathgrad.testing import EnvCheckError, check_env_gradients


class DetachedVelocity(PointMass):
    """Forgets that the position depends on the action through the velocity."""

    def _dynamics(self, state, action):
        next_state = super()._dynamics(state, action)
        next_state["position"] = state["position"] + self.dt * next_state["velocity"].detach()
        return next_state


class WrongSlope(PointMass):
    """Hand-written backward with the wrong factor."""

    class _Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return 2 * grad

    def _reward(self, state, action, next_state):
        return self._Double.apply(super()._reward(state, action, next_state))


@pytest.mark.parametrize("env_type", [DetachedVelocity, WrongSlope])
def test_wrong_gradients_are_caught(env_type):
    with pytest.raises(GradcheckError):
        check_env_gradients(env_type(2, dtype="float64", obstacles=[]), 2)


def test_requires_float32_or_float64():
    env = PointMass(2)
    env.dtype = torch.float16
    with pytest.raises(ValueError, match="needs a float32 or float64 env"):
        check_env_gradients(env, 1)


class SharedBuffer(PointMass):
    """A bridge-like step whose backward reads a buffer shared by all steps (the last one's).

    One step is right; a chain of steps is wrong: the trap of simulators that keep
    per-step intermediates on a shared solver object.
    """

    class _Scale(torch.autograd.Function):
        shared: dict[str, torch.Tensor] = {}

        @staticmethod
        def forward(ctx, velocity, factor):
            SharedBuffer._Scale.shared["factor"] = factor.detach().clone()
            return velocity * factor

        @staticmethod
        def backward(ctx, grad):
            return grad * SharedBuffer._Scale.shared["factor"], None

    def _dynamics(self, state, action):
        next_state = super()._dynamics(state, action)
        factor = (1.0 + 0.5 * self.elapsed_steps.to(self.dtype)).unsqueeze(-1)  # per step
        next_state["velocity"] = self._Scale.apply(next_state["velocity"], factor)
        return next_state


def test_float32_envs_are_checked_against_a_float64_twin_or_float32_differences():
    assert check_env_gradients(PointMass(4, obstacles=[]), 4)
    twin = PointMass(4, dtype="float64", obstacles=[])
    assert check_env_gradients(PointMass(4, obstacles=[]), 4, reference_env=twin)
    with pytest.raises(GradcheckError, match="disagrees with central finite differences"):
        check_env_gradients(WrongSlope(2, obstacles=[]), 2)
    with pytest.raises(GradcheckError, match="float64 reference env's Jacobian"):
        check_env_gradients(WrongSlope(2, obstacles=[]), 2, reference_env=twin.__class__(
            2, dtype="float64", obstacles=[]))  # fmt: skip
    with pytest.raises(ValueError, match="reference_env must be a float64 env"):
        check_env_gradients(PointMass(2), 1, reference_env=PointMass(2))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_multi_step_check_catches_what_one_step_cannot(dtype):
    env = SharedBuffer(2, dtype=dtype, obstacles=[], max_episode_steps=4)
    assert check_env_gradients(env, 1, reset_at_step=None)  # one step: right
    with pytest.raises(GradcheckError):
        check_env_gradients(env, 4)  # through a reset: the shared buffer is caught


# Faults gradcheck alone lets through: a cut path, NaN, a broken contract (issue 23).


class DetachedReward(PointMass):
    def _reward(self, state, action, next_state):
        return super()._reward(state, action, next_state).detach()


class NumpyReward(PointMass):
    def _reward(self, state, action, next_state):
        reward = super()._reward(state, action, next_state).detach().numpy()
        return torch.from_numpy(reward.copy())


class DetachedObservation(PointMass):
    def _observe(self, state):
        return super()._observe(state).detach()


class DetachedFinalObservation(PointMass):
    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        return observation, reward, terminated, truncated, {
            "final_observation": info["final_observation"].detach(), "metrics": info["metrics"]
        }  # fmt: skip


NO_PATH = "has no gradient path to the actions or the carried state"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize(
    ("env_type", "output"),
    [
        (DetachedReward, "reward"),
        (NumpyReward, "reward"),
        (DetachedObservation, "observation"),
        (DetachedFinalObservation, "final_observation"),
    ],
)
def test_an_output_without_a_gradient_path_fails_naming_it(env_type, output, dtype):
    # gradcheck skips outputs that do not require grad (float64 returned True); the float32
    # check raised torch's "element 0 of tensors does not require grad".
    with pytest.raises(EnvCheckError, match=rf"^the {output} of step 0 {NO_PATH}"):
        check_env_gradients(env_type(2, dtype=dtype, obstacles=[]), 2)


class NanJacobian(PointMass):
    """A finite reward whose backward is NaN (``0 * d sqrt(u)/du`` at ``u = 0``)."""

    def _reward(self, state, action, next_state):
        u = next_state["position"][:, 0] - next_state["position"][:, 0].detach()
        return super()._reward(state, action, next_state) + 0.0 * torch.sqrt(u)


class NanVelocity(PointMass):
    """Row 1's velocity is NaN from the second step on."""

    def _dynamics(self, state, action):
        next_state = super()._dynamics(state, action)
        broken = ((self.elapsed_steps >= 1) & (torch.arange(self.num_envs) == 1)).unsqueeze(-1)
        next_state["velocity"] = torch.where(broken, torch.nan, next_state["velocity"])
        return next_state


def test_a_non_finite_jacobian_or_output_fails_naming_it():
    # NaN compares false with any tolerance: both used to return True in float32.
    env = NanJacobian(2, obstacles=[], seed=0)
    message = (
        r"^the Jacobian of the reward of step 0 \(row 0\) with respect to the initial state "
        r"entry 'position' \(row 0\) is nan \(\d+ of \d+ entries are not finite\)$"
    )
    with pytest.raises(EnvCheckError, match=message):
        check_env_gradients(env, 2)
    twin = PointMass(2, dtype="float64", obstacles=[])
    with pytest.raises(EnvCheckError, match="^the Jacobian of the reward of step 0"):
        check_env_gradients(env, 2, reference_env=twin)
    for dtype in ("float32", "float64"):
        env = NanVelocity(2, dtype=dtype, obstacles=[], seed=0)
        message = r"^the observation of step 1 is not finite: nan at row 1, entry 2 \(2 of 12"
        with pytest.raises(EnvCheckError, match=message):
            check_env_gradients(env, 3, reset_at_step=None)
    with pytest.raises(
        GradcheckError, match="^the Jacobian of the reward of step 0 holds non-finite"
    ):
        check_env_gradients(NanJacobian(2, dtype="float64", obstacles=[]), 2)


class NarrowObservation(PointMass):
    def _observe(self, state):
        return super()._observe(state)[:, :-1]


class Float64Observation(PointMass):
    def _observe(self, state):
        return super()._observe(state).double()


class ColumnReward(PointMass):
    def _reward(self, state, action, next_state):
        return super()._reward(state, action, next_state).unsqueeze(-1)


@pytest.mark.parametrize(
    ("env_type", "message"),
    [
        (NarrowObservation, r"^step 0: observation: expected shape \(2, 6\), got \(2, 5\)"),
        (
            Float64Observation,
            r"^step 0: observation: expected dtype torch.float32 \(the env's dtype\), "
            r"got torch.float64 \(also: info\['final_observation'\]\)$",
        ),
        (ColumnReward, r"^step 0: reward: expected shape \(2,\), got \(2, 1\)$"),
    ],
)
def test_the_contract_of_the_chain_is_checked(env_type, message):
    with pytest.raises(EnvCheckError, match=message):
        check_env_gradients(env_type(2, obstacles=[]), 2)


def test_an_env_on_the_bare_contract_is_checked_in_its_actions():
    assert check_env_gradients(ScalarEnv([0.3, -0.2], episode_steps=2), 4)
    assert check_env_gradients(ScalarEnv([0.3, -0.2], dtype=torch.float32), 3)
    doubled = ScalarEnv([0.3, -0.2], reward_hook=lambda reward, _: WrongSlope._Double.apply(reward))
    with pytest.raises(GradcheckError, match="^the Jacobian of the reward of step 0 with respect "
                       "to the actions disagrees"):  # fmt: skip
        check_env_gradients(doubled, 2)
    with pytest.raises(ValueError, match="initial_state needs a BatchedDifferentiableEnv"):
        check_env_gradients(ScalarEnv([0.3]), 1, initial_state={})


def test_a_gradcheck_failure_starts_with_one_line_naming_output_and_input():
    with pytest.raises(GradcheckError) as caught:
        check_env_gradients(DetachedVelocity(2, dtype="float64", obstacles=[]), 2)
    first, *details = str(caught.value).splitlines()
    assert re.fullmatch(r"the Jacobian of the \w+ of step \d with respect to (the actions|the "
                        r"initial state entry '\w+') disagrees with central finite differences "
                        r"\(gradcheck\)", first), first  # fmt: skip
    assert details and "numerical" in str(caught.value)
