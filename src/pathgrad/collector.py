"""Graph-preserving rollout collection from differentiable environments."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch

from pathgrad.core.action_bounds import action_space_bounds, clamp_action
from pathgrad.core.env_contract import check_first_result, check_reward_path
from pathgrad.core.episodes import first_episode_mask
from pathgrad.env import DifferentiableVecEnv
from pathgrad.gradients import BatchedGradientNormStats, clip_batched_gradient_norm
from pathgrad.normalization import RunningObservationNormalizer
from pathgrad.policies import Policy, PolicyOutput, as_tensor_policy

__all__ = [
    "DifferentiableCollector",
    "DifferentiableRollout",
    "DifferentiableTransition",
    "action_space_bounds",
    "clamp_action",
]


class RolloutChunks(Protocol):
    """Steps run in compiled chunks (``pathgrad.compiled.rollout.CompiledRolloutChunks``)."""

    def run(self, observation: torch.Tensor, num_steps: int, deterministic: bool) -> list[Any]:
        """Advance ``num_steps`` steps; one ``DifferentiableTransition.from_step`` record each."""
        ...


@dataclasses.dataclass(frozen=True)
class DifferentiableTransition:
    """One graph-connected step of every env.

    Built as the reference builds it (``done`` left out: it is derived) or
    with an explicit ``done``.

    Attributes:
        observation: Raw (unnormalized) observation the action was chosen from.
        policy_output: The policy's mapping (``action``, ``log_prob``, ...; a
            TensorDict too).
        reward: Reward ``[N]``.
        terminated: Episode ended in a terminal state ``[N]``.
        truncated: Episode cut by the time limit ``[N]``.
        next_observation: Observation after the step (the next episode's first
            one for rows that reset; ``info["final_observation"]`` has the other).
        info: The env's info dict.
        done: ``terminated | truncated`` when not given.
    """

    observation: torch.Tensor
    policy_output: Mapping[str, torch.Tensor]
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    next_observation: torch.Tensor
    info: Mapping[str, Any]
    done: torch.Tensor = None  # type: ignore[assignment]  # derived in __post_init__

    def __post_init__(self) -> None:
        if self.done is None:
            done = torch.as_tensor(self.terminated, dtype=torch.bool) | torch.as_tensor(
                self.truncated, dtype=torch.bool
            )
            object.__setattr__(self, "done", done)

    @classmethod
    def from_step(
        cls,
        observation: torch.Tensor,
        policy_output: Mapping[str, torch.Tensor],
        reward: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        next_observation: torch.Tensor,
        info: Mapping[str, Any],
    ) -> DifferentiableTransition:
        """The transition of one step, ``done`` derived from the two flags."""
        return cls(
            observation=observation,
            policy_output=policy_output,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            next_observation=next_observation,
            info=info,
            done=terminated | truncated,
        )

    @property
    def action(self) -> torch.Tensor:
        """The action passed to the env (after clipping, if enabled)."""
        return self.policy_output["action"]


@dataclasses.dataclass(frozen=True)
class DifferentiableRollout:
    """A sequence of graph-connected transitions of ``num_envs`` envs."""

    initial_observation: torch.Tensor
    transitions: tuple[DifferentiableTransition, ...]
    action_gradient_stats: BatchedGradientNormStats | None = None

    @property
    def num_steps(self) -> int:
        """Number of transitions."""
        return len(self.transitions)

    @property
    def final_observation(self) -> torch.Tensor:
        """Observation after the last transition."""
        if not self.transitions:
            return self.initial_observation
        return self.transitions[-1].next_observation

    def _stack(self, name: str, empty_shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        if not self.transitions:
            return torch.empty(empty_shape, dtype=dtype, device=self.initial_observation.device)
        return torch.stack([getattr(transition, name) for transition in self.transitions])

    @property
    def observations(self) -> torch.Tensor:
        """Raw observations ``[T, N, D]`` (graph kept)."""
        obs = self.initial_observation
        return self._stack("observation", (0, *obs.shape), obs.dtype)

    @property
    def rewards(self) -> torch.Tensor:
        """Rewards ``[T, N]`` (graph kept)."""
        obs = self.initial_observation
        return self._stack("reward", (0, obs.shape[0]), obs.dtype)

    @property
    def dones(self) -> torch.Tensor:
        """Done flags ``[T, N]``."""
        return self._stack("done", (0, self.initial_observation.shape[0]), torch.bool)

    @property
    def alive_mask(self) -> torch.Tensor:
        """``[T, N]``: true up to and including each env's first done."""
        dones = self.dones
        return dones if dones.shape[0] == 0 else first_episode_mask(dones)

    @property
    def terminated(self) -> torch.Tensor:
        """Terminal flags ``[T, N]``."""
        return self._stack("terminated", (0, self.initial_observation.shape[0]), torch.bool)

    @property
    def final_observations(self) -> torch.Tensor:
        """Each step's ``info["final_observation"]`` ``[T, N, D]`` (pre-reset, graph kept)."""
        return torch.stack([step.info["final_observation"] for step in self.transitions])

    def policy_outputs(self, key: str) -> torch.Tensor | None:
        """The policy's ``key`` output ``[T, N, ...]`` (graph kept); ``None`` if a step lacks it."""
        outputs = [transition.policy_output for transition in self.transitions]
        if not outputs or any(key not in output for output in outputs):
            return None
        return torch.stack([output[key] for output in outputs])


class DifferentiableCollector:
    """Steps a policy through a differentiable env, keeping the graph.

    The policy sees observations normalized by ``observation_normalizer``; the
    rollout keeps the raw ones (for the normalizer's update).

    Args:
        env: The differentiable env.
        policy: The policy, of either calling convention (tensors, or the
            reference's TensorDicts through :func:`~pathgrad.policies.as_tensor_policy`).
        device: Device of rewards and flags in the rollout.
        observation_normalizer: Optional normalizer applied before the policy.
        clip_actions_to_space: Clamp actions to the action space bounds before
            the env step. The clamp passes the adjoint through inside the
            bounds and blocks it outside: an action beyond a bound gets zero
            gradient from the env (a squashed policy avoids this).
        action_adjoint_max_norm: If positive, a backward hook clips each env's
            adjoint of the action to this L2 norm and records
            :class:`BatchedGradientNormStats` in the rollout.
        record_action_adjoint_stats: Record the statistics (the gradient-health
            record) even without clipping.
    """

    def __init__(
        self,
        env: DifferentiableVecEnv,
        policy: Policy,
        device: torch.device | str,
        *,
        observation_normalizer: RunningObservationNormalizer | None = None,
        clip_actions_to_space: bool = False,
        action_adjoint_max_norm: float = 0.0,
        record_action_adjoint_stats: bool = False,
    ) -> None:
        if action_adjoint_max_norm < 0.0:
            raise ValueError("action_adjoint_max_norm cannot be negative.")
        self.env = env
        self.policy = policy
        self.device = torch.device(device)
        self.observation_normalizer = observation_normalizer
        self.clip_actions_to_space = bool(clip_actions_to_space)
        self.action_adjoint_max_norm = float(action_adjoint_max_norm)
        self.record_action_adjoint_stats = bool(record_action_adjoint_stats)
        self._observation: torch.Tensor | None = None
        self._reset_checked = self._step_checked = self._reward_path_checked = False
        # Set by the trainer for algorithms that bootstrap from info['final_observation'].
        self.needs_final_observation = False
        self.compiled_chunks: RolloutChunks | None = None
        self.action_bounds = (
            action_space_bounds(env.single_action_space, self.device)
            if self.clip_actions_to_space
            else None
        )

    def use_compiled_chunks(self, chunks: RolloutChunks) -> None:
        """Collect through ``chunks`` (built by ``pathgrad.compiled.rollout``).

        Used whenever :attr:`needs_step_hooks` is false; otherwise
        :meth:`collect` keeps its per-step path.
        """
        self.compiled_chunks = chunks

    @property
    def needs_step_hooks(self) -> bool:
        """Whether steps need gradient hooks (adjoint clipping or statistics, state decay).

        Hooks cannot live inside a compiled graph: such steps take the per-step path.
        """
        return (
            self.action_adjoint_max_norm > 0.0
            or self.record_action_adjoint_stats
            or getattr(self.env, "state_gradient_decay", 1.0) != 1.0
        )

    @property
    def observation(self) -> torch.Tensor | None:
        """The current raw observation, ``None`` before the first reset."""
        return self._observation

    def reset(self, *, seed: int | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        """Reset the env (seeded if given) and the collector's observation."""
        result = self.env.reset(seed=seed)
        if not self._reset_checked:  # the first reset meets the contract, or training stops
            check_first_result(self.env, "reset", result, policy_dtype=self._policy_dtype())
            self._reset_checked = True
        self._observation, info = result
        return self._observation, info

    def collect(
        self,
        num_steps: int,
        *,
        deterministic: bool = False,
        on_step_callback: Callable[[DifferentiableTransition], None] | None = None,
        gradient_stats: BatchedGradientNormStats | None = None,
    ) -> DifferentiableRollout:
        """Collect ``num_steps`` graph-connected steps from the current state.

        ``gradient_stats`` collects the action-adjoint statistics into an
        existing record (a gradient-checkpointed rollout shares one across its
        replayed chunks) instead of a new one.

        Raises:
            ValueError: If ``num_steps`` is not positive.
        """
        if num_steps <= 0:
            raise ValueError(f"num_steps must be positive, got {num_steps}.")
        if self._observation is None:
            self.reset()
        assert self._observation is not None
        initial_observation = self._observation
        stats = gradient_stats if gradient_stats is not None else self.new_gradient_stats()
        if self.compiled_chunks is not None and not self.needs_step_hooks:
            return self._checked(self._collect_fused(num_steps, deterministic, on_step_callback))
        transitions = []
        observation = initial_observation
        policy = as_tensor_policy(self.policy)
        for _ in range(num_steps):
            policy_input = (
                observation
                if self.observation_normalizer is None
                else self.observation_normalizer.normalize(observation)
            )
            policy_output = policy.get_differentiable_action(
                policy_input, deterministic=deterministic
            )
            if not isinstance(policy_output, PolicyOutput):
                policy_output = dict(policy_output)  # the collector may replace ``action``
            action = policy_output["action"]
            if self.action_bounds is not None:
                action = clamp_action(action, self.action_bounds)
                policy_output["action"] = action
            if stats is not None and action.requires_grad:
                action.register_hook(self._adjoint_clipper(stats))
            result = self.env.step(action)
            if not self._step_checked:
                check_first_result(
                    self.env,
                    "step",
                    result,
                    needs_final_observation=self.needs_final_observation,
                    policy_dtype=self._policy_dtype(),
                )
                self._step_checked = True
            next_observation, reward, terminated, truncated, info = result
            transition = DifferentiableTransition.from_step(
                observation, policy_output, reward, terminated, truncated, next_observation, info
            )
            transitions.append(transition)
            observation = next_observation
            if on_step_callback is not None:
                on_step_callback(transition)
        self._observation = observation
        return self._checked(DifferentiableRollout(initial_observation, tuple(transitions), stats))

    def _policy_dtype(self) -> torch.dtype | None:
        """The dtype of the policy's floating-point parameters (None without any)."""
        parameters = getattr(self.policy, "parameters", None)
        if not callable(parameters):
            return None
        for parameter in parameters():
            if parameter.is_floating_point():
                return parameter.dtype
        return None

    def _checked(self, rollout: DifferentiableRollout) -> DifferentiableRollout:
        """The first window collected with gradients must have a differentiable reward."""
        if not self._reward_path_checked:
            self._reward_path_checked = check_reward_path(
                self.env,
                [transition.action for transition in rollout.transitions],
                [transition.reward for transition in rollout.transitions],
            )
        return rollout

    def new_gradient_stats(self) -> BatchedGradientNormStats | None:
        """A fresh action-adjoint record if adjoints are clipped or recorded, else ``None``."""
        if self.action_adjoint_max_norm > 0.0 or self.record_action_adjoint_stats:
            return BatchedGradientNormStats(self.device)
        return None

    def _collect_fused(
        self,
        num_steps: int,
        deterministic: bool,
        on_step_callback: Callable[[DifferentiableTransition], None] | None,
    ) -> DifferentiableRollout:
        assert self.compiled_chunks is not None and self._observation is not None
        initial_observation = self._observation
        records = self.compiled_chunks.run(initial_observation, num_steps, deterministic)
        transitions = []
        for record in records:
            transition = DifferentiableTransition.from_step(*record)
            transitions.append(transition)
            if on_step_callback is not None:
                on_step_callback(transition)
        self._observation = transitions[-1].next_observation
        return DifferentiableRollout(initial_observation, tuple(transitions), None)

    def _adjoint_clipper(
        self, stats: BatchedGradientNormStats
    ) -> Callable[[torch.Tensor], torch.Tensor]:
        max_norm = self.action_adjoint_max_norm
        return lambda gradient: clip_batched_gradient_norm(gradient, max_norm, stats)

    def clear_observation(self) -> None:
        """Forget the current observation: the next :meth:`collect` resets the env."""
        self._observation = None

    def detach_state(self) -> torch.Tensor:
        """Cut the graph at the current state (the TBPTT boundary); keep the episode."""
        self._observation = self.env.detach_state()
        return self._observation
