"""Training orchestration for truncated and complete differentiable rollouts."""

from __future__ import annotations

import time
import warnings
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from pathgrad.algo.base import BaseAlgorithm
from pathgrad.collector import (
    DifferentiableCollector,
    DifferentiableRollout,
    DifferentiableTransition,
)
from pathgrad.compiled.compilation import CompiledUpdate, compile_training
from pathgrad.core.autograd_faults import (
    inplace_write_message,
    is_inplace_error,
    locate_inplace_write,
)
from pathgrad.core.env_contract import EnvContractError
from pathgrad.core.episodes import EpisodeTracker
from pathgrad.distributed.ranks import attach, end_of_update
from pathgrad.distributed.sync import DataParallel
from pathgrad.env import (
    DifferentiableRolloutSpec,
    DifferentiableVecEnv,
    ScheduledDifferentiableVecEnv,
)
from pathgrad.normalization import RunningObservationNormalizer
from pathgrad.policies import Policy
from pathgrad.trainer.budgets import planned_updates
from pathgrad.trainer.config import DifferentiableTrainerCfg
from pathgrad.trainer.divergence import SkipWatch, describe_skipped_update
from pathgrad.trainer.evaluation_schedule import EvaluationMixin
from pathgrad.trainer.gradient_checkpointing import (
    checkpointed_complete_returns,
    supports_checkpointing,
)
from pathgrad.trainer.interruption import InterruptGate, UpdateSnapshot
from pathgrad.trainer.save_restore import CheckpointMixin
from pathgrad.trainer.scalar_logging import ScalarSinks, train_scalars
from pathgrad.trainer.threads import apply_num_threads, resolve_num_threads
from pathgrad.trainer.windows import next_update_steps

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["DifferentiableTrainer", "DifferentiableTrainerCfg"]

_STATS_WINDOW = 100


class DifferentiableTrainer(CheckpointMixin, EvaluationMixin):
    """Coordinate APG updates over segmented (TBPTT) or complete rollouts.

    Args:
        cfg: Trainer configuration.
        env: Training env.
        policy: The policy; ``algorithm.policy`` must be this same object.
        algorithm: The algorithm (APG, or one with the same update phases).
        writer: Optional TensorBoard ``SummaryWriter``.
        eval_env: Optional env for periodic evaluation.
        observation_normalizer: Optional normalizer; built from the env when
            ``cfg.normalize_observations`` and none is given.
        data_parallel: This process's place in a data-parallel run
            (:mod:`pathgrad.distributed`); by default a world of one.
    """

    def __init__(
        self,
        cfg: DifferentiableTrainerCfg,
        env: DifferentiableVecEnv,
        policy: Policy,
        algorithm: BaseAlgorithm,
        writer: SummaryWriter | None = None,
        eval_env: DifferentiableVecEnv | None = None,
        observation_normalizer: RunningObservationNormalizer | None = None,
        data_parallel: DataParallel | None = None,
    ) -> None:
        cfg.validate()
        if algorithm.policy is not policy:
            raise ValueError("Trainer and APG must reference the same policy instance.")
        if torch.device(env.device) != algorithm.device:
            raise ValueError("Environment and APG must use the same device.")
        modes = algorithm.rollout_modes
        if cfg.rollout_mode not in modes:
            raise ValueError(
                f"{type(algorithm).__name__} supports rollout_mode {list(modes)}, "
                f"not '{cfg.rollout_mode}'."
            )
        if cfg.torch_compile and getattr(env, "supports_torch_compile", True) is False:
            raise ValueError(
                f"torch_compile: {type(env).__name__} cannot be compiled "
                "(supports_torch_compile is False)."
            )
        if cfg.gradient_checkpointing and not supports_checkpointing(env):
            raise ValueError(
                "gradient_checkpointing needs an env built on BatchedDifferentiableEnv."
            )
        if cfg.state_gradient_decay != 1.0:
            if not hasattr(env, "state_gradient_decay"):
                raise ValueError(
                    "state_gradient_decay needs an env with a state_gradient_decay attribute."
                )
            env.state_gradient_decay = cfg.state_gradient_decay
        self.num_threads, self.num_threads_reason = resolve_num_threads(
            cfg.num_threads, env.num_envs
        )
        apply_num_threads(self.num_threads)
        self.sinks = ScalarSinks(writer, use_wandb=cfg.use_wandb)
        self.cfg = cfg
        self.update_horizon = cfg.resolved_update_horizon
        self.env = env
        self.policy = policy
        self.algorithm = algorithm
        self.eval_env = eval_env
        if observation_normalizer is None and cfg.normalize_observations:
            observation_normalizer = RunningObservationNormalizer(
                int(env.single_observation_space.shape[-1]),
                algorithm.device,
                normalize_mask=getattr(env, "observation_normalize_mask", None),
            )
        self.observation_normalizer = observation_normalizer
        self.collector = DifferentiableCollector(
            env=env,
            policy=policy,
            device=algorithm.device,
            observation_normalizer=observation_normalizer,
            clip_actions_to_space=cfg.clip_actions_to_space,
            action_adjoint_max_norm=cfg.action_adjoint_max_norm,
            record_action_adjoint_stats=cfg.record_gradient_health,
        )
        self.collector.needs_final_observation = bool(
            algorithm.needs_final_observation
        )
        algorithm.observation_transform = (
            observation_normalizer.normalize if observation_normalizer is not None else None
        )
        self.global_step = 0
        self.num_updates = 0
        self.train_history: deque[dict[str, float]] = deque(maxlen=cfg.history_length)
        self.eval_history: deque[dict[str, float]] = deque(maxlen=cfg.history_length)
        self.last_train_metrics: dict[str, float] = {}
        self.last_eval_metrics: dict[str, float] = {}
        self.latest_checkpoint_path: str | None = None
        self.best_checkpoint_path: str | None = None
        self.best_eval_value: float | None = None
        self.start_time = time.time()
        self._start_step = 0
        self.episodes = EpisodeTracker(env.num_envs, algorithm.device, window=_STATS_WINDOW)
        self._next_eval_step = cfg.eval_frequency_steps if cfg.eval_frequency_steps > 0 else None
        self._saved_update: int | None = None  # update of the last scheduled save
        self._skipped_rows_seen = 0
        self._rollout_index = 0
        # callback(kind, entry) per update ("train") and evaluation ("eval"); one with a
        # true `stop_training` attribute ends training before the next update.
        self.callbacks: list[Callable[[str, dict[str, float]], None]] = []
        self.stopped_early = False
        self.diverged: str | None = None  # why the last train() ended diverged, if it did
        self.checkpoint_extra: dict[str, Any] = {}
        self.interrupts = InterruptGate()
        self.skips = SkipWatch(cfg.max_consecutive_skipped_updates)
        # notify(message): a line about the run worth a user's attention (a skipped
        # update, a non-finite evaluation); the command line prints it as a warning.
        self.notify: Callable[[str], None] = _warn
        self.compiled_update: CompiledUpdate | None = None
        self.compile_scope = "off"  # what torch_compile compiles, and why (compile_scope_reason)
        self.compile_scope_reason = "trainer.torch_compile is false"
        attach(self, data_parallel or DataParallel())
        if cfg.torch_compile:
            self.compile_scope, self.compile_scope_reason, self.compiled_update = compile_training(
                cfg, env, policy, algorithm, self.collector, self.episodes
            )

    @property
    def global_num_envs(self) -> int:
        """Envs stepped per vector step by all ranks together (the budgets' unit)."""
        return self.env.num_envs * self.data_parallel.world_size

    @property
    def writer(self) -> SummaryWriter | None:
        """The TensorBoard writer (``None`` for none); may be set after construction."""
        return self.sinks.writer

    @writer.setter
    def writer(self, writer: SummaryWriter | None) -> None:
        self.sinks.writer = writer

    @property
    def ret_window(self) -> deque[float]:
        """Returns of the last 100 finished training episodes."""
        return self.episodes.returns

    @property
    def len_window(self) -> deque[float]:
        """Lengths of the last 100 finished training episodes."""
        return self.episodes.lengths

    def train(
        self, total_timesteps: int | None = None, *, total_updates: int | None = None
    ) -> dict[str, Any]:
        """Train to an env-step or an update budget (exactly one), counted from zero.

        ``total_updates`` is the stable budget for scheduled variable-horizon
        training. Both budgets are absolute: after a resume, training stops at
        the same totals as an uninterrupted run.

        Returns:
            The summary of :meth:`get_summary`, whatever happened: its
            ``status`` is ``diverged`` after ``cfg.max_consecutive_skipped_updates``
            skipped updates in a row (the parameters are the last good ones;
            :attr:`diverged` says why), else ``stopped early`` or ``completed``.
            A run whose updates were all skipped, fewer than that limit, ends
            normally with the initial policy, as the reference's does (a
            warning says so).

        Raises:
            ValueError: If neither or both budgets are given, one is negative,
                or the LR schedule cannot be bound to the budget.
        """
        if total_timesteps is None and total_updates is None:
            raise ValueError("Provide total_timesteps or total_updates.")
        if total_timesteps is not None and total_updates is not None:
            raise ValueError("Provide only one training budget.")
        if total_timesteps is not None and total_timesteps < 0:
            raise ValueError("total_timesteps cannot be negative.")
        if total_updates is not None and total_updates < 0:
            raise ValueError("total_updates cannot be negative.")
        estimated_updates, remaining_updates = planned_updates(self, total_timesteps, total_updates)
        self.algorithm.prepare_schedule(estimated_updates, remaining_updates)
        self.start_time = time.time()
        self._start_step = self.global_step
        self.policy.train()
        self._evaluate_and_save()  # what an interrupt left pending after the last update
        self.stopped_early = False
        self.diverged = None
        while (
            self.num_updates < total_updates
            if total_updates is not None
            else self.global_step < total_timesteps
        ):
            if self.data_parallel.stop_agreed or (
                not self.data_parallel.active and self.callback_requests_stop()
            ):
                self.stopped_early = True  # as at the budget: final evaluation follows
                break
            self.algorithm.check_schedule_horizon(1)
            snapshot = UpdateSnapshot.take(self)

            def update() -> tuple[int, dict[str, float]]:
                if self.cfg.rollout_mode == "complete":
                    return self._complete_rollout_update()
                return self._segmented_update(*next_update_steps(self, total_timesteps))

            try:
                collected_steps, metrics = update()
            except BaseException as error:
                self.interrupts.abandon()
                snapshot.restore(self)
                if is_inplace_error(error):
                    where = None  # a replay under anomaly detection names the line
                    if not self.data_parallel.active and self.compiled_update is None:
                        where = locate_inplace_write(update)
                        snapshot.restore(self)
                    raise EnvContractError(inplace_write_message(where)) from error
                raise
            self.global_step += collected_steps * self.global_num_envs
            self.num_updates += 1
            try:
                self._record_update(metrics)
                self._watch_skips(snapshot, metrics, collected_steps, update)
            except BaseException:
                self.interrupts.abandon()
                raise
            self.interrupts.open()
            self._evaluate_and_save()
            if self.skips.diverged:
                self.diverged = self.skips.divergence(self.num_updates)
                return self.get_summary()
        nothing_learned = self.skips.all_skipped(self.num_updates)
        if nothing_learned and self.data_parallel.is_main:
            self.notify(nothing_learned)
        self._final_evaluation()
        return self.get_summary()

    def _watch_skips(
        self,
        snapshot: UpdateSnapshot,
        metrics: dict[str, float],
        collected_steps: int,
        update: Callable[[], Any],
    ) -> None:
        """Count a skipped update; name the run's first (replaying it when it can)."""
        if not self.skips.record(bool(metrics.get("skipped_update"))):
            return
        steps = collected_steps if self.cfg.rollout_mode == "segmented" else 0
        message = describe_skipped_update(self, snapshot, metrics, steps, update)
        if self.data_parallel.is_main:
            self.notify(message)

    def callback_requests_stop(self) -> bool:
        """Whether a callback has a true ``stop_training`` (e.g. :class:`pathgrad.EarlyStopping`).

        With several ranks the request travels with the next update's gradient
        average, so every rank stops after the same update (one update later).
        """
        return any(getattr(callback, "stop_training", False) for callback in self.callbacks)

    def request_interrupt(self, exception: type[BaseException]) -> None:
        """Raise ``exception`` now, or when the unit of work in progress is recorded.

        For signal handlers: an interrupt never splits an optimizer step from
        the counters and records of it, an evaluation from its record, or a
        checkpoint write, so the run stays exactly resumable.
        """
        self.interrupts.request(exception)

    def _segmented_update(
        self, update_steps: int, segment_length: int
    ) -> tuple[int, dict[str, float]]:
        """One TBPTT update: segments of ``segment_length`` steps, one optimizer step."""
        if self.compiled_update is not None:
            return update_steps, self.compiled_update.run(update_steps, self.interrupts.close)
        collected_steps = 0
        self.algorithm.begin_update()
        try:
            while collected_steps < update_steps:
                segment_steps = min(segment_length, update_steps - collected_steps)
                rollout = self.collector.collect(
                    segment_steps,
                    deterministic=self.cfg.deterministic_actions,
                    on_step_callback=self._on_step,
                )
                self.algorithm.accumulate_segment(rollout)
                self._update_observation_normalizer(rollout)
                self.collector.detach_state()
                self.episodes.flush()  # memory stays flat however long the update
                collected_steps += rollout.num_steps
            self.interrupts.close()
            return collected_steps, self.algorithm.finish_update()
        except BaseException:
            self.algorithm.cancel_update()
            raise

    def _complete_rollout_update(self) -> tuple[int, dict[str, float]]:
        """Accumulate independent full rollouts into one optimizer step."""
        accumulation_steps = self.cfg.gradient_accumulation_steps
        collected_steps = 0
        metadata: dict[str, list[float]] = {}
        self.algorithm.begin_update()
        try:
            for _ in range(accumulation_steps):
                spec = self._prepare_complete_rollout()
                seed = self.cfg.rollout_seed if self._rollout_index == 0 else None
                self.collector.reset(seed=seed)
                if self.cfg.gradient_checkpointing:
                    collected_steps += self._checkpointed_rollout(spec, accumulation_steps)
                else:
                    rollout = self.collector.collect(
                        spec.num_steps,
                        deterministic=self.cfg.deterministic_actions,
                        on_step_callback=self._on_step,
                    )
                    self.algorithm.accumulate_complete_rollout(
                        rollout,
                        objective_scale=spec.objective_scale,
                        accumulation_scale=1.0 / accumulation_steps,
                    )
                    self._update_observation_normalizer(rollout)
                    collected_steps += rollout.num_steps
                self.collector.detach_state()
                for key, value in spec.metadata.items():
                    metadata.setdefault(str(key), []).append(float(value))
                self._rollout_index += 1
            self.interrupts.close()
            metrics = self.algorithm.finish_update()
        except BaseException:
            self.algorithm.cancel_update()
            raise
        for key, values in metadata.items():
            metrics[f"rollout_{key}_mean"] = sum(values) / len(values)
        return collected_steps, metrics

    def _checkpointed_rollout(
        self, spec: DifferentiableRolloutSpec, accumulation_steps: int
    ) -> int:
        """A complete rollout recomputed chunk by chunk during backward; returns its steps."""
        result = checkpointed_complete_returns(
            self.collector,
            spec.num_steps,
            self.cfg.checkpoint_chunk_steps,
            self.algorithm.cfg.gamma,
            deterministic=self.cfg.deterministic_actions,
            on_step_callback=self._on_step,
        )
        self.algorithm.accumulate_complete_returns(
            result.returns,
            result.entropy_returns,
            num_steps=result.num_steps,
            objective_scale=spec.objective_scale,
            accumulation_scale=1.0 / accumulation_steps,
            action_gradient_stats=result.action_gradient_stats,
        )
        if result.sampled_entropies is not None:
            self.algorithm.record_policy_entropy(result.sampled_entropies)
        if self.observation_normalizer is not None:
            self.observation_normalizer.update(result.alive_observations)
        return result.num_steps

    def _prepare_complete_rollout(self) -> DifferentiableRolloutSpec:
        if isinstance(self.env, ScheduledDifferentiableVecEnv):
            return self.env.prepare_differentiable_rollout(self._rollout_index)
        return DifferentiableRolloutSpec(num_steps=self.update_horizon)

    def _update_observation_normalizer(self, rollout: DifferentiableRollout) -> None:
        if self.observation_normalizer is None:
            return
        alive_observations = rollout.observations[rollout.alive_mask]
        self.observation_normalizer.update(alive_observations.detach())

    def _record_update(self, metrics: dict[str, float]) -> None:
        """Fold finished episodes (of every rank) into the windows, then log the update."""
        self.episodes.flush()
        end_of_update(self)
        entropy = self.algorithm.last_policy_entropy
        if entropy is not None:
            metrics["policy_entropy"] = entropy
        if self.observation_normalizer is not None:  # rows with NaN/Inf left out of it
            skipped = int(self.observation_normalizer.skipped_rows)
            metrics["observation_rows_skipped"] = float(skipped - self._skipped_rows_seen)
            self._skipped_rows_seen = skipped
        elapsed = max(time.time() - self.start_time, 1e-6)
        entry = {
            "global_step": float(self.global_step),
            "num_updates": float(self.num_updates),
            "charts/SPS": float((self.global_step - self._start_step) / elapsed),
            "charts/episode_reward_avg_100": _mean_or_nan(self.ret_window),
            "charts/episode_length_avg_100": _mean_or_nan(self.len_window),
            **{f"train/{key}": value for key, value in metrics.items()},
        }
        self.train_history.append(entry)
        self.last_train_metrics = entry
        if self.data_parallel.is_main:
            self.sinks.log(train_scalars(entry), self.global_step)
        for callback in self.callbacks:
            callback("train", entry)

    def get_summary(self) -> dict[str, Any]:
        """Counters, last metrics, histories and checkpoint paths."""
        elapsed = max(1e-6, time.time() - self.start_time)
        status = (
            "diverged"
            if self.diverged
            else "stopped early"
            if self.stopped_early
            else "completed"
        )
        return {
            "status": status,
            "global_step": self.global_step,
            "num_updates": self.num_updates,
            "elapsed_time_sec": float(elapsed),
            "training_fps": float((self.global_step - self._start_step) / elapsed),
            "last_train_metrics": dict(self.last_train_metrics),
            "last_eval_metrics": dict(self.last_eval_metrics),
            "train_history": list(self.train_history),
            "eval_history": list(self.eval_history),
            "latest_checkpoint_path": self.latest_checkpoint_path,
            "best_checkpoint_path": self.best_checkpoint_path,
            "world_size": self.data_parallel.world_size,
            "skipped_updates": self.skips.total,
            "consecutive_skipped_updates": self.skips.consecutive,
            "compile_scope": self.compile_scope,
            "first_compiled_update_seconds": (
                None if self.compiled_update is None else self.compiled_update.first_update_seconds
            ),
        }

    def _on_step(self, transition: DifferentiableTransition) -> None:
        """Record the step for episode statistics (no host synchronisation)."""
        self.episodes.record(transition.reward, transition.done)


def _warn(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def _mean_or_nan(window: deque[float]) -> float:
    return float(sum(window) / len(window)) if window else float("nan")
