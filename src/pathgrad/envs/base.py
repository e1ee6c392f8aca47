"""Shared machinery of the built-in batched differentiable environments."""

from __future__ import annotations

import hashlib
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from gymnasium.spaces import Box

from pathgrad.core.env_contract import check_space_widths

__all__ = [
    "BatchedDifferentiableEnv",
    "State",
    "StepInfo",
    "check_constants",
    "resolve_dtype",
]

State = dict[str, torch.Tensor]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """Accept ``torch.float32``/``torch.float64`` or their names."""
    if isinstance(dtype, torch.dtype) and dtype in _DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype in _DTYPES:
        return _DTYPES[dtype]
    raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}.")


def check_constants(
    positive: dict[str, float] | None = None, non_negative: dict[str, float] | None = None
) -> None:
    """Raise ``ValueError`` naming the first constant out of its range."""
    for name, value in (positive or {}).items():
        if not value > 0.0:
            raise ValueError(f"{name} must be positive, got {value}.")
    for name, value in (non_negative or {}).items():
        if not value >= 0.0:
            raise ValueError(f"{name} cannot be negative, got {value}.")


class BatchedDifferentiableEnv(ABC):
    """A batch of envs stepped as tensors, with auto-reset and a time limit.

    Subclasses describe one env as pure tensor functions over a state dict of
    ``[N, ...]`` tensors; this class batches them, auto-resets finished rows
    inside :meth:`step` (``torch.where``, no host synchronisation), truncates
    at ``max_episode_steps``, and saves state and generator for exact resume.
    With ``state_gradient_decay`` below 1, the adjoint of the carried state is
    multiplied by it at every step (a stabilizer for long backpropagation).

    Args:
        num_envs: Number of parallel envs.
        device: Torch device of every tensor.
        dtype: ``float32`` (default) or ``float64``.
        max_episode_steps: Time limit; ``truncated`` is set at this step.
        seed: Seed of the env's generator; by default drawn from torch's global RNG.
    """

    observation_dim: int
    action_dim: int
    default_max_episode_steps: int
    observation_normalize_mask: list[bool] | None = None
    # Factor applied to the carried state's adjoint at every step (1: exact gradient).
    state_gradient_decay: float = 1.0
    # What the env supports: the dtypes its physics computes in, and torch.compile.
    supported_dtypes: tuple[str, ...] = ("float32", "float64")
    supports_torch_compile: bool = True
    # Where _uniform takes its samples while draw_reset_window plans or replays (None: rand).
    _uniform_source: Callable[[float, float, tuple[int, ...]], torch.Tensor] | None = None

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        *,
        dtype: str | torch.dtype = torch.float32,
        max_episode_steps: int | None = None,
        seed: int | None = None,
    ) -> None:
        if int(num_envs) <= 0:
            raise ValueError(f"num_envs must be positive, got {num_envs}.")
        self.num_envs = int(num_envs)
        self.device = torch.device(device)
        self.dtype = resolve_dtype(dtype)
        self.max_episode_steps = int(max_episode_steps or self.default_max_episode_steps)
        if self.max_episode_steps <= 0:
            raise ValueError(f"max_episode_steps must be positive, got {max_episode_steps}.")
        self.generator = torch.Generator(device=self.device)
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
        self.generator.manual_seed(int(seed))
        check_space_widths(self)
        np_dtype = np.float64 if self.dtype == torch.float64 else np.float32
        self.single_observation_space = Box(-np.inf, np.inf, (self.observation_dim,), np_dtype)
        self.single_action_space = Box(-1.0, 1.0, (self.action_dim,), np_dtype)
        self.state: State = self._initial_state(self.num_envs)
        self.elapsed_steps = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)

    # Subclass hooks: pure functions of batched tensors.
    @abstractmethod
    def _sample_initial_state(self, num: int) -> State:
        """Draw ``num`` initial states from ``self.generator``."""

    @abstractmethod
    def _dynamics(self, state: State, action: torch.Tensor) -> State:
        """Next state after applying ``action``."""

    @abstractmethod
    def _reward(self, state: State, action: torch.Tensor, next_state: State) -> torch.Tensor:
        """Reward ``[N]`` of the transition."""

    @abstractmethod
    def _observe(self, state: State) -> torch.Tensor:
        """Observation ``[N, observation_dim]`` of ``state``."""

    def _dynamics_and_reward(
        self, state: State, action: torch.Tensor
    ) -> tuple[State, torch.Tensor]:
        """Next state and reward; override to share work between the two hooks."""
        next_state = self._dynamics(state, action)
        return next_state, self._reward(state, action, next_state)

    def _terminated(self, state: State) -> torch.Tensor:
        """Rows whose episode ended in ``state``; none by default."""
        return torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    @property
    def _can_terminate(self) -> bool:
        """Whether :meth:`_terminated` is overridden (else only the time limit ends episodes)."""
        return type(self)._terminated is not BatchedDifferentiableEnv._terminated

    def _metrics(self, state: State) -> dict[str, torch.Tensor]:
        """Per-env evaluation metrics of ``state``; none by default."""
        return {}

    def _initial_state(self, num: int) -> State:
        """``num`` initial states: :meth:`_sample_initial_state`, completed if a base needs to."""
        return self._sample_initial_state(num)

    # Contract.
    def _uniform(self, low: float, high: float, *shape: int) -> torch.Tensor:
        """Uniform samples from the env's generator."""
        if self._uniform_source is not None:
            return self._uniform_source(low, high, shape)
        sample = torch.rand(shape, generator=self.generator, device=self.device, dtype=self.dtype)
        return low + (high - low) * sample

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Reset every env, or the rows of ``options["reset_mask"]`` (``[N]`` bool).

        An int seed reseeds the env's generator first. A sequence of
        ``num_envs`` seeds draws row ``i`` from a generator seeded with
        ``seed[i]`` (``None``: from the env's generator) and, when no entry is
        ``None``, reseeds the env's generator from the whole sequence.

        Raises:
            ValueError: On a seed list of the wrong length, a mask of the wrong
                shape or dtype, or any other option.
        """
        mask = _reset_mask(options, self.num_envs, self.device)
        if seed is None or np.ndim(seed) == 0:
            if seed is not None:
                self.generator.manual_seed(int(seed))
            fresh = self._initial_state(self.num_envs)
        else:
            fresh = _sample_seeded_rows(self, list(seed), mask)
        if mask is None:
            self.state = fresh
            self.elapsed_steps = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        else:
            self.state = {
                key: torch.where(_rows(mask, value), fresh[key], value)
                for key, value in self.state.items()
            }
            self.elapsed_steps = torch.where(mask, 0, self.elapsed_steps)
        return self._observe(self.state), {}

    def step(
        self, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Advance every env; finished rows restart with a fresh initial state."""
        if action.shape != (self.num_envs, self.action_dim):
            raise ValueError(
                f"action must have shape {(self.num_envs, self.action_dim)}, "
                f"got {tuple(action.shape)}."
            )
        action = action.to(device=self.device, dtype=self.dtype)
        state = self.state
        if self.state_gradient_decay != 1.0:
            state = {
                key: _decay_gradient(value, self.state_gradient_decay)
                for key, value in state.items()
            }
        fresh = self.draw_reset_states()
        observation, reward, terminated, truncated, next_state, self.state, self.elapsed_steps = (
            self._advance(state, action, fresh, self.elapsed_steps)
        )
        return (
            observation,
            reward,
            terminated,
            truncated,
            StepInfo(self, next_state, self._step_info_extras()),
        )

    def _step_info_extras(self) -> dict[str, Any]:
        """Entries added to the ``info`` of :meth:`step`, computed at once (none by default)."""
        return {}

    def draw_reset_states(self) -> State:
        """Initial states of every row, drawn from the env's generator.

        :meth:`step` draws them every step and uses them for the rows it
        auto-resets, so the generator advances the same whatever is done.
        """
        return self._initial_state(self.num_envs)

    def draw_reset_window(self, count: int) -> State:
        """``count`` steps' :meth:`draw_reset_states` at once, each entry ``[count, N, ...]``.

        The uniform samples (:meth:`_uniform`) of all ``count`` steps come from the
        generator in one call, in the order the steps would draw them, and one
        call of :meth:`_initial_state` builds the ``count * N`` rows. That equals
        ``count`` calls of :meth:`draw_reset_states` bit for bit when the env
        draws only through :meth:`_uniform`, builds each row on its own and its
        generator draws serially (CPU); :class:`pathgrad.compiled.window_draws.WindowDraws`
        checks it once before relying on it.
        """
        num = self.num_envs
        shapes: list[tuple[int, ...]] = []

        def plan(low: float, high: float, shape: tuple[int, ...]) -> torch.Tensor:
            shapes.append(shape)
            return torch.zeros(shape, device=self.device, dtype=self.dtype)

        self._uniform_source = plan
        try:
            self._initial_state(num)
        finally:
            self._uniform_source = None
        sizes = [math.prod(shape) for shape in shapes]
        pool = torch.rand(
            (count, sum(sizes)), generator=self.generator, device=self.device, dtype=self.dtype
        )
        starts = iter([sum(sizes[:index]) for index in range(len(sizes))])
        widths = iter(sizes)

        def replay(low: float, high: float, shape: tuple[int, ...]) -> torch.Tensor:
            start = next(starts)
            sample = pool[:, start : start + next(widths)].reshape(shape)
            return low + (high - low) * sample

        self._uniform_source = replay
        try:
            states = self._initial_state(count * num)
        finally:
            self._uniform_source = None
        return {key: value.reshape(count, num, *value.shape[1:]) for key, value in states.items()}

    def transition(
        self,
        state: State,
        action: torch.Tensor,
        fresh: State,
        elapsed_steps: torch.Tensor,
    ) -> tuple[Any, ...]:
        """One batched step as a pure tensor function (what compiled rollouts trace).

        Returns observation, reward, terminated, truncated, final observation,
        metrics, the next state (finished rows replaced by ``fresh``) and the
        next step counters. :meth:`step` is ``transition(state, action,
        draw_reset_states(), elapsed_steps)``, keeping the next state and
        counters, with the final observation and metrics computed only when its
        ``info`` is read (:class:`StepInfo`).
        """
        observation, reward, terminated, truncated, next_state, merged, elapsed_steps = (
            self._advance(state, action, fresh, elapsed_steps)
        )
        return (
            observation,
            reward,
            terminated,
            truncated,
            self._observe(next_state),
            self._metrics(next_state),
            merged,
            elapsed_steps,
        )

    def _advance(
        self,
        state: State,
        action: torch.Tensor,
        fresh: State,
        elapsed_steps: torch.Tensor,
    ) -> tuple[Any, ...]:
        """The step without its extras: observation, reward, flags, state before and after reset."""
        next_state, reward = self._dynamics_and_reward(state, action)
        terminated = self._terminated(next_state)
        if terminated.dtype != torch.bool or terminated.shape != action.shape[:1]:
            raise TypeError(
                f"{type(self).__name__}._terminated must return a bool tensor of shape "
                f"({action.shape[0]},), got {terminated.dtype} of shape {tuple(terminated.shape)}."
            )
        elapsed_steps = elapsed_steps + 1
        truncated = elapsed_steps >= self.max_episode_steps
        done = terminated | truncated if self._can_terminate else truncated
        merged = {
            key: torch.where(_rows(done, value), fresh[key], value)
            for key, value in next_state.items()
        }
        elapsed_steps = torch.where(done, torch.zeros_like(elapsed_steps), elapsed_steps)
        observation = self._observe(merged)
        return observation, reward, terminated, truncated, next_state, merged, elapsed_steps

    def compile_step(self, **compile_kwargs: Any) -> None:
        """Compile the step's tensor work with ``torch.compile`` (fused kernels).

        Sampling, the state-gradient decay and the ``info`` extras stay eager;
        results equal the eager step's up to floating-point reassociation.
        """
        compile_kwargs.setdefault("dynamic", False)
        self._advance = torch.compile(self._advance, **compile_kwargs)

    def detach_state(self) -> torch.Tensor:
        """Cut the graph of the carried state and return the current observation."""
        self.state = {key: value.detach() for key, value in self.state.items()}
        return self._observe(self.state)

    def state_dict(self) -> dict[str, Any]:
        """State tensors, step counters and generator, for exact resume."""
        return {
            "state": {key: value.detach().clone() for key, value in self.state.items()},
            "elapsed_steps": self.elapsed_steps.clone(),
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned.

        A generator state saved on another device type (CPU: 5056 bytes,
        CUDA: 16) cannot be set; the generator is then seeded from the saved
        bytes, so the same checkpoint on the same device continues the same way.

        Raises:
            ValueError: If an entry is missing or has the wrong shape.
        """
        saved = state["state"]
        if set(saved) != set(self.state):
            raise ValueError(
                f"env state has entries {sorted(saved)}, expected {sorted(self.state)}."
            )
        for key, value in saved.items():
            if tuple(value.shape) != tuple(self.state[key].shape):
                raise ValueError(
                    f"env state entry '{key}' has shape {tuple(value.shape)}, "
                    f"expected {tuple(self.state[key].shape)}."
                )
        self.state = {
            key: value.to(device=self.device, dtype=self.state[key].dtype)
            for key, value in saved.items()
        }
        self.elapsed_steps = state["elapsed_steps"].to(self.device).clone()
        generator_state = state["generator"]
        if generator_state.numel() == self.generator.get_state().numel():
            self.generator.set_state(generator_state)
        else:  # saved on another device type: a seed drawn from it, deterministically
            digest = hashlib.sha256(generator_state.cpu().numpy().tobytes()).digest()
            self.generator.manual_seed(int.from_bytes(digest[:8], "little"))

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release here
        """Release resources (none are held)."""


class StepInfo(Mapping[str, Any]):
    """``info`` of :meth:`BatchedDifferentiableEnv.step`, its entries computed when first read.

    ``final_observation`` (the observation before any reset, graph kept) and
    ``metrics`` are functions of the state the step reached; training with
    APG reads neither, so an eager step does not pay for them.
    """

    _KEYS = ("final_observation", "metrics")

    def __init__(
        self,
        env: BatchedDifferentiableEnv,
        next_state: State,
        extras: Mapping[str, Any] | None = None,
    ) -> None:
        self._env = env
        self._next_state = next_state
        self._values: dict[str, Any] = dict(extras or {})
        self._keys = self._KEYS + tuple(key for key in self._values if key not in self._KEYS)

    def __getitem__(self, key: str) -> Any:
        if key not in self._values:
            if key == "final_observation":
                self._values[key] = self._env._observe(self._next_state)
            elif key == "metrics":
                self._values[key] = self._env._metrics(self._next_state)
            else:
                raise KeyError(key)
        return self._values[key]

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __iter__(self):
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"StepInfo({dict(self)!r})"


def _decay_gradient(value: torch.Tensor, factor: float) -> torch.Tensor:
    """``value`` exactly, with the gradient flowing back through it multiplied by ``factor``."""
    if not value.requires_grad:
        return value
    passed = value.view_as(value)
    passed.register_hook(lambda gradient: gradient * factor)
    return passed


def _rows(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Broadcast a row mask ``[N]`` against ``like`` ``[N, ...]``."""
    return mask if like.ndim == 1 else mask.view((-1,) + (1,) * (like.ndim - 1))


def _reset_mask(
    options: Mapping[str, Any] | None, num_envs: int, device: torch.device
) -> torch.Tensor | None:
    """The ``reset_mask`` option as a bool tensor ``[N]``; refuse any other option."""
    options = dict(options or {})
    mask = options.pop("reset_mask", None)
    if options:
        raise ValueError(
            f"unsupported reset option(s) {sorted(options)}; only 'reset_mask' is understood."
        )
    if mask is None:
        return None
    mask = torch.as_tensor(np.asarray(mask) if not torch.is_tensor(mask) else mask, device=device)
    if mask.shape != (num_envs,) or mask.dtype != torch.bool:
        raise ValueError(
            f"reset_mask must have shape ({num_envs},) and a bool dtype, "
            f"got shape {tuple(mask.shape)} and dtype {mask.dtype}."
        )
    return mask


def _sample_seeded_rows(
    env: BatchedDifferentiableEnv, seeds: list[int | None], mask: torch.Tensor | None
) -> State:
    """Initial states drawn row by row from generators seeded with ``seeds``.

    Rows outside ``mask`` keep their state and consume no randomness.
    """
    if len(seeds) != env.num_envs:
        raise ValueError(f"expected {env.num_envs} seeds (num_envs), got {len(seeds)}.")
    reset_rows = [True] * env.num_envs if mask is None else mask.tolist()
    main = env.generator
    rows: list[State] = []
    try:
        for row, (seed, reset_row) in enumerate(zip(seeds, reset_rows, strict=True)):
            if not reset_row:
                rows.append({key: value[row : row + 1] for key, value in env.state.items()})
                continue
            env.generator = main
            if seed is not None:
                env.generator = torch.Generator(device=env.device)
                env.generator.manual_seed(int(seed))
            rows.append(env._initial_state(1))
    finally:
        env.generator = main
    if all(seed is not None for seed in seeds):
        entropy = [int(seed) % 2**64 for seed in seeds]
        main.manual_seed(int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0]))
    return {key: torch.cat([row[key] for row in rows]) for key in rows[0]}
