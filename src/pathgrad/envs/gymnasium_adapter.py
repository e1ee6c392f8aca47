"""A pathgrad env as a Gymnasium ``VectorEnv`` (and as a Stable-Baselines3 ``VecEnv``).

Model-free baselines then train on exactly the same dynamics as the analytic
gradient methods: same equations, same batched auto-reset, same seeds. Steps
run without a graph; actions and observations are NumPy arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from pathgrad.env import DifferentiableVecEnv

__all__ = ["GymnasiumVectorEnv", "to_gymnasium", "to_sb3"]


class GymnasiumVectorEnv(VectorEnv):
    """Gymnasium ``VectorEnv`` over a pathgrad env, auto-resetting in the same step.

    ``step`` returns the next episode's first observation for rows that finish;
    ``infos["final_obs"]`` holds the observation before the reset for every row
    (``infos["_final_obs"]`` marks the finished ones), and each
    ``info["metrics"]`` entry of the env appears as ``infos[name]``.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, env: DifferentiableVecEnv) -> None:
        self.env = env
        self.num_envs = env.num_envs
        self.single_observation_space = env.single_observation_space
        self.single_action_space = env.single_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._observation_dtype = self.single_observation_space.dtype
        self._action_dtype = getattr(env, "dtype", torch.float32)

    def _numpy(self, tensor: torch.Tensor, dtype: Any = None) -> np.ndarray:
        array = tensor.detach().cpu().numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    def reset(
        self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every row; a list of seeds uses its first (the env has one generator)."""
        if seed is not None and not isinstance(seed, int):
            seed = list(seed)[0]
        with torch.no_grad():
            observation, info = self.env.reset(seed=seed, options=options)
        return self._numpy(observation, self._observation_dtype), dict(info)

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every row with ``actions`` ``[N, A]``."""
        action = torch.as_tensor(
            np.asarray(actions).reshape(self.num_envs, -1),
            dtype=self._action_dtype,
            device=self.env.device,
        )
        with torch.no_grad():
            observation, reward, terminated, truncated, info = self.env.step(action)
        done = self._numpy(terminated | truncated)
        infos: dict[str, Any] = {
            "final_obs": self._numpy(info["final_observation"], self._observation_dtype),
            "_final_obs": done,
        }
        for name, value in info.get("metrics", {}).items():
            infos[name] = self._numpy(value)
        return (
            self._numpy(observation, self._observation_dtype),
            self._numpy(reward, np.float64),
            self._numpy(terminated),
            self._numpy(truncated),
            infos,
        )

    def close_extras(self, **kwargs: Any) -> None:
        """Close the wrapped env if it can be closed."""
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


def to_gymnasium(env: DifferentiableVecEnv) -> GymnasiumVectorEnv:
    """Wrap a pathgrad env as a Gymnasium ``VectorEnv`` (NumPy in and out, no graph)."""
    return GymnasiumVectorEnv(env)


def to_sb3(env: DifferentiableVecEnv | GymnasiumVectorEnv) -> Any:
    """Wrap a pathgrad env as a Stable-Baselines3 ``VecEnv`` (needs ``stable-baselines3``).

    Stable-Baselines3 does not accept Gymnasium vector envs; this bridge gives
    it the same dynamics, with ``terminal_observation`` and
    ``TimeLimit.truncated`` in each row's info as it expects.
    """
    from pathgrad.envs.sb3_adapter import SB3VecEnv

    vector_env = env if isinstance(env, GymnasiumVectorEnv) else to_gymnasium(env)
    return SB3VecEnv(vector_env)
