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


def test_requires_float64():
    with pytest.raises(ValueError, match="needs a float64 env"):
        check_env_gradients(PointMass(2), 1)
