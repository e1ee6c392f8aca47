"""A whole APG update compiled: rollout chunks, their backward and a fused Adam step.

The eager update pays Python for every step (sampling, normalization, policy,
env, bookkeeping) and for every optimizer operation. Here an update is

* the window's random draws made up front (policy noise from torch's global
  RNG, reset states from the env's generator, in the order an eager update
  draws them, so both sample the same actions and resets);
* ``chunk_steps`` steps at a time through one compiled program that carries the
  env state, the restarting discount and the discounted return (autograd
  records one node per chunk; its backward is compiled too);
* one compiled program after the backward that checks the gradient is finite,
  clips it, and applies Adam's (or AdamW's) step to the optimizer's own state,
  leaving everything untouched when the update is skipped: no host
  synchronisation until the update's metrics are read.

The results equal an eager update's up to floating-point reassociation (a test
compares them in float64), and the optimizer state stays ``torch.optim``'s, so
checkpoints, resume and the learning-rate schedule are shared with eager
training. Unrolling a whole window into one graph compiles for minutes on a CPU
(Inductor's code generation grows with the graph); chunks keep the cold compile
near a minute whatever the window, and Inductor's caches make it seconds after.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from pathgrad.compiled.adam import CompiledClipAdam
from pathgrad.compiled.blockers import compiled_update_blockers
from pathgrad.compiled.guards import GuardSkipping
from pathgrad.compiled.rollout import compile_options, policy_env_step
from pathgrad.compiled.window_draws import StepInputDraws, chunk_draws
from pathgrad.core.episodes import EpisodeTracker, first_episode_mask

if TYPE_CHECKING:
    from pathgrad.algo.apg import APG

__all__ = ["CompiledAPGUpdate", "compiled_update_blockers", "record_segment"]


class CompiledAPGUpdate:
    """Runs APG's segmented updates through compiled chunks and a compiled optimizer step.

    Args:
        env: A ``BatchedDifferentiableEnv`` (``draw_reset_states``, ``transition``).
        policy: A policy with ``sample_noise`` and ``action_from_noise``.
        algorithm: The :class:`APG` whose optimizer, schedule and metrics it drives.
        collector: The trainer's collector (current observation, normalizer,
            action bounds).
        episodes: The trainer's episode tracker.
        segment_length: Steps between graph cuts (TBPTT segments).
        chunk_steps: Steps per compiled chunk; a shorter rest of a segment runs
            the same function eagerly.
        deterministic: Use the policy mean instead of sampling.
    """

    def __init__(
        self,
        env: Any,
        policy: Any,
        algorithm: APG,
        collector: Any,
        episodes: EpisodeTracker,
        *,
        segment_length: int,
        chunk_steps: int,
        deterministic: bool = False,
    ) -> None:
        reasons = compiled_update_blockers(algorithm, env, policy, collector, "segmented")
        if reasons:
            raise ValueError("The update cannot be compiled: " + "; ".join(reasons) + ".")
        self.env = env
        self.policy = policy
        self.algorithm = algorithm
        self.collector = collector
        self.episodes = episodes
        self.segment_length = int(segment_length)
        self.chunk_steps = int(chunk_steps)
        self.deterministic = bool(deterministic)
        self.draws = StepInputDraws(env, policy, self.deterministic)
        cfg = algorithm.cfg
        options = compile_options(env)
        self.guards = GuardSkipping(env, policy, cfg)
        compiled = torch.compile(self._chunk, dynamic=False, options=options)
        self._compiled_chunk = self.guards.wrap(compiled)
        self.optimizer_step = CompiledClipAdam(
            algorithm.optimizer, cfg.max_grad_norm, cfg.max_grad_norm_before_clip, options,
            self.guards,
        )  # fmt: skip
        self.first_update_seconds: float | None = None  # compile time, mostly
        self._entropy_count = 0

    def run(self, num_steps: int, before_optimizer_step: Callable[[], None]) -> dict[str, float]:
        """One update of ``num_steps`` steps; returns APG's metrics.

        ``before_optimizer_step`` runs after the backward and before the step
        (the trainer closes its interrupt gate there).
        """
        started = time.perf_counter()
        algorithm = self.algorithm
        self.guards.begin_update()
        algorithm.begin_update()
        try:
            totals = self._accumulate(num_steps)
            before_optimizer_step()
            metrics = self._finish(totals)
        finally:
            algorithm.cancel_update()  # drops the gradients; the step is already applied
        if self.first_update_seconds is None:
            self.first_update_seconds = time.perf_counter() - started
        return metrics

    def _accumulate(self, num_steps: int) -> dict[str, torch.Tensor]:
        """Roll out and backpropagate every segment; the loss terms summed."""
        collector, env = self.collector, self.env
        observation = collector.observation
        if observation is None:
            observation, _ = collector.reset()
        zero = torch.zeros((), dtype=torch.float64, device=self.algorithm.device)
        totals = {"loss": zero, "objective": zero, "entropy": zero, "policy_entropy": zero}
        discount = None
        done_steps = 0
        while done_steps < num_steps:
            steps = min(self.segment_length, num_steps - done_steps)
            segment, discount = self._segment(observation, steps, discount)
            for key, value in segment.items():
                totals[key] = totals[key] + value
            observation = collector.detach_state()
            done_steps += steps
        self._entropy_count = num_steps * env.num_envs
        return totals

    def _segment(
        self, observation: torch.Tensor, num_steps: int, discount: torch.Tensor | None
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """One TBPTT segment: chunks forward, one backward, bookkeeping."""
        env = self.env
        normalizer = self.collector.observation_normalizer
        normalization = None if normalizer is None else normalizer.constants(observation.dtype)
        state, elapsed = env.state, env.elapsed_steps
        returns = entropy_returns = None
        observations, rewards, dones = [], [], []
        entropy_sum = torch.zeros((), dtype=torch.float64, device=self.algorithm.device)
        # Carried inputs that require grad in every chunk, so one compiled graph serves all.
        observation = observation.detach().requires_grad_()
        state = {key: value.detach().requires_grad_() for key, value in state.items()}
        # The whole segment's draws at once (one call each where shown equal), chunk by chunk.
        segment_noises, segment_resets = self.draws.draw(observation, num_steps)
        done_steps = 0
        while done_steps < num_steps:
            count = min(self.chunk_steps, num_steps - done_steps)
            noises, resets = chunk_draws(segment_noises, segment_resets, done_steps, count)
            if discount is None:
                discount = torch.ones(env.num_envs, dtype=env.dtype, device=env.device)
            if returns is None:
                returns = torch.zeros_like(discount).requires_grad_()
                entropy_returns = torch.zeros_like(discount)
                if self.algorithm.cfg.ent_coef != 0.0:
                    entropy_returns.requires_grad_()
            chunk = self._compiled_chunk if count == self.chunk_steps else self._chunk
            (
                observation, state, elapsed, discount, returns, entropy_returns,
                chunk_observations, chunk_rewards, chunk_dones, chunk_entropy,
            ) = chunk(
                observation, state, elapsed, discount, returns, entropy_returns,
                noises, resets, normalization,
            )  # fmt: skip
            observations.append(chunk_observations)
            rewards.append(chunk_rewards)
            dones.append(chunk_dones)
            entropy_sum = entropy_sum + chunk_entropy.detach().to(torch.float64)
            done_steps += count
        env.state, env.elapsed_steps = state, elapsed
        ent_coef = self.algorithm.cfg.ent_coef
        objective = returns.mean()
        entropy = entropy_returns.mean()
        loss = -objective - ent_coef * entropy
        loss.backward()
        record_segment(
            self.episodes, normalizer, torch.cat(observations), torch.cat(rewards), torch.cat(dones)
        )
        terms = {
            "loss": loss.detach().to(torch.float64),
            "objective": objective.detach().to(torch.float64),
            "entropy": entropy.detach().to(torch.float64),
            "policy_entropy": entropy_sum,
        }
        return terms, discount.detach()

    def _chunk(
        self,
        observation: torch.Tensor,
        state: dict[str, torch.Tensor],
        elapsed_steps: torch.Tensor,
        discount: torch.Tensor,
        returns: torch.Tensor,
        entropy_returns: torch.Tensor,
        noises: torch.Tensor | None,
        resets: dict[str, torch.Tensor],
        normalization: tuple[torch.Tensor, ...] | None,
    ) -> tuple[Any, ...]:
        """As many steps as ``resets`` holds (``[K, N, ...]``) as one pure function (compiled).

        ``noises`` is ``[K, N, A]`` (``None``: the policy mean); stacked inputs
        keep the compiled call's guards and wrappers few.
        """
        gamma = self.algorithm.cfg.gamma
        entropy_grad = self.algorithm.cfg.ent_coef != 0.0
        observations, rewards, dones, entropies = [], [], [], []
        for step in range(next(iter(resets.values())).shape[0]):
            noise = None if noises is None else noises[step]
            reset = {key: value[step] for key, value in resets.items()}
            output, transition = policy_env_step(
                self.env, self.policy, self.collector.action_bounds,
                observation, state, elapsed_steps, noise, reset, normalization,
            )  # fmt: skip
            next_observation, reward, terminated, truncated, _, _, state, elapsed_steps = transition
            done = terminated | truncated
            entropy = output["entropy"].to(reward.dtype)
            returns = returns + reward * discount
            entropy_returns = (
                entropy_returns + (entropy if entropy_grad else entropy.detach()) * discount
            )
            discount = torch.where(done, torch.ones_like(discount), discount * gamma)
            observations.append(observation)
            rewards.append(reward)
            dones.append(done)
            entropies.append(entropy.detach())
            observation = next_observation
        return (
            observation,
            state,
            elapsed_steps,
            discount,
            returns,
            entropy_returns,
            torch.stack(observations).detach(),  # bookkeeping: no tangents in backward
            torch.stack(rewards).detach(),
            torch.stack(dones),
            torch.stack(entropies).sum(),
        )

    def _finish(self, totals: dict[str, torch.Tensor]) -> dict[str, float]:
        """Clip, step (or skip), advance the schedule; one host read for the metrics."""
        algorithm = self.algorithm
        cfg = algorithm.cfg
        if algorithm.synchronizer is not None and algorithm.synchronizer.world_size > 1:
            # Data-parallel: a non-finite loss or gradient on any rank makes the average
            # non-finite on all, so every rank skips the same updates.
            keys = ("loss", "objective", "entropy", "policy_entropy")
            averaged = algorithm._average_across_ranks(
                self.optimizer_step.parameters,
                torch.stack([totals[key] for key in keys]),
                carry=True,
            )
            totals = dict(zip(keys, averaged, strict=True))
        norm, finite, applied, fresh = self.optimizer_step.step(totals["loss"])
        values = torch.stack(
            [
                totals["loss"], totals["objective"], totals["entropy"],
                norm.to(torch.float64), finite.to(torch.float64),
                applied.to(torch.float64), totals["policy_entropy"],
            ]
        ).tolist()  # fmt: skip
        loss, objective, entropy, grad_norm, finite_terms, applied_step, entropy_sum = values
        if not finite_terms and not cfg.skip_nonfinite_updates:
            raise FloatingPointError(
                "APG produced a non-finite loss."
                if not math.isfinite(loss)
                else "APG produced a non-finite policy gradient."
            )
        if applied_step:
            algorithm._step_scheduler()
        else:  # as after a skipped eager update: no optimizer state before the first step
            self.optimizer_step.drop_states(fresh)
        count = self._entropy_count
        algorithm.last_policy_entropy = entropy_sum / count if count else None
        return {
            "loss": loss,
            "objective": objective,
            "entropy": entropy,
            "grad_norm": grad_norm if finite_terms else float("nan"),
            "skipped_update": float(not applied_step),
            "skipped_excessive_gradient": float(bool(finite_terms) and not applied_step),
            "learning_rate": algorithm.current_learning_rate(),
        }


def record_segment(
    episodes: EpisodeTracker,
    normalizer: Any,
    observations: torch.Tensor,
    rewards: torch.Tensor,
    dones: torch.Tensor,
) -> None:
    """A segment's steps ``[T, N]`` into the episode statistics and the normalizer (as eager)."""
    episodes.record_steps(rewards, dones)
    if normalizer is not None:
        normalizer.update(observations.detach()[first_episode_mask(dones)])
