"""Stable-Baselines3 ``VecEnv`` over a :class:`GymnasiumVectorEnv` (imports SB3)."""

from __future__ import annotations

from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from pathgrad.envs.gymnasium_adapter import GymnasiumVectorEnv

__all__ = ["SB3VecEnv"]


class SB3VecEnv(VecEnv):
    """The SB3 vector-env interface on top of a same-step auto-resetting vector env."""

    def __init__(self, vector_env: GymnasiumVectorEnv) -> None:
        self.vector_env = vector_env
        self.render_mode = None
        self._actions: np.ndarray | None = None
        super().__init__(
            vector_env.num_envs,
            vector_env.single_observation_space,
            vector_env.single_action_space,
        )

    def reset(self) -> np.ndarray:
        seed = next((seed for seed in self._seeds if seed is not None), None)
        observation, _ = self.vector_env.reset(seed=seed)
        self._reset_seeds()
        return observation

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        assert self._actions is not None, "step_async must come first"
        observation, reward, terminated, truncated, infos = self.vector_env.step(self._actions)
        dones = terminated | truncated
        row_infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for row in np.flatnonzero(dones):
            row_infos[row] = {
                "terminal_observation": infos["final_obs"][row],
                "TimeLimit.truncated": bool(truncated[row] and not terminated[row]),
            }
        return observation, reward.astype(np.float32), dones, row_infos

    def close(self) -> None:
        self.vector_env.close()

    def _rows(self, indices: Any) -> list[int]:
        return list(self._get_indices(indices))

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        if attr_name == "render_mode":
            return [None for _ in self._rows(indices)]
        value = getattr(self.vector_env.env, attr_name)
        return [value for _ in self._rows(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        setattr(self.vector_env.env, attr_name, value)

    def env_method(self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any) -> list:
        result = getattr(self.vector_env.env, method_name)(*args, **kwargs)
        return [result for _ in self._rows(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False for _ in self._rows(indices)]
