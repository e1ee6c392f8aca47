"""SHAC's and SAPO's whole update compiled: rollout chunks, the actor's step, the critic's steps.

An eager SHAC update pays Python for every env step, for the actor's clip and
Adam step and, most of all, for every critic minibatch (16 passes of 4 at the
defaults: forward, backward, clip and Adam each time, about three quarters of an
eager update at 64 envs). Here

* a window runs ``chunk_steps`` steps at a time through one compiled program
  (the random draws made first, in an eager update's order, as in
  :mod:`pathgrad.compiled.update`), which returns the window's rewards, flags,
  pre-reset observations and policy entropies stacked, with their graph;
* the algorithm's own :meth:`~pathgrad.algo.shac.SHAC.accumulate_segment`
  takes that :class:`StackedWindow` as it takes a rollout: critic bootstrap at
  the window's end and at truncations, the entropy bonus (SAPO), the
  objective, its backward (one compiled node per chunk), the critic's data;
* the actor's finite check, clip and Adam/AdamW step are one compiled program
  (``APG.fused_step``), and each critic minibatch step (forward, gradient by
  ``torch.func``, clip, Adam/AdamW) another (``SHAC.fused_critic_step``).

The rest (TD(lambda) targets, SAPO's temperature step, the target critic's
Polyak step, metrics) is the algorithm's eager code, run once per update. The
results equal an eager update's up to floating-point reassociation (tests
compare them in float64); optimizer states stay ``torch.optim``'s.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.func import functional_call, grad_and_value

from pathgrad.compiled.adam import (
    CompiledClipAdam,
    adam_constants,
    adam_state,
    adam_values,
    global_norm,
)
from pathgrad.compiled.blockers import compiled_update_blockers
from pathgrad.compiled.guards import GuardSkipping
from pathgrad.compiled.rollout import compile_options, policy_env_step
from pathgrad.compiled.update import record_segment
from pathgrad.compiled.window_draws import StepInputDraws, chunk_draws
from pathgrad.core.episodes import EpisodeTracker, first_episode_mask

if TYPE_CHECKING:
    from pathgrad.algo.shac import SHAC

__all__ = ["CompiledCriticStep", "CompiledCriticUpdate", "StackedWindow"]


@dataclasses.dataclass(frozen=True)
class StackedWindow:
    """A window's steps stacked ``[T, N, ...]``: what SHAC reads of a ``DifferentiableRollout``."""

    observations: torch.Tensor  # raw, no graph
    rewards: torch.Tensor
    terminated: torch.Tensor
    dones: torch.Tensor
    final_observations: torch.Tensor
    entropies: torch.Tensor
    action_gradient_stats: None = None

    @property
    def num_steps(self) -> int:
        """Steps in the window."""
        return self.rewards.shape[0]

    @property
    def alive_mask(self) -> torch.Tensor:
        """``[T, N]``: true up to and including each env's first done."""
        return first_episode_mask(self.dones)

    def policy_outputs(self, key: str) -> torch.Tensor | None:
        """The policy's ``entropy`` ``[T, N]`` (the one output kept)."""
        return self.entropies if key == "entropy" else None


class CompiledCriticStep:
    """SHAC's critic minibatch step as one compiled program (``SHAC.fused_critic_step``).

    The loss, ``(critic(x) - y)^2`` averaged, is differentiated with
    ``torch.func.grad_and_value`` inside the program; the clip (if
    ``max_norm > 0``) and the Adam/AdamW step update the critic and
    ``torch.optim``'s state in place. Not for data-parallel training, whose
    gradients are averaged across ranks between backward and step.
    """

    def __init__(
        self,
        critic: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        max_norm: float,
        options: dict[str, Any],
        guards: GuardSkipping | None = None,
    ) -> None:
        self.critic = critic
        self.optimizer = optimizer
        self.parameters = list(optimizer.param_groups[0]["params"])
        names = {id(parameter): name for name, parameter in critic.named_parameters()}
        self.names = [names[id(parameter)] for parameter in self.parameters]
        self.constants = adam_constants(optimizer, max_norm, 0.0)
        self._compiled = torch.compile(self._step, dynamic=False, options=options)
        if guards is not None:
            self._compiled = guards.wrap(self._compiled)

    def __call__(
        self, inputs: torch.Tensor, targets: torch.Tensor, index: torch.Tensor
    ) -> torch.Tensor:
        """One step on the rows ``index``; returns the loss (no graph)."""
        states = [adam_state(self.optimizer, parameter) for parameter in self.parameters]
        rate = float(self.optimizer.param_groups[0]["lr"])
        with torch.no_grad():
            return self._compiled(
                self.parameters,
                [state["exp_avg"] for state in states],
                [state["exp_avg_sq"] for state in states],
                [state["step"] for state in states],
                torch.tensor(rate, dtype=torch.float64, device=inputs.device),
                inputs,
                targets,
                index,
            )

    def _step(
        self,
        parameters: list[torch.Tensor],
        exp_avgs: list[torch.Tensor],
        exp_avg_sqs: list[torch.Tensor],
        steps: list[torch.Tensor],
        learning_rate: torch.Tensor,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        index: torch.Tensor,
    ) -> torch.Tensor:
        """The pure step (what is compiled)."""
        rows, wanted = inputs[index], targets[index]

        def loss_of(values: list[torch.Tensor]) -> torch.Tensor:
            named = dict(zip(self.names, values, strict=True))
            predicted = functional_call(self.critic, named, (rows,)).squeeze(-1)
            return (predicted - wanted).square().mean()

        gradients, loss = grad_and_value(loss_of)([value.detach() for value in parameters])
        max_norm = self.constants[5]
        if max_norm > 0.0:
            clip = torch.clamp(max_norm / (global_norm(gradients) + 1e-6), max=1.0)
            gradients = [gradient * clip.to(gradient.dtype) for gradient in gradients]
        for parameter, gradient, exp_avg, exp_avg_sq, step in zip(
            parameters, gradients, exp_avgs, exp_avg_sqs, steps, strict=True
        ):
            new = adam_values(
                parameter, gradient, exp_avg, exp_avg_sq, step, learning_rate, self.constants
            )
            for old, value in zip((parameter, exp_avg, exp_avg_sq, step), new, strict=True):
                old.copy_(value)
        return loss


class CompiledCriticUpdate:
    """Runs SHAC's or SAPO's segmented updates through compiled chunks and compiled steps.

    Installs the compiled actor step (``algorithm.fused_step``) and, without
    data parallelism, the compiled critic step (``algorithm.fused_critic_step``).

    Args:
        env: A ``BatchedDifferentiableEnv`` (``draw_reset_states``, ``transition``).
        policy: A policy with ``sample_noise`` and ``action_from_noise``.
        algorithm: The :class:`SHAC` or :class:`SAPO` it drives.
        collector: The trainer's collector (current observation, normalizer,
            action bounds).
        episodes: The trainer's episode tracker.
        segment_length: Steps of a window (the actor's horizon).
        chunk_steps: Steps per compiled chunk; a shorter rest of a window runs
            the same function eagerly.
        deterministic: Use the policy mean instead of sampling.
    """

    def __init__(
        self,
        env: Any,
        policy: Any,
        algorithm: SHAC,
        collector: Any,
        episodes: EpisodeTracker,
        *,
        segment_length: int,
        chunk_steps: int,
        deterministic: bool = False,
    ) -> None:
        reasons = compiled_update_blockers(algorithm, env, policy, collector, "segmented")
        if algorithm.compiled_update != "critic":
            reasons.append(f"{type(algorithm).__name__} has no critic (use CompiledAPGUpdate)")
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
        # SAPO's bonus differentiates the entropy; SHAC's only with an entropy coefficient
        self._entropy_grad = algorithm.differentiates_entropy
        cfg = algorithm.cfg
        options = compile_options(env)
        self.guards = GuardSkipping(env, policy, cfg, algorithm.critic)
        compiled = torch.compile(self._chunk, dynamic=False, options=options)
        self._compiled_chunk = self.guards.wrap(compiled)
        self.optimizer_step = CompiledClipAdam(
            algorithm.optimizer, cfg.max_grad_norm, cfg.max_grad_norm_before_clip, options,
            self.guards,
        )  # fmt: skip
        algorithm.fused_step = self.optimizer_step.clip_and_step
        synchronizer = algorithm.synchronizer
        if synchronizer is None or synchronizer.world_size == 1:
            algorithm.fused_critic_step = CompiledCriticStep(
                algorithm.critic, algorithm.critic_optimizer, cfg.critic_max_grad_norm, options,
                self.guards,
            )  # fmt: skip
        self.first_update_seconds: float | None = None  # compile time, mostly

    def run(self, num_steps: int, before_optimizer_step: Callable[[], None]) -> dict[str, float]:
        """One update of ``num_steps`` steps; returns the algorithm's metrics.

        ``before_optimizer_step`` runs after the last backward and before the
        steps (the trainer closes its interrupt gate there).
        """
        started = time.perf_counter()
        algorithm, collector = self.algorithm, self.collector
        self.guards.begin_update()
        algorithm.begin_update()
        try:
            observation = collector.observation
            if observation is None:
                observation, _ = collector.reset()
            done_steps = 0
            while done_steps < num_steps:
                steps = min(self.segment_length, num_steps - done_steps)
                window = self._window(observation, steps)
                algorithm.accumulate_segment(window)
                record_segment(
                    self.episodes,
                    collector.observation_normalizer,
                    window.observations,
                    window.rewards,
                    window.dones,
                )
                observation = collector.detach_state()
                done_steps += steps
            before_optimizer_step()
            metrics = algorithm.finish_update()
        except BaseException:
            algorithm.cancel_update()
            raise
        if self.first_update_seconds is None:
            self.first_update_seconds = time.perf_counter() - started
        return metrics

    def _window(self, observation: torch.Tensor, num_steps: int) -> StackedWindow:
        """``num_steps`` steps from ``observation`` through the chunks; the env state advances."""
        env = self.env
        normalizer = self.collector.observation_normalizer
        normalization = None if normalizer is None else normalizer.constants(observation.dtype)
        # Carried inputs that require grad in every chunk, so one compiled graph serves all.
        observation = observation.detach().requires_grad_()
        state = {key: value.detach().requires_grad_() for key, value in env.state.items()}
        elapsed = env.elapsed_steps
        parts = []
        # The whole segment's draws at once (one call each where shown equal), chunk by chunk.
        segment_noises, segment_resets = self.draws.draw(observation, num_steps)
        done_steps = 0
        while done_steps < num_steps:
            count = min(self.chunk_steps, num_steps - done_steps)
            noises, resets = chunk_draws(segment_noises, segment_resets, done_steps, count)
            chunk = self._compiled_chunk if count == self.chunk_steps else self._chunk
            observation, state, elapsed, stacked = chunk(
                observation, state, elapsed, noises, resets, normalization
            )
            parts.append(stacked)
            done_steps += count
        env.state, env.elapsed_steps = state, elapsed
        observations, rewards, terminated, truncated, finals, entropies = (
            torch.cat(values) for values in zip(*parts, strict=True)
        )
        return StackedWindow(
            observations, rewards, terminated, terminated | truncated, finals, entropies
        )

    def _chunk(
        self,
        observation: torch.Tensor,
        state: dict[str, torch.Tensor],
        elapsed_steps: torch.Tensor,
        noises: torch.Tensor | None,
        resets: dict[str, torch.Tensor],
        normalization: tuple[torch.Tensor, ...] | None,
    ) -> tuple[Any, ...]:
        """As many steps as ``resets`` holds (``[K, N, ...]``) as one pure function (compiled)."""
        steps: list[tuple[torch.Tensor, ...]] = []
        for step in range(next(iter(resets.values())).shape[0]):
            noise = None if noises is None else noises[step]
            reset = {key: value[step] for key, value in resets.items()}
            output, transition = policy_env_step(
                self.env, self.policy, self.collector.action_bounds,
                observation, state, elapsed_steps, noise, reset, normalization,
            )  # fmt: skip
            next_observation, reward, terminated, truncated, final, _, state, elapsed_steps = (
                transition
            )
            entropy = output["entropy"]
            steps.append(
                (
                    observation.detach(),  # bookkeeping and critic inputs: no tangents
                    reward,
                    terminated,
                    truncated,
                    final,
                    entropy if self._entropy_grad else entropy.detach(),
                )
            )
            observation = next_observation
        stacked = tuple(torch.stack(values) for values in zip(*steps, strict=True))
        return observation, state, elapsed_steps, stacked
