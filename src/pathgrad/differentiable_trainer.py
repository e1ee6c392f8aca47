"""Training orchestration for truncated and complete differentiable rollouts."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from pathgrad.algo import APG
from pathgrad.checkpoint import _load, _save, latest_checkpoint
from pathgrad.collector import (
    DifferentiableCollector,
    DifferentiableRollout,
    DifferentiableTransition,
)
from pathgrad.compiled_rollout import supports_fused_steps
from pathgrad.env import (
    DifferentiableRolloutSpec,
    DifferentiableVecEnv,
    ScheduledDifferentiableVecEnv,
)
from pathgrad.episodes import EpisodeTracker
from pathgrad.evaluation import evaluate_episodes
from pathgrad.normalization import RunningObservationNormalizer
from pathgrad.policies import Policy
from pathgrad.rollout_checkpointing import checkpointed_complete_returns, supports_checkpointing
from pathgrad.utils import configclass, scheduler_needs_horizon

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["DifferentiableTrainer", "DifferentiableTrainerCfg"]

_STATS_WINDOW = 100


@configclass
class DifferentiableTrainerCfg:
    """Configuration of segmented (TBPTT) or complete graph-preserving training.

    Attributes:
        segment_length: Steps between truncation boundaries (segmented mode).
        update_horizon: Steps per optimizer update (segmented: a multiple of
            ``segment_length``; complete: the rollout length). Defaults to
            ``segment_length``.
        rollout_mode: ``segmented`` (env state carried across updates, graph
            cut every segment) or ``complete`` (each rollout starts from a reset).
        gradient_accumulation_steps: Complete rollouts per update.
        deterministic_actions: Use the policy mean during training.
        clip_actions_to_space: Clamp actions to the action space bounds.
        action_adjoint_max_norm: Per-env clip of the action adjoint (0: off).
        record_gradient_health: Record the action adjoint's mean and largest
            norm across the window and its fraction of non-finite rows every
            update (``train/action_adjoint_*``), without clipping.
        torch_compile: Compile training rollouts with ``torch.compile``:
            ``compile_chunk_steps`` steps (normalization, policy, env step) fused
            into one compiled region (built-in envs and ``GaussianMLPPolicy``);
            with per-step gradient hooks (action adjoint clipping or health
            record, state-gradient decay) or other envs and policies, the env
            step and policy network compiled separately (``compile_step``,
            ``compile_networks``).
        compile_chunk_steps: Steps fused into one compiled region; more fuse
            more work and take longer to compile.
        gradient_checkpointing: In complete mode, keep only every
            ``checkpoint_chunk_steps``-th state and recompute the steps between
            during backward: memory of a long rollout shrinks, gradients stay.
        checkpoint_chunk_steps: Steps recomputed together.
        state_gradient_decay: Factor in (0, 1] applied to the carried env
            state's adjoint at every step (1: off); needs an env with a
            ``state_gradient_decay`` attribute (the built-in envs).
        normalize_observations: Keep a running observation normalizer.
        rollout_seed: Seed of the first complete rollout's reset.
        checkpoint_dir: Folder of checkpoints and their index.
        experiment_name: Prefix of checkpoint file names.
        save_frequency_updates: Save every so many updates (0: never).
        eval_frequency_steps: Evaluate every so many env steps (0: never).
        num_eval_episodes: Episodes per evaluation.
        eval_seed: Reset seed of each evaluation.
        use_wandb: Also log to Weights & Biases (``wandb.init`` is the caller's).
        best_eval_metric: Evaluation metric that selects the best checkpoint.
        best_eval_mode: ``max`` or ``min`` of ``best_eval_metric``.
    """

    segment_length: int = 16
    update_horizon: int | None = None
    rollout_mode: str = "segmented"
    gradient_accumulation_steps: int = 1
    deterministic_actions: bool = False
    clip_actions_to_space: bool = False
    action_adjoint_max_norm: float = 0.0
    record_gradient_health: bool = False
    torch_compile: bool = False
    compile_chunk_steps: int = 4
    gradient_checkpointing: bool = False
    checkpoint_chunk_steps: int = 32
    state_gradient_decay: float = 1.0
    normalize_observations: bool = False
    rollout_seed: int | None = None
    checkpoint_dir: str = "outputs/checkpoints"
    experiment_name: str = "apg"
    save_frequency_updates: int = 0
    eval_frequency_steps: int = 0
    num_eval_episodes: int = 5
    eval_seed: int | None = None
    use_wandb: bool = False
    best_eval_metric: str = "eval/avg_reward"
    best_eval_mode: str = "max"

    def validate(self) -> None:
        """Check every field; raise ``ValueError`` naming the first bad one."""
        if self.segment_length <= 0:
            raise ValueError("segment_length must be positive.")
        update_horizon = self.resolved_update_horizon
        if self.rollout_mode not in {"segmented", "complete"}:
            raise ValueError("rollout_mode must be 'segmented' or 'complete'.")
        if self.rollout_mode == "segmented" and update_horizon < self.segment_length:
            raise ValueError("update_horizon must be at least segment_length.")
        if self.rollout_mode == "segmented" and update_horizon % self.segment_length != 0:
            raise ValueError("update_horizon must be divisible by segment_length.")
        if update_horizon <= 0:
            raise ValueError("update_horizon must be positive.")
        if self.gradient_accumulation_steps <= 0:
            raise ValueError("gradient_accumulation_steps must be positive.")
        if self.action_adjoint_max_norm < 0.0:
            raise ValueError("action_adjoint_max_norm cannot be negative.")
        if not 0.0 < self.state_gradient_decay <= 1.0:
            raise ValueError("state_gradient_decay must be in (0, 1].")
        if self.compile_chunk_steps <= 0:
            raise ValueError("compile_chunk_steps must be positive.")
        if self.checkpoint_chunk_steps <= 0:
            raise ValueError("checkpoint_chunk_steps must be positive.")
        if self.gradient_checkpointing and self.rollout_mode != "complete":
            raise ValueError("gradient_checkpointing applies to rollout_mode='complete'.")
        if self.save_frequency_updates < 0:
            raise ValueError("save_frequency_updates cannot be negative.")
        if self.eval_frequency_steps < 0:
            raise ValueError("eval_frequency_steps cannot be negative.")
        if self.best_eval_mode not in {"min", "max"}:
            raise ValueError("best_eval_mode must be 'min' or 'max'.")
        if self.num_eval_episodes <= 0:
            raise ValueError("num_eval_episodes must be positive.")
        if not self.experiment_name:
            raise ValueError("experiment_name must not be empty.")

    @property
    def resolved_update_horizon(self) -> int:
        """``update_horizon``, or ``segment_length`` when it is unset."""
        return self.segment_length if self.update_horizon is None else self.update_horizon


class DifferentiableTrainer:
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
    """

    def __init__(
        self,
        cfg: DifferentiableTrainerCfg,
        env: DifferentiableVecEnv,
        policy: Policy,
        algorithm: APG,
        writer: SummaryWriter | None = None,
        eval_env: DifferentiableVecEnv | None = None,
        observation_normalizer: RunningObservationNormalizer | None = None,
    ) -> None:
        cfg.validate()
        if algorithm.policy is not policy:
            raise ValueError("Trainer and APG must reference the same policy instance.")
        if torch.device(env.device) != algorithm.device:
            raise ValueError("Environment and APG must use the same device.")
        modes = getattr(algorithm, "rollout_modes", ("segmented", "complete"))
        if cfg.rollout_mode not in modes:
            raise ValueError(
                f"{type(algorithm).__name__} supports rollout_mode {list(modes)}, "
                f"not '{cfg.rollout_mode}'."
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
        self._wandb = _import_wandb() if cfg.use_wandb else None
        self.cfg = cfg
        self.update_horizon = cfg.resolved_update_horizon
        self.env = env
        self.policy = policy
        self.algorithm = algorithm
        self.writer = writer
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
        if cfg.torch_compile:
            self._compile_rollouts(env, policy)
        algorithm.observation_transform = (
            observation_normalizer.normalize if observation_normalizer is not None else None
        )
        self.global_step = 0
        self.num_updates = 0
        self.train_history: list[dict[str, float]] = []
        self.eval_history: list[dict[str, float]] = []
        self.last_eval_metrics: dict[str, float] = {}
        self.latest_checkpoint_path: str | None = None
        self.best_checkpoint_path: str | None = None
        self.best_eval_value: float | None = None
        self.start_time = time.time()
        self._start_step = 0
        self.episodes = EpisodeTracker(env.num_envs, algorithm.device, window=_STATS_WINDOW)
        self._next_eval_step = cfg.eval_frequency_steps if cfg.eval_frequency_steps > 0 else None
        self._rollout_index = 0
        self.callbacks: list[Callable[[str, dict[str, float]], None]] = []
        self.checkpoint_extra: dict[str, Any] = {}
        self.in_critical_section = False
        self._deferred_interrupt: type[BaseException] | None = None

    def _compile_rollouts(self, env: DifferentiableVecEnv, policy: Policy) -> None:
        """Fused compiled chunks where possible, else compiled env step and policy network."""
        if supports_fused_steps(env, policy) and not self.collector.needs_step_hooks:
            self.collector.compile_chunks(self.cfg.compile_chunk_steps)
            return
        for owner, method in ((env, "compile_step"), (policy, "compile_networks")):
            if not callable(getattr(owner, method, None)):
                raise ValueError(f"torch_compile needs {type(owner).__name__}.{method}().")
        env.compile_step()
        policy.compile_networks()

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
            The summary of :meth:`get_summary`.

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
        estimated_updates, remaining_updates = self._planned_updates(total_timesteps, total_updates)
        self.algorithm._prepare_schedule(estimated_updates, remaining_updates)
        self.start_time = time.time()
        self._start_step = self.global_step
        self.policy.train()
        while (
            self.num_updates < total_updates
            if total_updates is not None
            else self.global_step < total_timesteps
        ):
            self.algorithm._check_schedule_horizon(1)
            snapshot = self._pre_update_snapshot()
            try:
                if self.cfg.rollout_mode == "complete":
                    collected_steps, metrics = self._complete_rollout_update()
                else:
                    update_steps = self.update_horizon
                    if total_timesteps is not None:
                        remaining_vector_steps = math.ceil(
                            (total_timesteps - self.global_step) / self.env.num_envs
                        )
                        update_steps = min(self.update_horizon, remaining_vector_steps)
                    collected_steps, metrics = self._segmented_update(update_steps)
            except BaseException:
                self.in_critical_section = False
                self._restore_pre_update_snapshot(snapshot)
                raise
            self.global_step += collected_steps * self.env.num_envs
            self.num_updates += 1
            self._leave_critical_section()
            self._record_update(metrics)
            self._evaluate_and_save()
        return self.get_summary()

    def request_interrupt(self, exception: type[BaseException]) -> None:
        """Raise ``exception`` now, or at the end of the optimizer step if one is running.

        For signal handlers: an interrupt never splits an optimizer step from
        the counters that record it, so the run stays exactly resumable.
        """
        if self.in_critical_section:
            self._deferred_interrupt = exception
            return
        raise exception()

    def _leave_critical_section(self) -> None:
        self.in_critical_section = False
        deferred, self._deferred_interrupt = self._deferred_interrupt, None
        if deferred is not None:
            raise deferred()

    def _pre_update_snapshot(self) -> dict[str, Any]:
        """What an update changes besides the optimizer, to undo an interrupted one."""
        env_state = getattr(self.env, "state_dict", None)
        return {
            "env": env_state() if callable(env_state) else None,
            "observation": self.collector.observation,
            "rng": torch.get_rng_state(),
            "normalizer": (
                self.observation_normalizer.state_dict()
                if self.observation_normalizer is not None
                else None
            ),
            "episodes": self.episodes.state_dict(),
            "rollout_index": self._rollout_index,
        }

    def _restore_pre_update_snapshot(self, snapshot: dict[str, Any]) -> None:
        """Undo an interrupted update: the trainer is as before it, ready to resume exactly.

        The algorithm cancels its own part (gradients); envs without
        ``load_state_dict`` restart from a fresh reset instead.
        """
        if snapshot["env"] is not None:
            self.env.load_state_dict(snapshot["env"])
            self.collector._observation = snapshot["observation"]
        else:
            self.collector.clear_observation()
        torch.set_rng_state(snapshot["rng"])
        if snapshot["normalizer"] is not None:
            self.observation_normalizer.load_state_dict(snapshot["normalizer"])
        self.episodes.load_state_dict(snapshot["episodes"])
        self._rollout_index = snapshot["rollout_index"]

    def _planned_updates(
        self, total_timesteps: int | None, total_updates: int | None
    ) -> tuple[int, int]:
        """Updates of the whole run and of this call, for the LR schedule."""
        if total_updates is not None:
            return total_updates, max(0, total_updates - self.num_updates)
        assert total_timesteps is not None
        pending = self.global_step < total_timesteps
        if self.cfg.rollout_mode == "complete" and isinstance(
            self.env, ScheduledDifferentiableVecEnv
        ):
            if pending and scheduler_needs_horizon(self.algorithm._lr_scheduler_cfg):
                raise ValueError(
                    "Variable-horizon APG requires total_updates or an explicit scheduler horizon."
                )
            # Env-provided horizons are known only when collecting: the explicit
            # LR horizon is checked before each update instead.
            return int(pending), int(pending)
        steps_per_update = self.update_horizon * self.env.num_envs
        if self.cfg.rollout_mode == "complete":
            steps_per_update *= self.cfg.gradient_accumulation_steps
        estimated = math.ceil(total_timesteps / steps_per_update)
        remaining = math.ceil(max(0, total_timesteps - self.global_step) / steps_per_update)
        return estimated, remaining

    def _segmented_update(self, update_steps: int) -> tuple[int, dict[str, float]]:
        """One TBPTT update: segments of ``segment_length`` steps, one optimizer step."""
        collected_steps = 0
        self.algorithm.begin_update()
        try:
            while collected_steps < update_steps:
                segment_steps = min(self.cfg.segment_length, update_steps - collected_steps)
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
            self.in_critical_section = True
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
            self.in_critical_section = True
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
        )
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
        """Fold finished episodes into the windows, then log the update."""
        self.episodes.flush()
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
        self._log(metrics)
        for callback in self.callbacks:
            callback("train", entry)

    def _evaluate_and_save(self) -> None:
        """Evaluate when due (saving a new best), then save when due."""
        saved_best = False
        if (
            self._next_eval_step is not None
            and self.eval_env is not None
            and self.global_step >= self._next_eval_step
        ):
            previous_best = self.best_checkpoint_path
            self._evaluate()
            saved_best = self.best_checkpoint_path != previous_best
            while self._next_eval_step <= self.global_step:
                self._next_eval_step += self.cfg.eval_frequency_steps
        if (
            not saved_best
            and self.cfg.save_frequency_updates > 0
            and self.num_updates % self.cfg.save_frequency_updates == 0
        ):
            self.save_checkpoint()

    def save_checkpoint(self, path: str | Path | None = None, *, kind: str = "periodic") -> str:
        """Atomically save the learning state and record it in the run index.

        Args:
            path: Destination; by default ``<checkpoint_dir>/<experiment>_step_<N>.pt``.
            kind: ``periodic``, ``best`` or ``final``, recorded in the index.

        Returns:
            The saved path.
        """
        if path is None:
            path = Path(self.cfg.checkpoint_dir) / (
                f"{self.cfg.experiment_name}_step_{self.global_step}.pt"
            )
        extra: dict[str, Any] = {**self.checkpoint_extra, "rollout_index": self._rollout_index}
        if self.observation_normalizer is not None:
            extra["observation_normalizer"] = self.observation_normalizer.state_dict()
        return _save(self, path, extra, kind)

    def load_checkpoint(
        self, path: str | Path | None = None, *, resume_scheduler: str = "restore"
    ) -> None:
        """Validate and restore the learning state.

        Where the env has ``state_dict()``/``load_state_dict()`` the env state
        is restored too and training continues exactly; otherwise the next
        update starts from a fresh reset.

        Args:
            path: Checkpoint file; by default the latest entry of the run
                index in ``cfg.checkpoint_dir``.
            resume_scheduler: ``restore`` the saved LR curve, or ``restart``
                the configured curve while keeping the optimizer's momentum.

        Raises:
            FileNotFoundError: If the file (or any indexed checkpoint) is missing.
            ValueError: If the file is not a pathgrad checkpoint or does not
                match this trainer; nothing is changed then.
        """
        if path is None:
            path = latest_checkpoint(self.cfg.checkpoint_dir)
        checkpoint = _load(self, path, resume_scheduler)
        self._rollout_index = int(checkpoint.get("rollout_index", self.num_updates))
        frequency = self.cfg.eval_frequency_steps
        self._next_eval_step = (
            (self.global_step // frequency + 1) * frequency if frequency > 0 else None
        )
        self.start_time = time.time()
        self._start_step = self.global_step

    def get_summary(self) -> dict[str, Any]:
        """Counters, last metrics, histories and checkpoint paths."""
        elapsed = max(1e-6, time.time() - self.start_time)
        return {
            "global_step": self.global_step,
            "num_updates": self.num_updates,
            "elapsed_time_sec": float(elapsed),
            "training_fps": float((self.global_step - self._start_step) / elapsed),
            "last_train_metrics": dict(self.train_history[-1]) if self.train_history else {},
            "last_eval_metrics": dict(self.last_eval_metrics),
            "train_history": list(self.train_history),
            "eval_history": list(self.eval_history),
            "latest_checkpoint_path": self.latest_checkpoint_path,
            "best_checkpoint_path": self.best_checkpoint_path,
        }

    def _on_step(self, transition: DifferentiableTransition) -> None:
        """Record the step for episode statistics (no host synchronisation)."""
        self.episodes.record(transition.reward, transition.done)

    def evaluate(self) -> dict[str, float]:
        """Evaluate the policy now (logged, and saved if it is the best so far)."""
        return self._evaluate()

    def _evaluate(self) -> dict[str, float]:
        if self.eval_env is None:
            return {}
        metrics = evaluate_episodes(
            policy=self.policy,
            env=self.eval_env,
            num_episodes=self.cfg.num_eval_episodes,
            device=self.algorithm.device,
            seed=self.cfg.eval_seed,
            observation_transform=(
                self.observation_normalizer.normalize
                if self.observation_normalizer is not None
                else None
            ),
        )
        entry = {"global_step": float(self.global_step), **metrics}
        self.eval_history.append(entry)
        self.last_eval_metrics = entry
        for callback in self.callbacks:
            callback("eval", entry)
        finite = {key: value for key, value in metrics.items() if math.isfinite(value)}
        if self.writer is not None:
            for key, value in finite.items():
                self.writer.add_scalar(key, value, self.global_step)
        if self._wandb is not None:
            self._wandb.log(finite, step=self.global_step)
        candidate = metrics.get(self.cfg.best_eval_metric)
        if candidate is not None and math.isfinite(candidate):
            improved = self.best_eval_value is None or (
                candidate > self.best_eval_value
                if self.cfg.best_eval_mode == "max"
                else candidate < self.best_eval_value
            )
            if improved:
                self.best_eval_value = candidate
                path = Path(self.cfg.checkpoint_dir) / (
                    f"{self.cfg.experiment_name}_best_step_{self.global_step}.pt"
                )
                previous_best = self.best_checkpoint_path
                self.best_checkpoint_path = str(path)
                try:
                    self.save_checkpoint(path, kind="best")
                except Exception:
                    self.best_checkpoint_path = previous_best
                    raise
        return metrics

    def _log(self, metrics: dict[str, float]) -> None:
        elapsed = max(time.time() - self.start_time, 1e-6)
        values = {
            **{f"train/{key}": value for key, value in metrics.items()},
            "charts/SPS": (self.global_step - self._start_step) / elapsed,
        }
        if self.ret_window:
            values["charts/episode_reward_avg_100"] = _mean_or_nan(self.ret_window)
            values["charts/episode_length_avg_100"] = _mean_or_nan(self.len_window)
        if self.writer is not None:
            for key, value in values.items():
                self.writer.add_scalar(key, value, self.global_step)
        if self._wandb is not None:
            self._wandb.log(values, step=self.global_step)


def _mean_or_nan(window: deque[float]) -> float:
    return float(sum(window) / len(window)) if window else float("nan")


def _import_wandb() -> Any:
    """Import wandb for ``use_wandb=True``, with a clear error when it is missing."""
    try:
        import wandb
    except ImportError as error:
        raise RuntimeError(
            "use_wandb=True needs the 'wandb' package: pip install 'pathgrad[wandb]'."
        ) from error
    return wandb
