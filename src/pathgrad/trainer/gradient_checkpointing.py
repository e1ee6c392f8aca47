"""Gradient checkpointing of complete rollouts: chunks are recomputed during backward.

A complete rollout of ``T`` steps normally keeps every step's activations
until the backward pass: memory grows with ``T``. Here the rollout runs in
chunks of ``chunk_steps`` under ``torch.utils.checkpoint``: only each chunk's
start state is kept, and a chunk's steps are run again when the backward pass
reaches them, so memory grows with ``T / chunk_steps + chunk_steps`` instead.
Gradients are those of the plain rollout (the recomputation replays the same
random numbers); compute roughly doubles for the forward part.

Needs an env built on :class:`~pathgrad.envs.BatchedDifferentiableEnv`, whose
state, step counters and generator can be set for the replay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from pathgrad.collector import DifferentiableCollector, DifferentiableTransition
from pathgrad.gradients import BatchedGradientNormStats

__all__ = ["CheckpointedReturns", "checkpointed_complete_returns", "supports_checkpointing"]


def supports_checkpointing(env: Any) -> bool:
    """Whether ``env`` exposes what a replay needs (state dict, step counters, generator)."""
    return all(hasattr(env, name) for name in ("state", "elapsed_steps", "generator", "_observe"))


class CheckpointedReturns:
    """What a checkpointed complete rollout gives the algorithm and the trainer.

    Attributes:
        returns: Discounted returns ``[N]`` up to each env's first done (graph kept).
        entropy_returns: Discounted policy entropies over the same steps (graph kept).
        num_steps: Steps collected.
        alive_observations: Raw observations ``[M, D]`` of the alive steps (no graph),
            for the observation normalizer.
        action_gradient_stats: Action-adjoint statistics (when the collector clips
            or records them), filled as the backward pass replays the chunks.
        sampled_entropies: Entropies ``[T, N]`` of the sampled action distributions
            (no graph), or ``None`` if the policy gives none.
    """

    def __init__(
        self,
        returns: torch.Tensor,
        entropy_returns: torch.Tensor,
        num_steps: int,
        alive_observations: torch.Tensor,
        action_gradient_stats: BatchedGradientNormStats | None = None,
        sampled_entropies: torch.Tensor | None = None,
    ) -> None:
        self.returns = returns
        self.entropy_returns = entropy_returns
        self.num_steps = num_steps
        self.alive_observations = alive_observations
        self.action_gradient_stats = action_gradient_stats
        self.sampled_entropies = sampled_entropies


def checkpointed_complete_returns(
    collector: DifferentiableCollector,
    num_steps: int,
    chunk_steps: int,
    gamma: float,
    *,
    deterministic: bool = False,
    on_step_callback: Callable[[DifferentiableTransition], None] | None = None,
) -> CheckpointedReturns:
    """Collect a complete rollout from the collector's current (reset) state, in chunks.

    The returns equal :func:`~pathgrad.algo.complete_discounted_return` of the
    same rollout; ``on_step_callback`` sees each step once (not on replay).

    Raises:
        ValueError: If the env cannot be replayed or a length is not positive.
    """
    env = collector.env
    if not supports_checkpointing(env):
        raise ValueError("gradient checkpointing needs an env built on BatchedDifferentiableEnv.")
    if num_steps <= 0 or chunk_steps <= 0:
        raise ValueError("num_steps and chunk_steps must be positive.")
    if collector.observation is None:
        collector.reset()
    float_keys = [key for key, value in env.state.items() if value.is_floating_point()]
    replaying = {"active": False}
    alive = torch.ones(env.num_envs, dtype=torch.bool, device=env.device)
    observations: list[torch.Tensor] = []
    sampled_entropies: list[torch.Tensor] = []
    returns = entropy_returns = None
    gradient_stats = collector.new_gradient_stats()  # hooks fire when chunks are replayed
    start = 0
    final_snapshot: dict[str, Any] = {}

    def run_chunk(first_step: int, steps: int, alive_in: torch.Tensor, fixed: dict[str, Any]):
        def chunk(_anchor: torch.Tensor, *state_tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
            try:
                return replayable_chunk(state_tensors)
            finally:
                if replaying["active"]:  # leave the env as the forward pass left it
                    env.state = dict(final_snapshot["state"])
                    env.elapsed_steps = final_snapshot["elapsed"].clone()
                    env.generator.set_state(final_snapshot["generator"])

        def replayable_chunk(state_tensors: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
            env.state = {**fixed["state"], **dict(zip(float_keys, state_tensors, strict=True))}
            env.elapsed_steps = fixed["elapsed"].clone()
            env.generator.set_state(fixed["generator"])
            collector._observation = env._observe(env.state)
            callback = None if replaying["active"] else on_step_callback
            rollout = collector.collect(
                steps,
                deterministic=deterministic,
                on_step_callback=callback,
                gradient_stats=gradient_stats,
            )
            rewards = rollout.rewards
            dones = rollout.dones
            finished = torch.cumsum(dones.int(), dim=0) - dones.int()
            mask = (finished == 0) & alive_in
            offsets = torch.arange(first_step, first_step + steps, device=rewards.device)
            gamma_powers = torch.full_like(rewards[:, 0], gamma) ** offsets.to(rewards.dtype)
            weights = mask.to(rewards.dtype) * gamma_powers.unsqueeze(-1)
            chunk_return = (rewards * weights).sum(dim=0)
            if "entropy" in rollout.transitions[0].policy_output:
                entropies = torch.stack([t.policy_output["entropy"] for t in rollout.transitions])
                chunk_entropy = (entropies * weights).sum(dim=0)
                if not replaying["active"]:
                    sampled_entropies.append(entropies.detach())
            else:
                chunk_entropy = torch.zeros_like(chunk_return)
            if not replaying["active"]:
                observations.append(rollout.observations.detach()[mask])
                fixed["alive_out"] = alive_in & ~dones.any(dim=0)
            next_state = tuple(env.state[key] for key in float_keys)
            return (chunk_return, chunk_entropy, *next_state)

        return chunk

    state_tensors = tuple(env.state[key] for key in float_keys)
    anchor = torch.zeros((), device=env.device, requires_grad=True)
    while start < num_steps:
        steps = min(chunk_steps, num_steps - start)
        fixed = {
            "state": {k: v for k, v in env.state.items() if k not in float_keys},
            "elapsed": env.elapsed_steps.clone(),
            "generator": env.generator.get_state(),
        }
        # Reentrant checkpointing runs the chunk without building its graph:
        # memory then holds one node per chunk instead of dozens per step. The
        # anchor requires grad so that the first chunk (from a reset, no grad
        # in its inputs) still backpropagates into the policy.
        outputs = checkpoint(
            run_chunk(start, steps, alive, fixed),
            anchor,
            *state_tensors,
            use_reentrant=True,
            preserve_rng_state=True,
        )
        chunk_return, chunk_entropy, *next_state = outputs
        returns = chunk_return if returns is None else returns + chunk_return
        entropy_returns = (
            chunk_entropy if entropy_returns is None else entropy_returns + chunk_entropy
        )
        state_tensors = tuple(next_state)
        alive = fixed["alive_out"]
        start += steps
    env.state = {**env.state, **dict(zip(float_keys, state_tensors, strict=True))}
    final_snapshot.update(
        state=dict(env.state),
        elapsed=env.elapsed_steps.clone(),
        generator=env.generator.get_state(),
    )
    replaying["active"] = True
    assert returns is not None and entropy_returns is not None
    return CheckpointedReturns(
        returns,
        entropy_returns,
        num_steps,
        torch.cat(observations),
        gradient_stats,
        torch.cat(sampled_entropies) if sampled_entropies else None,
    )
