"""check_env_gradients catches wrong gradients."""

from __future__ import annotations

import pytest
import torch
from torch.autograd.gradcheck import GradcheckError

from pathgrad.envs import PointMass
from pathgrad.testing import check_env_gradients


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
