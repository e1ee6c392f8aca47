"""Pendulum: Gymnasium's ``Pendulum-v1``, batched and differentiable."""

from __future__ import annotations

import math

import numpy as np
import torch
from gymnasium.spaces import Box

from pathgrad.core.env_registry import register_learning_env
from pathgrad.envs.base import BatchedDifferentiableEnv, State, check_constants
from pathgrad.envs.libm import libm_cos, libm_sin, libm_square

__all__ = ["Pendulum", "angle_normalize"]


def angle_normalize(angle: torch.Tensor) -> torch.Tensor:
    """Wrap an angle to ``[-pi, pi)`` (derivative 1 away from the wrap point)."""
    return torch.remainder(angle + math.pi, 2 * math.pi) - math.pi


class Pendulum(BatchedDifferentiableEnv):
    """Torque-controlled pendulum swing-up, exactly Gymnasium's ``Pendulum-v1``.

    Constants: ``g`` = 10 m/s^2, mass ``m`` = 1 kg, length ``l`` = 1 m,
    ``dt`` = 0.05 s, maximum speed 8 rad/s, maximum torque 2 N m. ``th`` = 0 is
    upright. Episodes are truncated after 200 steps and never terminate.

    Step, on the pre-step state ``(th, thdot)``, with ``u = clip(a, -2, 2)``:

    - reward ``= -(angle_normalize(th)^2 + 0.1 thdot^2 + 0.001 u^2)``;
    - ``thdot' = clip(thdot + (3 g / (2 l) sin th + 3 / (m l^2) u) dt, -8, 8)``;
    - ``th' = th + thdot' dt`` (``th`` is not wrapped).

    Reset: ``th ~ U(-pi, pi)``, ``thdot ~ U(-1, 1)``. Observation:
    ``[cos th, sin th, thdot]``; action: torque in N m, bounds ``[-2, 2]``.

    Parity: Gymnasium receives float32 actions, so it computes the torque terms
    in float32. With ``match_gymnasium_precision=True`` (default) a float64
    env does the same and rounds ``sin``, ``cos`` and squares as NumPy does
    (:mod:`pathgrad.envs.libm`), so on CPU its observations (cast to float32)
    and rewards equal Gymnasium's bit for bit, step for step; the squares cost
    a Python call per env. ``False`` (or float32) computes everything in the
    env dtype with PyTorch's kernels, for float64 gradient checks and speed.

    Gradients: the torque clip passes no gradient for ``|a| > 2`` and the
    speed clip none at ``|thdot'| = 8``; ``angle_normalize`` has derivative 1
    except at the wrap (``th`` = pi), where the cost jumps.
    Metrics: ``upright`` (cos th) and ``success`` (``|angle_normalize(th)| < 0.1``
    and ``|thdot| < 1``).
    """

    observation_dim = 3
    action_dim = 1
    default_max_episode_steps = 200

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        *,
        g: float = 10.0,
        m: float = 1.0,
        l: float = 1.0,  # noqa: E741 - Gymnasium's name
        dt: float = 0.05,
        max_speed: float = 8.0,
        max_torque: float = 2.0,
        match_gymnasium_precision: bool = True,
        **kwargs,
    ) -> None:
        check_constants(
            positive={"m": m, "l": l, "dt": dt, "max_speed": max_speed, "max_torque": max_torque}
        )
        self.g, self.m, self.l, self.dt = float(g), float(m), float(l), float(dt)
        self.max_speed = float(max_speed)
        self.max_torque = float(max_torque)
        self.match_gymnasium_precision = bool(match_gymnasium_precision)
        super().__init__(num_envs, device, **kwargs)
        # Parity needs float64 state and float32 torques rounded as NumPy rounds them.
        self._emulate_numpy = self.match_gymnasium_precision and self.dtype == torch.float64
        self._sin, self._cos = (
            (libm_sin, libm_cos) if self._emulate_numpy else (torch.sin, torch.cos)
        )
        dtype = self.single_action_space.dtype
        self.single_action_space = Box(-self.max_torque, self.max_torque, (1,), dtype)
        high = np.array([1.0, 1.0, self.max_speed], dtype=dtype)
        self.single_observation_space = Box(-high, high, dtype=dtype)

    def _sample_initial_state(self, num: int) -> State:
        return {
            "th": self._uniform(-math.pi, math.pi, num),
            "thdot": self._uniform(-1.0, 1.0, num),
        }

    def _torque(self, action: torch.Tensor) -> torch.Tensor:
        """Clipped torque ``[N]``, in float32 when matching Gymnasium."""
        torque = action[:, 0]
        if self._emulate_numpy:
            torque = torque.to(torch.float32)
        return torch.clamp(torque, -self.max_torque, self.max_torque)

    def _dynamics_and_reward(
        self, state: State, action: torch.Tensor
    ) -> tuple[State, torch.Tensor]:
        """The two hooks sharing one torque clip (one op and its backward less per step)."""
        torque = self._torque(action)
        return self._advance_with(state, torque), self._reward_with(state, torque)

    def _dynamics(self, state: State, action: torch.Tensor) -> State:
        return self._advance_with(state, self._torque(action))

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        return self._reward_with(state, self._torque(action))

    def _advance_with(self, state: State, torque: torch.Tensor) -> State:
        torque_term = (3.0 / (self.m * self.l**2)) * torque
        gravity_term = 3 * self.g / (2 * self.l) * self._sin(state["th"])
        thdot = state["thdot"] + (gravity_term + torque_term.to(self.dtype)) * self.dt
        thdot = torch.clamp(thdot, -self.max_speed, self.max_speed)
        return {"th": state["th"] + thdot * self.dt, "thdot": thdot}

    def _reward_with(self, state: State, torque: torch.Tensor) -> torch.Tensor:
        square = libm_square if self._emulate_numpy else torch.square
        control = (0.001 * square(torque)).to(self.dtype)
        costs = square(angle_normalize(state["th"])) + 0.1 * square(state["thdot"]) + control
        return -costs

    def _observe(self, state: State) -> torch.Tensor:
        th = state["th"]
        return torch.stack([self._cos(th), self._sin(th), state["thdot"]], dim=-1)

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        angle = angle_normalize(state["th"]).detach()
        success = (angle.abs() < 0.1) & (state["thdot"].detach().abs() < 1.0)
        return {"upright": torch.cos(angle), "success": success.to(self.dtype)}


register_learning_env("Pendulum", Pendulum)
