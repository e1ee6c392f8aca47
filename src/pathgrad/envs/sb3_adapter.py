"""Stable-Baselines3 ``VecEnv`` over a :class:`GymnasiumVectorEnv` (imports SB3)."""

from __future__ import annotations

from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv

__all__ = ["SB3VecEnv"]


class SB3VecEnv(VecEnv):
    """The SB3 vector-env interface on top of a same-step auto-resetting vector env.

    Rows that finish get ``terminal_observation``, ``TimeLimit.truncated`` and,
    when the env has a ``success`` metric, ``is_success`` in their info.
    ``seed(s)`` seeds row ``i`` with ``s + i`` at the next reset (envs built on
    ``BatchedDifferentiableEnv``; others get ``s`` for their generator). The rows of a
    pathgrad env share their attributes, so ``set_attr``/``env_method`` refuse
    ``indices`` that leave some rows out.
    """

    def __init__(self, vector_env: Any) -> None:
        """``vector_env``: a same-step :class:`~pathgrad.envs.GymnasiumVectorEnv`
        (:func:`pathgrad.envs.to_sb3` builds one; this module does not import it)."""
        self.vector_env = vector_env
        self.render_mode = None
        self._actions: np.ndarray | None = None
        super().__init__(
            vector_env.num_envs,
            vector_env.single_observation_space,
            vector_env.single_action_space,
        )

    def reset(self) -> np.ndarray:
        seeds: Any = None if all(seed is None for seed in self._seeds) else list(self._seeds)
        if seeds is not None and not self.vector_env.takes_row_seeds:
            seeds = next(seed for seed in seeds if seed is not None)  # one generator
        options = [dict(options) for options in self._options]
        if any(option != options[0] for option in options):
            raise ValueError("the rows of a pathgrad env take one options dict, not one per row.")
        observation, info = self.vector_env.reset(seed=seeds, options=options[0] or None)
        self.reset_infos = [dict(info) for _ in range(self.num_envs)]
        self._reset_seeds()
        self._reset_options()
        return observation

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        assert self._actions is not None, "step_async must come first"
        observation, reward, terminated, truncated, infos = self.vector_env.step(self._actions)
        dones = terminated | truncated
        success = infos["final_info"].get("success")
        row_infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for row in np.flatnonzero(dones):
            row_infos[row] = {
                "terminal_observation": infos["final_obs"][row],
                "TimeLimit.truncated": bool(truncated[row] and not terminated[row]),
            }
            if success is not None:
                row_infos[row]["is_success"] = bool(success[row] > 0.5)
        return observation, reward.astype(np.float32), dones, row_infos

    def close(self) -> None:
        self.vector_env.close()

    def _rows(self, indices: Any) -> list[int]:
        return list(self._get_indices(indices))

    def _all_rows(self, indices: Any, what: str) -> list[int]:
        rows = self._rows(indices)
        if sorted(set(rows)) != list(range(self.num_envs)):
            raise ValueError(
                f"{what} with indices={indices!r}: attributes are shared by all {self.num_envs} "
                "rows of a pathgrad env, so they cannot change for some rows only; "
                "pass indices=None."
            )
        return rows

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        if attr_name == "render_mode":
            return [None for _ in self._rows(indices)]
        value = getattr(self.vector_env.env, attr_name)
        return [value for _ in self._rows(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        self._all_rows(indices, f"set_attr({attr_name!r})")
        setattr(self.vector_env.env, attr_name, value)

    def env_method(self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any) -> list:
        rows = self._all_rows(indices, f"env_method({method_name!r})")
        result = getattr(self.vector_env.env, method_name)(*args, **kwargs)
        return [result for _ in rows]

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False for _ in self._rows(indices)]
