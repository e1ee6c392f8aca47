"""Rollout steps fused into compiled chunks: policy and env step in one ``torch.compile`` region.

Compiling the env step and the policy network separately leaves, per step, two
compiled regions with their call overhead, two autograd nodes, and eager glue
between them. Here ``chunk_steps`` consecutive steps (observation
normalization, policy, action clamp, env transition) are traced as one graph,
so their elementwise work fuses across steps and backward runs one compiled
node per chunk. The random draws stay eager and in the order of an eager step
(policy noise from torch's global RNG, reset states from the env's generator),
so a fused rollout samples exactly what an eager one does; results agree up to
floating-point reassociation.

Needs an env with ``draw_reset_states`` and ``transition`` (every env built on
``BatchedDifferentiableEnv``) and a policy with ``sample_noise`` and
``action_from_noise`` (``GaussianMLPPolicy``). Per-step gradient hooks (action
adjoint clipping and statistics, state-gradient decay) cannot live inside a
compiled graph; the collector falls back to its per-step path for those.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from pathgrad.core.action_bounds import clamp_action
from pathgrad.normalization import RunningObservationNormalizer, apply_normalization

__all__ = [
    "CompiledRolloutChunks",
    "StepRecord",
    "compile_options",
    "policy_env_step",
    "supports_fused_steps",
]


class StepRecord(NamedTuple):
    """What one fused step produced (the fields of a ``DifferentiableTransition`` but ``done``)."""

    observation: torch.Tensor
    policy_output: dict[str, torch.Tensor]
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    next_observation: torch.Tensor
    info: dict[str, Any]


def supports_fused_steps(env: Any, policy: Any) -> bool:
    """Whether ``env`` and ``policy`` expose the pure step functions fusing needs."""
    return all(
        callable(getattr(owner, name, None))
        for owner, name in (
            (env, "draw_reset_states"),
            (env, "transition"),
            (policy, "sample_noise"),
            (policy, "action_from_noise"),
        )
    )


def compile_options(env: Any) -> dict[str, Any]:
    """Inductor options of the compiled update's programs on ``env``'s device.

    On CPU, Inductor's C++ wrapper: the per-call glue (views, allocations,
    checks) in C++, 1.3x faster at 64 envs than its Python wrapper, for ~10 s
    more compile.
    """
    return {"cpp_wrapper": True} if torch.device(env.device).type == "cpu" else {}


def policy_env_step(
    env: Any,
    policy: Any,
    action_bounds: tuple[torch.Tensor, torch.Tensor] | None,
    observation: torch.Tensor,
    state: dict[str, torch.Tensor],
    elapsed_steps: torch.Tensor,
    noise: torch.Tensor | None,
    reset: dict[str, torch.Tensor],
    normalization: tuple[torch.Tensor, ...] | None,
) -> tuple[dict[str, torch.Tensor], tuple[Any, ...]]:
    """One collector step as pure tensor code: the policy's outputs and ``env.transition``'s.

    Normalizes the observation, acts from ``noise``, clamps the action to
    ``action_bounds`` (the outputs' ``action`` is the clamped one) and steps.
    """
    policy_input = (
        observation if normalization is None else apply_normalization(observation, normalization)
    )
    output = dict(policy.action_from_noise(policy_input, noise))
    action = output["action"]
    if action_bounds is not None:
        action = clamp_action(action, action_bounds)
        output["action"] = action
    return output, env.transition(state, action.to(env.dtype), reset, elapsed_steps)


class CompiledRolloutChunks:
    """Steps an env and a policy ``chunk_steps`` at a time through one compiled function.

    Args:
        env: Env with ``draw_reset_states``, ``transition``, ``state`` and
            ``elapsed_steps`` (a ``BatchedDifferentiableEnv``).
        policy: Policy with ``sample_noise`` and ``action_from_noise``.
        chunk_steps: Steps per compiled region; more fuse more, and compile longer.
        observation_normalizer: Applied to the policy's input, as in the collector.
        action_bounds: ``(low, high)`` to clamp actions to, or ``None``.
    """

    def __init__(
        self,
        env: Any,
        policy: Any,
        chunk_steps: int,
        *,
        observation_normalizer: RunningObservationNormalizer | None = None,
        action_bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        if int(chunk_steps) <= 0:
            raise ValueError(f"chunk_steps must be positive, got {chunk_steps}.")
        if not supports_fused_steps(env, policy):
            raise ValueError(
                "Fused compiled steps need an env with draw_reset_states() and transition() "
                "and a policy with sample_noise() and action_from_noise()."
            )
        self.env = env
        self.policy = policy
        self.chunk_steps = int(chunk_steps)
        self.observation_normalizer = observation_normalizer
        self.action_bounds = action_bounds
        self._compiled_steps = torch.compile(self._steps, dynamic=False)

    def run(
        self, observation: torch.Tensor, num_steps: int, deterministic: bool
    ) -> list[StepRecord]:
        """Advance ``num_steps`` steps from ``observation`` (the env's current one).

        Full chunks run compiled; a shorter remainder runs the same function
        eagerly (compiling each remainder length would cost more than it saves).
        The env's ``state`` and ``elapsed_steps`` advance as its ``step`` would.
        """
        env = self.env
        records: list[StepRecord] = []
        done_steps = 0
        while done_steps < num_steps:
            count = min(self.chunk_steps, num_steps - done_steps)
            noises = [self.policy.sample_noise(observation, deterministic) for _ in range(count)]
            resets = [env.draw_reset_states() for _ in range(count)]
            normalization = (
                None
                if self.observation_normalizer is None
                else self.observation_normalizer.constants(observation.dtype)
            )
            steps = self._compiled_steps if count == self.chunk_steps else self._steps
            chunk, env.state, env.elapsed_steps = steps(
                observation, env.state, env.elapsed_steps, noises, resets, normalization
            )
            records.extend(chunk)
            observation = chunk[-1].next_observation
            done_steps += count
        return records

    def _steps(
        self,
        observation: torch.Tensor,
        state: dict[str, torch.Tensor],
        elapsed_steps: torch.Tensor,
        noises: list[torch.Tensor | None],
        resets: list[dict[str, torch.Tensor]],
        normalization: tuple[torch.Tensor, ...] | None,
    ) -> tuple[list[StepRecord], dict[str, torch.Tensor], torch.Tensor]:
        """``len(noises)`` collector steps as one pure function (what is compiled)."""
        records: list[StepRecord] = []
        for noise, reset in zip(noises, resets, strict=True):
            policy_output, transition = policy_env_step(
                self.env, self.policy, self.action_bounds,
                observation, state, elapsed_steps, noise, reset, normalization,
            )  # fmt: skip
            (
                next_observation,
                reward,
                terminated,
                truncated,
                final_observation,
                metrics,
                state,
                elapsed_steps,
            ) = transition
            info = {"final_observation": final_observation, "metrics": metrics}
            records.append(
                StepRecord(
                    observation=observation,
                    policy_output=policy_output,
                    reward=reward,
                    terminated=terminated,
                    truncated=truncated,
                    next_observation=next_observation,
                    info=info,
                )
            )
            observation = next_observation
        return records, state, elapsed_steps
