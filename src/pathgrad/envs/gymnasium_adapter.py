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

from pathgrad.core.env_protocols import DifferentiableVecEnv
from pathgrad.envs.base import BatchedDifferentiableEnv

__all__ = ["GymnasiumVectorEnv", "to_gymnasium", "to_sb3"]


class GymnasiumVectorEnv(VectorEnv):
    """Gymnasium ``VectorEnv`` over a pathgrad env.

    ``AutoresetMode.NEXT_STEP`` (default, as Gymnasium's own vector envs): a
    finishing step returns the observation it ended in; the next step returns
    that row's first observation of the new episode with reward 0 and false
    flags, ignoring its action. The env resets rows inside ``step``, so this
    mode restores those rows' ``state`` and ``elapsed_steps`` after stepping and
    needs an env carrying them (every ``BatchedDifferentiableEnv``, also behind
    wrappers that keep it as ``.env``).

    ``AutoresetMode.SAME_STEP``: a finishing step already returns the next
    episode's first observation; ``infos["final_obs"]`` holds the observation
    before the reset for every row, ``infos["final_info"]`` the env's metrics,
    valid where ``infos["_final_obs"]``/``infos["_final_info"]`` are true.

    In both modes each ``info["metrics"]`` entry appears as ``infos[name]`` with
    its mask ``infos["_" + name]`` (false on next-step autoreset steps).
    """

    def __init__(
        self,
        env: DifferentiableVecEnv,
        autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
    ) -> None:
        mode = AutoresetMode(autoreset_mode)
        if mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
            raise ValueError(f"autoreset_mode must be NEXT_STEP or SAME_STEP, got {mode}.")
        self._owner = _state_owner(env)
        if mode == AutoresetMode.NEXT_STEP and self._owner is None:
            raise ValueError(
                f"next-step autoreset needs per-row state: {type(env).__name__} (or an env it "
                "wraps as `.env`) must carry `state`, a dict of [num_envs, ...] tensors, and "
                "`elapsed_steps`, a [num_envs] tensor, as BatchedDifferentiableEnv does; "
                "use autoreset_mode=AutoresetMode.SAME_STEP for other envs."
            )
        self.env = env
        self.metadata = {"autoreset_mode": mode}
        self.autoreset_mode = mode
        self.num_envs = env.num_envs
        self.single_observation_space = env.single_observation_space
        self.single_action_space = env.single_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._observation_dtype = self.single_observation_space.dtype
        self._action_dtype = getattr(env, "dtype", torch.float32)
        # Next-step bookkeeping: rows whose next step is an autoreset step, the
        # env's latest observation (reset observation of those rows), what we returned.
        self._pending = np.zeros(self.num_envs, dtype=bool)
        self._env_obs: np.ndarray | None = None
        self._returned_obs: np.ndarray | None = None

    @property
    def takes_row_seeds(self) -> bool:
        """Whether ``reset`` takes a list of per-row seeds (a ``BatchedDifferentiableEnv``)."""
        return isinstance(self._owner, BatchedDifferentiableEnv)

    def _numpy(self, tensor: torch.Tensor, dtype: Any = None) -> np.ndarray:
        array = tensor.detach().cpu().numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every row, or those of ``options["reset_mask"]`` (a bool array ``[N]``).

        An int seeds the env's generator; a list of ``num_envs`` seeds seeds
        each row (needs an env that takes them, as ``BatchedDifferentiableEnv``).
        """
        if isinstance(seed, (int, np.integer)):
            super().reset(seed=int(seed))
        options = dict(options) if options else None
        with torch.no_grad():
            observation, info = self.env.reset(seed=seed, options=options)
        self._env_obs = returned = self._numpy(observation, self._observation_dtype)
        if options and options.get("reset_mask") is not None and self._returned_obs is not None:
            # Rows left out keep what they last returned (and a pending autoreset).
            mask = np.asarray(options["reset_mask"], dtype=bool)
            returned = np.where(_by_row(mask, returned), returned, self._returned_obs)
            self._pending &= ~mask
        else:
            self._pending[:] = False
        self._returned_obs = returned
        return returned.copy(), dict(info)

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every row with ``actions`` ``[N, A]``."""
        action = torch.as_tensor(
            np.asarray(actions).reshape(self.num_envs, -1),
            dtype=self._action_dtype,
            device=self.env.device,
        )
        pending = self._pending.copy() if self.autoreset_mode == AutoresetMode.NEXT_STEP else None
        if pending is not None and pending.any():
            owner = self._owner
            saved_state, saved_steps = dict(owner.state), owner.elapsed_steps
        with torch.no_grad():
            observation, reward, terminated, truncated, info = self.env.step(action)
            if pending is not None and pending.any():  # undo the step of autoreset rows
                rows = torch.as_tensor(pending, device=saved_steps.device)
                owner.state = {
                    key: torch.where(_by_row(rows, value), saved_state[key], value)
                    for key, value in owner.state.items()
                }
                owner.elapsed_steps = torch.where(rows, saved_steps, owner.elapsed_steps)
        observation = self._numpy(observation, self._observation_dtype)
        final_obs = self._numpy(info["final_observation"], self._observation_dtype)
        reward = self._numpy(reward, np.float64)
        terminated, truncated = self._numpy(terminated), self._numpy(truncated)
        metrics = {name: self._numpy(value) for name, value in info.get("metrics", {}).items()}
        infos: dict[str, Any] = {}
        if pending is None:  # same step
            done = terminated | truncated
            infos.update(final_obs=final_obs, _final_obs=done, _final_info=done.copy())
            infos["final_info"] = {name: value.copy() for name, value in metrics.items()}
            infos["final_info"].update({f"_{name}": done.copy() for name in metrics})
            returned = observation
        else:  # next step; the arrays may share the env's tensors' memory
            reward, terminated, truncated = reward.copy(), terminated.copy(), truncated.copy()
            reward[pending] = 0.0
            terminated[pending] = truncated[pending] = False
            done = terminated | truncated
            returned = np.where(_by_row(done, final_obs), final_obs, observation)
            returned[pending] = self._env_obs[pending]
            self._env_obs = np.where(_by_row(pending, observation), self._env_obs, observation)
            self._pending = done
        for name, value in metrics.items():
            valid = np.ones(self.num_envs, dtype=bool) if pending is None else ~pending
            infos[name] = np.where(_by_row(valid, value), value, 0)
            infos[f"_{name}"] = valid
        self._returned_obs = returned
        return returned.copy(), reward, terminated, truncated, infos

    def close_extras(self, **kwargs: Any) -> None:
        """Close the wrapped env if it can be closed."""
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


def _by_row(mask: Any, like: Any) -> Any:
    """Broadcast a row mask ``[N]`` (tensor or array) against ``like`` ``[N, ...]``."""
    return mask.reshape((-1,) + (1,) * (like.ndim - 1))


def _state_owner(env: Any) -> Any:
    """``env``, or one it wraps as ``.env``, carrying per-row ``state``/``elapsed_steps``."""
    seen: set[int] = set()
    while env is not None and id(env) not in seen:
        seen.add(id(env))
        attributes = getattr(env, "__dict__", {})
        state, steps = attributes.get("state"), attributes.get("elapsed_steps")
        if isinstance(state, dict) and torch.is_tensor(steps):
            return env
        env = attributes.get("env")
    return None


def to_gymnasium(
    env: DifferentiableVecEnv, autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP
) -> GymnasiumVectorEnv:
    """Wrap a pathgrad env as a Gymnasium ``VectorEnv`` (NumPy in and out, no graph).

    Raises:
        ValueError: If next-step autoreset is asked of an env without per-row state.
    """
    return GymnasiumVectorEnv(env, autoreset_mode)


def to_sb3(env: DifferentiableVecEnv | GymnasiumVectorEnv) -> Any:
    """Wrap a pathgrad env as a Stable-Baselines3 ``VecEnv`` (needs ``stable-baselines3``).

    Stable-Baselines3 does not accept Gymnasium vector envs; this bridge gives
    it the same dynamics (same-step autoreset, as SB3 expects), with
    ``terminal_observation``, ``TimeLimit.truncated`` and ``is_success`` (from
    the env's ``success`` metric) in the info of each row that finishes.

    Raises:
        ValueError: If given a ``GymnasiumVectorEnv`` in next-step mode.
    """
    from pathgrad.envs.sb3_adapter import SB3VecEnv

    if isinstance(env, GymnasiumVectorEnv):
        if env.autoreset_mode != AutoresetMode.SAME_STEP:
            raise ValueError(
                "to_sb3 needs same-step autoreset: pass the pathgrad env itself or "
                "to_gymnasium(env, AutoresetMode.SAME_STEP)."
            )
        return SB3VecEnv(env)
    return SB3VecEnv(to_gymnasium(env, AutoresetMode.SAME_STEP))
