"""Evaluation during training: periodic and final evaluations, best and periodic saves.

A mixin of :class:`~pathgrad.trainer.trainer.DifferentiableTrainer`,
kept apart so the training loop reads on its own. Every evaluation and save is
recorded in the trainer's state (next evaluation step, update of the last
scheduled save), so a checkpoint written after an interrupt knows what is
still due and a resumed run does it first.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from pathgrad.core.action_bounds import clamp_action
from pathgrad.evaluation import PATHGRAD_EVALUATION, evaluate_episodes
from pathgrad.trainer.scalar_logging import eval_scalars

__all__ = ["EvaluationMixin"]


class EvaluationMixin:
    """Periodic and final evaluation, best-checkpoint selection and periodic saves."""

    def _evaluate_and_save(self) -> None:
        """Evaluate when due (saving a new best), then save when due and not saved yet.

        Both steps are recorded in the trainer's state (next evaluation step,
        update of the last save), so a checkpoint written after an interrupt
        knows what is still due and the resumed run does it first.
        """
        if (
            self._next_eval_step is not None
            and self.eval_env is not None
            and self.global_step >= self._next_eval_step
        ):
            self._evaluate(scheduled=True)
        frequency = self.cfg.save_frequency_updates
        if (
            frequency > 0
            and self.num_updates > 0
            and self.num_updates % frequency == 0
            and self._saved_update != self.num_updates
        ):
            with self.interrupts.deferring():
                previous, self._saved_update = self._saved_update, self.num_updates
                try:  # the checkpoint records that its own save is done
                    self.save_checkpoint()
                except BaseException:
                    self._saved_update = previous
                    raise

    def _final_evaluation(self) -> None:
        """With ``cfg.final_evaluation``, evaluate the final policy unless that is done."""
        if not self.cfg.final_evaluation or self.eval_env is None:
            return
        if self.last_eval_metrics.get("global_step") != float(self.global_step):
            self._evaluate(scheduled=False)

    def evaluate(self) -> dict[str, float]:
        """Evaluate the policy now (logged, and saved if it is the best so far)."""
        return self._evaluate(scheduled=False)

    def _evaluate(self, *, scheduled: bool) -> dict[str, float]:
        """Run the evaluation episodes, then record them whole (interrupts wait).

        An interrupt during the episodes restores the evaluation env, so the
        evaluation can be repeated exactly; ``scheduled`` evaluations advance
        the next evaluation step.
        """
        if self.eval_env is None:
            return {}
        eval_env_state = _state_of(self.eval_env)
        try:
            metrics = self.data_parallel.from_main("the evaluation", self._evaluation_episodes)
        except BaseException:
            if eval_env_state is not None:
                self.eval_env.load_state_dict(eval_env_state)
            raise
        value = metrics.get("eval/avg_reward")
        if value is not None and not math.isfinite(value) and self.data_parallel.is_main:
            self.notify(
                f"the evaluation at env step {self.global_step:,} has a non-finite return "
                f"({value}): the policy or the evaluation env produced NaN or Inf."
            )
        with self.interrupts.deferring():
            entry = {"global_step": float(self.global_step), **metrics}
            self.eval_history.append(entry)
            self.last_eval_metrics = entry
            for callback in self.callbacks:
                callback("eval", entry)
            if self.data_parallel.is_main:
                self.sinks.log(eval_scalars(entry), self.global_step)
            if scheduled:
                while self._next_eval_step <= self.global_step:
                    self._next_eval_step += self.cfg.eval_frequency_steps
            self._save_if_best(metrics.get(self.cfg.best_eval_metric))
        return metrics

    def _evaluation_episodes(self) -> dict[str, float]:
        """The evaluation episodes' metrics (rank 0 runs them for all ranks)."""
        return evaluate_episodes(
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
            action_transform=(
                functools.partial(clamp_action, bounds=self.collector.action_bounds)
                if self.collector.action_bounds is not None
                else None
            ),
            **PATHGRAD_EVALUATION,
        )

    def _save_if_best(self, candidate: float | None) -> None:
        if candidate is None or not math.isfinite(candidate):
            return
        if self.best_eval_value is not None and not (
            candidate > self.best_eval_value
            if self.cfg.best_eval_mode == "max"
            else candidate < self.best_eval_value
        ):
            return
        path = self.checkpoint_path("best")
        previous = self.best_eval_value, self.best_checkpoint_path, self._saved_update
        # The checkpoint records itself as the best and as this update's save.
        self.best_eval_value, self.best_checkpoint_path = candidate, str(path)
        self._saved_update = self.num_updates
        try:
            self.save_checkpoint(path, kind="best")
        except BaseException:
            self.best_eval_value, self.best_checkpoint_path, self._saved_update = previous
            raise


def _state_of(env: Any) -> dict[str, Any] | None:
    state_dict = getattr(env, "state_dict", None)
    return state_dict() if callable(state_dict) else None
