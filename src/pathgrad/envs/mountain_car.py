"""MountainCarContinuous: Gymnasium's ``MountainCarContinuous-v0``, batched and differentiable."""

from __future__ import annotations

import numpy as np
import torch
from gymnasium.spaces import Box

from pathgrad.core.env_registry import register_learning_env
from pathgrad.envs.base import BatchedDifferentiableEnv, State
from pathgrad.envs.libm import libm_cos

__all__ = ["MountainCarContinuous"]

_F32 = torch.float32


def _round32(value: torch.Tensor) -> torch.Tensor:
    """Round to float32 and back, keeping the graph (derivative 1)."""
    return value.to(_F32).to(value.dtype)


class MountainCarContinuous(BatchedDifferentiableEnv):
    """An under-powered car in a valley, exactly Gymnasium's ``MountainCarContinuous-v0``.

    Constants: power 0.0015 per unit force, force ``clip(a, -1, 1)``, maximum
    speed 0.07, positions in ``[-1.2, 0.6]``, goal at ``x >= 0.45`` with
    ``v >= goal_velocity`` (0). Episodes terminate at the goal and are
    truncated after 999 steps. Units are Gymnasium's (dimensionless).

    Step: ``v' = clip(v + force 0.0015 - 0.0025 cos(3 x), -0.07, 0.07)``,
    ``x' = clip(x + v', -1.2, 0.6)``, and ``v' = 0`` at the left wall when
    ``v' < 0``. Reward: ``100`` on reaching the goal, minus ``0.1 a^2`` with the
    unclipped action. Reset: ``x ~ U(-0.6, -0.4)``, ``v = 0``.
    Observation ``[x, v]``; action: force in ``[-1, 1]``.

    Parity: Gymnasium stores its state in float32 after every step and does
    part of the arithmetic in float32. With ``match_gymnasium_precision=True``
    (default) a float64 env reproduces those roundings (and NumPy's ``cos``,
    see :mod:`pathgrad.envs.libm`), so on CPU its observations (cast to
    float32) and rewards equal Gymnasium's bit for bit, step for step; ``False``
    computes everything in the env dtype, for float64 gradient checks.

    Gradients: the dynamics are smooth inside the track. The force clip, the
    speed clip, the position clip and the wall rule pass zero gradient where
    they act, and the goal bonus is a step: its gradient is zero almost
    everywhere, so first-order methods do not see it (only the action
    penalty and the dynamics carry gradient).
    Metrics: ``position`` and ``success`` (goal reached on this step).
    """

    observation_dim = 2
    action_dim = 1
    default_max_episode_steps = 999

    min_position = -1.2
    max_position = 0.6
    max_speed = 0.07
    goal_position = 0.45
    power = 0.0015

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        *,
        goal_velocity: float = 0.0,
        match_gymnasium_precision: bool = True,
        **kwargs,
    ) -> None:
        self.goal_velocity = float(goal_velocity)
        self.match_gymnasium_precision = bool(match_gymnasium_precision)
        super().__init__(num_envs, device, **kwargs)
        # Parity needs a float64 state that reproduces NumPy's float32 roundings.
        self._emulate_numpy = self.match_gymnasium_precision and self.dtype == torch.float64
        dtype = self.single_action_space.dtype
        low = np.array([self.min_position, -self.max_speed], dtype=dtype)
        high = np.array([self.max_position, self.max_speed], dtype=dtype)
        self.single_observation_space = Box(low, high, dtype=dtype)

    def _sample_initial_state(self, num: int) -> State:
        return {
            "position": self._uniform(-0.6, -0.4, num),
            "velocity": torch.zeros(num, device=self.device, dtype=self.dtype),
            "reached": torch.zeros(num, device=self.device, dtype=torch.bool),
        }

    def _velocity_change(self, state: State, action: torch.Tensor) -> torch.Tensor:
        """``force * power - 0.0025 cos(3 x)``, as Gymnasium computes it."""
        position = state["position"]
        if not self._emulate_numpy:
            force = torch.clamp(action[:, 0], -1.0, 1.0)
            return force * self.power - 0.0025 * torch.cos(3 * position)
        # After the first step Gymnasium's state is float32, so 3 x is a float32
        # product; cos and the 0.0025 factor run in float64. A force inside the
        # bounds is a float32 number and the rest runs in float32; a clipped
        # force is the Python float +-1.0 and the rest runs in float64.
        fresh = self.elapsed_steps == 0
        three_x = torch.where(fresh, 3 * position, _round32(3 * position))
        slope = 0.0025 * libm_cos(three_x)
        action32 = action[:, 0].to(_F32)
        power32 = torch.tensor(self.power, dtype=_F32, device=self.device)
        inside = (action32 * power32 - slope.to(_F32)).to(self.dtype)
        clipped = torch.sign(action32).to(self.dtype) * self.power - slope
        return torch.where(action32.abs() > 1.0, clipped, inside)

    def _dynamics(self, state: State, action: torch.Tensor) -> State:
        change = self._velocity_change(state, action)
        velocity = state["velocity"] + change
        if self._emulate_numpy:
            # float32 + float32 (or + a Python float, taken as float32) stays float32.
            stepped = _round32(state["velocity"] + _round32(change))
            velocity = torch.where(self.elapsed_steps == 0, velocity, stepped)
        velocity = torch.clamp(velocity, -self.max_speed, self.max_speed)
        position = state["position"] + velocity
        if self._emulate_numpy:
            # float32 + Python float: the speed limit enters as float32.
            stepped = _round32(state["position"] + _round32(velocity))
            position = torch.where(self.elapsed_steps == 0, position, stepped)
        position = torch.clamp(position, self.min_position, self.max_position)
        at_wall = (position == self.min_position) & (velocity < 0)
        velocity = torch.where(at_wall, torch.zeros_like(velocity), velocity)
        reached = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        if self._emulate_numpy:
            position, velocity = _round32(position), _round32(velocity)
        return {"position": position, "velocity": velocity, "reached": reached}

    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        force = action[:, 0]
        if self._emulate_numpy:
            force = force.to(_F32).to(self.dtype)
        bonus = next_state["reached"].to(self.dtype) * 100.0
        return bonus - force * force * 0.1

    def _terminated(self, state: State) -> torch.Tensor:
        return state["reached"]

    def _observe(self, state: State) -> torch.Tensor:
        return torch.stack([state["position"], state["velocity"]], dim=-1)

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        return {
            "position": state["position"].detach(),
            "success": state["reached"].to(self.dtype),
        }


register_learning_env("MountainCarContinuous", MountainCarContinuous)
