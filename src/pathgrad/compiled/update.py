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

import contextlib
import math
import time
from collections.abc import Callable
from typing import Any

import torch

from pathgrad.algo.apg import APG
from pathgrad.compiled.rollout import supports_fused_steps
from pathgrad.compiled.window_draws import WindowDraws
from pathgrad.core.action_bounds import clamp_action
from pathgrad.core.episodes import EpisodeTracker, first_episode_mask
from pathgrad.normalization import apply_normalization

__all__ = ["CompiledAPGUpdate", "compiled_update_blockers"]


def compiled_update_blockers(
    algorithm: Any, env: Any, policy: Any, collector: Any, rollout_mode: str
) -> list[str]:
    """Why an update cannot be compiled whole (empty: it can)."""
    reasons = []
    if type(algorithm) is not APG:
        reasons.append(f"the algorithm is {type(algorithm).__name__}, not APG")
    if rollout_mode != "segmented":
        reasons.append(f"rollout_mode is '{rollout_mode}', not 'segmented'")
    if not supports_fused_steps(env, policy):
        reasons.append("the env or policy lacks transition()/action_from_noise()")
    if collector.needs_step_hooks:
        reasons.append(
            "per-step gradient hooks are on (action adjoint clipping or "
            "health record, state-gradient decay)"
        )
    optimizer = getattr(algorithm, "optimizer", None)
    if not isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW):
        reasons.append(f"the optimizer is {type(optimizer).__name__}, not Adam or AdamW")
    elif len(optimizer.param_groups) != 1:
        reasons.append("the optimizer has more than one parameter group")
    else:
        group = optimizer.param_groups[0]
        if group.get("amsgrad") or group.get("maximize") or group.get("differentiable"):
            reasons.append("amsgrad, maximize and differentiable Adam are not compiled")
        if torch.is_tensor(group["lr"]):
            reasons.append("a tensor learning rate is not compiled")
    return reasons


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
        self.parameters = list(algorithm.optimizer.param_groups[0]["params"])
        # Inductor's C++ wrapper: the per-call glue (views, allocations, checks) in C++,
        # 1.3x faster at 64 envs than its Python wrapper, for ~10 s more compile.
        options = {"cpp_wrapper": True} if device_type(env) == "cpu" else {}
        self._compiled_chunk = torch.compile(self._chunk, dynamic=False, options=options)
        self._compiled_optimizer_step = torch.compile(
            self._optimizer_step, dynamic=False, options=options
        )
        self.first_update_seconds: float | None = None  # compile time, mostly
        self._noise_draws, self._reset_draws = _window_draws(env, policy, self.deterministic)
        self._entropy_count = 0

    def run(self, num_steps: int, before_optimizer_step: Callable[[], None]) -> dict[str, float]:
        """One update of ``num_steps`` steps; returns APG's metrics.

        ``before_optimizer_step`` runs after the backward and before the step
        (the trainer closes its interrupt gate there).
        """
        started = time.perf_counter()
        algorithm = self.algorithm
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

    def _guard_stance(self) -> Any:
        """After the first update, compiled calls skip the evaluation of their guards.

        Each compiled program has one entry: its inputs keep their kinds, shapes,
        dtypes and devices from call to call (the carried inputs require grad in
        every chunk; the Adam constants never change), so the guards, which cost
        more per call than a small chunk's kernels, would always pass.
        """
        if self.first_update_seconds is None:
            return contextlib.nullcontext()
        return torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)

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
        done_steps = 0
        while done_steps < num_steps:
            count = min(self.chunk_steps, num_steps - done_steps)
            noises = self._noise_draws.draw(count, observation.detach())
            resets = self._reset_draws.draw(count)
            if discount is None:
                discount = torch.ones(env.num_envs, dtype=env.dtype, device=env.device)
            if returns is None:
                returns = torch.zeros_like(discount).requires_grad_()
                entropy_returns = torch.zeros_like(discount)
                if self.algorithm.cfg.ent_coef != 0.0:
                    entropy_returns.requires_grad_()
            compiled = count == self.chunk_steps
            chunk = self._compiled_chunk if compiled else self._chunk
            with self._guard_stance() if compiled else contextlib.nullcontext():
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
        step_dones = torch.cat(dones)
        self.episodes.record_steps(torch.cat(rewards), step_dones)
        if normalizer is not None:
            segment_observations = torch.cat(observations)
            normalizer.update(segment_observations[first_episode_mask(step_dones)])
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
        env = self.env
        gamma = self.algorithm.cfg.gamma
        bounds = self.collector.action_bounds
        entropy_grad = self.algorithm.cfg.ent_coef != 0.0
        observations, rewards, dones, entropies = [], [], [], []
        for step in range(next(iter(resets.values())).shape[0]):
            noise = None if noises is None else noises[step]
            reset = {key: value[step] for key, value in resets.items()}
            policy_input = (
                observation if normalization is None
                else apply_normalization(observation, normalization)
            )  # fmt: skip
            output = self.policy.action_from_noise(policy_input, noise)
            action = output["action"]
            if bounds is not None:
                action = clamp_action(action, bounds)
            next_observation, reward, terminated, truncated, _, _, state, elapsed_steps = (
                env.transition(state, action.to(env.dtype), reset, elapsed_steps)
            )
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
        optimizer = algorithm.optimizer
        group = optimizer.param_groups[0]
        fresh = [not optimizer.state[parameter] for parameter in self.parameters]
        states = [self._adam_state(parameter) for parameter in self.parameters]
        if algorithm.synchronizer is not None and algorithm.synchronizer.world_size > 1:
            # Data-parallel: a non-finite loss or gradient on any rank makes the average
            # non-finite on all, so every rank skips the same updates.
            keys = ("loss", "objective", "entropy", "policy_entropy")
            averaged = algorithm._average_across_ranks(
                self.parameters, torch.stack([totals[key] for key in keys]), carry=True
            )
            totals = dict(zip(keys, averaged, strict=True))
        gradients = [
            parameter.grad if parameter.grad is not None else torch.zeros_like(parameter)
            for parameter in self.parameters
        ]
        with torch.no_grad(), self._guard_stance():
            norm, finite, applied = self._compiled_optimizer_step(
                self.parameters,
                gradients,
                [state["exp_avg"] for state in states],
                [state["exp_avg_sq"] for state in states],
                [state["step"] for state in states],
                torch.tensor(float(group["lr"]), dtype=torch.float64, device=algorithm.device),
                totals["loss"],
                _adam_constants(optimizer, cfg.max_grad_norm, cfg.max_grad_norm_before_clip),
            )
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
            for parameter, created in zip(self.parameters, fresh, strict=True):
                if created:
                    del optimizer.state[parameter]
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

    def _adam_state(self, parameter: torch.Tensor) -> dict[str, torch.Tensor]:
        """The optimizer's state of ``parameter``, created as ``torch.optim.Adam`` creates it."""
        state = self.algorithm.optimizer.state[parameter]
        if not state:
            scalar = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
            state["step"] = torch.zeros((), dtype=scalar)
            state["exp_avg"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
        return state

    @staticmethod
    def _optimizer_step(
        parameters: list[torch.Tensor],
        gradients: list[torch.Tensor],
        exp_avgs: list[torch.Tensor],
        exp_avg_sqs: list[torch.Tensor],
        steps: list[torch.Tensor],
        learning_rate: torch.Tensor,
        loss: torch.Tensor,
        constants: tuple[float, ...],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Finite check, global-norm clip and one Adam/AdamW step, skipped by selection."""
        beta1, beta2, eps, weight_decay, decoupled, max_norm, norm_limit = constants
        finite = torch.isfinite(loss)
        for gradient in gradients:
            finite = finite & torch.isfinite(gradient).all()
        norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(gradient) for gradient in gradients])
        )
        apply = finite & torch.isfinite(norm)
        if norm_limit > 0.0:
            apply = apply & (norm <= norm_limit)
        clip = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        for parameter, gradient, exp_avg, exp_avg_sq, step in zip(
            parameters, gradients, exp_avgs, exp_avg_sqs, steps, strict=True
        ):
            gradient = gradient * clip.to(gradient.dtype)
            new_step = step + 1
            count = new_step.to(torch.float64)
            lr = learning_rate
            value = parameter
            if weight_decay != 0.0:
                if decoupled:
                    value = value * (1 - lr * weight_decay).to(value.dtype)
                else:
                    gradient = gradient + weight_decay * value
            new_exp_avg = exp_avg.lerp(gradient, 1 - beta1)
            new_exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * (gradient * gradient)
            step_size = lr / (1 - beta1**count)
            correction = torch.sqrt(1 - beta2**count)
            denominator = new_exp_avg_sq.sqrt() / correction.to(value.dtype) + eps
            value = value - step_size.to(value.dtype) * (new_exp_avg / denominator)
            parameter.copy_(torch.where(apply, value, parameter))
            exp_avg.copy_(torch.where(apply, new_exp_avg, exp_avg))
            exp_avg_sq.copy_(torch.where(apply, new_exp_avg_sq, exp_avg_sq))
            step.copy_(torch.where(apply, new_step, step))
        return norm, finite, apply


def _window_draws(env: Any, policy: Any, deterministic: bool) -> tuple[WindowDraws, WindowDraws]:
    """The chunks' policy noise (torch's global RNG) and reset states (the env's generator),
    each drawn for a whole chunk in one call where that is shown to give the same numbers
    (CPU only: CUDA's generators advance differently for one large draw)."""
    cpu = device_type(env) == "cpu"

    def noise_window(count: int, observation: torch.Tensor) -> torch.Tensor | None:
        return policy.sample_noise(observation.expand(count, *observation.shape), deterministic)

    noises = WindowDraws(
        lambda observation: policy.sample_noise(observation, deterministic),
        noise_window,
        torch.get_rng_state,
        torch.set_rng_state,
        batch=cpu,
    )
    reset_window = getattr(env, "draw_reset_window", None)
    resets = WindowDraws(
        env.draw_reset_states,
        reset_window,
        lambda: env.generator.get_state(),
        lambda state: env.generator.set_state(state),
        batch=cpu and reset_window is not None,
    )
    return noises, resets


def device_type(env: Any) -> str:
    """``cpu`` or ``cuda``: the device type of ``env``'s tensors."""
    return torch.device(env.device).type


def _adam_constants(
    optimizer: torch.optim.Optimizer, max_norm: float, norm_limit: float
) -> tuple[float, ...]:
    """The floats of the compiled step (changing one recompiles it; they never change)."""
    group = optimizer.param_groups[0]
    beta1, beta2 = (float(beta) for beta in group["betas"])
    decoupled = isinstance(optimizer, torch.optim.AdamW)
    return (
        beta1,
        beta2,
        float(group["eps"]),
        float(group["weight_decay"]),
        decoupled,
        float(max_norm),
        float(norm_limit),
    )
