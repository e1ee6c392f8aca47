"""A pathgrad env with one row as a plain ``gymnasium.Env`` (NumPy in and out)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from pathgrad.core.env_protocols import DifferentiableVecEnv

__all__ = ["GymnasiumEnv", "to_gymnasium_env"]


class GymnasiumEnv(gym.Env):
    """``gymnasium.Env`` over a pathgrad env built with ``num_envs=1``.

    ``step`` returns the observation the step ended in (also when the episode
    ends: call ``reset`` then, as with any Gymnasium env), a float reward,
    Python bool flags and the env's ``info["metrics"]`` as floats.
    ``reset(seed=s)`` seeds the env's generator, so equal seeds give equal runs.

    Raises:
        ValueError: If ``env.num_envs`` is not 1.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, env: DifferentiableVecEnv) -> None:
        if env.num_envs != 1:
            raise ValueError(
                f"a single-env view needs an env built with num_envs=1, got num_envs="
                f"{env.num_envs}; use to_gymnasium for a vector env."
            )
        self.env = env
        self.observation_space = env.single_observation_space
        self.action_space = env.single_action_space
        self._observation_dtype = self.observation_space.dtype
        self._action_dtype = getattr(env, "dtype", torch.float32)
        self._action_size = int(np.prod(self.action_space.shape))

    def _observation(self, tensor: torch.Tensor) -> np.ndarray:
        array = tensor.detach().cpu().numpy()[0]
        return np.array(array, dtype=self._observation_dtype, copy=True)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode; ``seed`` reseeds the env's generator first."""
        super().reset(seed=seed)
        with torch.no_grad():
            observation, info = self.env.reset(seed=seed, options=options)
        return self._observation(observation), dict(info)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Advance one step with ``action`` of the action space's shape."""
        action = torch.as_tensor(
            np.asarray(action).reshape(1, self._action_size),
            dtype=self._action_dtype,
            device=self.env.device,
        )
        with torch.no_grad():
            observation, reward, terminated, truncated, info = self.env.step(action)
        terminated_, truncated_ = bool(terminated[0]), bool(truncated[0])
        if terminated_ or truncated_:  # the env already reset: report where the episode ended
            observation = info["final_observation"]
        metrics = {name: _python(value[0]) for name, value in info.get("metrics", {}).items()}
        return self._observation(observation), float(reward[0]), terminated_, truncated_, metrics

    def close(self) -> None:
        """Close the wrapped env if it can be closed."""
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


def _python(value: torch.Tensor) -> Any:
    """A scalar as a float, anything larger as a fresh array."""
    if value.numel() == 1:
        return float(value)
    return value.detach().cpu().numpy().copy()


def to_gymnasium_env(env: DifferentiableVecEnv) -> GymnasiumEnv:
    """View a pathgrad env built with ``num_envs=1`` as a ``gymnasium.Env``."""
    return GymnasiumEnv(env)
