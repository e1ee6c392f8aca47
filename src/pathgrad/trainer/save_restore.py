"""Saving and restoring a trainer: a mixin of :class:`~pathgrad.DifferentiableTrainer`.

With several ranks (:mod:`pathgrad.distributed`) every rank takes part in a
save (each one's env, random streams and running episode sums are gathered)
and rank 0 alone writes the file, whose main entries are rank 0's own; so the
file also resumes a single process. A resume with the same world size gives
every rank its own state back and continues exactly; with another world size
the learning state is restored and rollouts start fresh.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pathgrad.checkpoint import _load, _save, latest_checkpoint, read_checkpoint
from pathgrad.core.run_index import prune_checkpoints
from pathgrad.distributed.ranks import (
    fresh_rank_streams,
    rank_states,
    restore_rank_state,
    saved_world_size,
)

__all__ = ["CheckpointMixin"]


class CheckpointMixin:
    """``save_checkpoint``, ``checkpoint_path`` and ``load_checkpoint`` of the trainer."""

    def save_checkpoint(self, path: str | Path | None = None, *, kind: str = "periodic") -> str:
        """Atomically save the learning state and record it in the run index.

        With several ranks, every rank must call it (it gathers their state);
        rank 0 writes.

        Args:
            path: Destination; by default :meth:`checkpoint_path` of ``kind``.
            kind: ``periodic``, ``best`` or ``final``, recorded in the index.

        Returns:
            The saved path.
        """
        if path is None:
            path = self.checkpoint_path(kind)
        extra: dict[str, Any] = {
            **self.checkpoint_extra,
            "rollout_index": self._rollout_index,
            "next_eval_step": self._next_eval_step,
            "saved_update": self._saved_update,
            "last_train_metrics": dict(self.last_train_metrics),
            "skipped_updates": self.skips.state_dict(),
        }
        if self.observation_normalizer is not None:
            extra["observation_normalizer"] = self.observation_normalizer.state_dict()
        ranks = rank_states(self)
        if not self.data_parallel.is_main:
            self.latest_checkpoint_path = str(path)
            return str(path)
        if ranks is not None:
            extra["data_parallel"] = ranks
        # A resume keeps the TensorBoard events up to its checkpoint: they are on disk first.
        self.sinks.flush()
        written = _save(self, path, extra, kind)
        if self.cfg.keep_last_checkpoints > 0:
            best = self.best_checkpoint_path
            keep = {Path(best).name} if best and Path(best).parent == Path(path).parent else set()
            prune_checkpoints(Path(path).parent, self.cfg.keep_last_checkpoints, keep)
        return written

    def checkpoint_path(self, kind: str = "periodic") -> Path:
        """``<checkpoint_dir>/<experiment>_[best_|final_]step_<N>.pt`` at the current step."""
        infix = "" if kind == "periodic" else f"{kind}_"
        name = f"{self.cfg.experiment_name}_{infix}step_{self.global_step}.pt"
        return Path(self.cfg.checkpoint_dir) / name

    def load_checkpoint(
        self,
        path: str | Path | None = None,
        *,
        resume_scheduler: str = "restore",
        restore_env_state: bool = True,
    ) -> None:
        """Validate and restore the learning state.

        By default the env state is restored too (where the env has
        ``state_dict()``/``load_state_dict()``) and training continues exactly;
        otherwise the next update starts from a fresh reset. Evaluations and
        saves an interrupt left pending run first in the next :meth:`train`.
        A checkpoint of another world size restores the learning state and
        starts fresh rollouts (each rank from its own seed).

        Args:
            path: Checkpoint file; by default the latest entry of the run
                index in ``cfg.checkpoint_dir``.
            resume_scheduler: ``restore`` the saved LR curve, or ``restart``
                the configured curve while keeping the optimizer's momentum.
            restore_env_state: ``False`` starts from a fresh rollout, as the
                reference trainer does (the run then no longer repeats an
                uninterrupted one exactly).

        Raises:
            FileNotFoundError: If the file (or any indexed checkpoint) is missing.
            ValueError: If the file is not a pathgrad checkpoint, the index is
                malformed, or the file does not match this trainer; nothing is
                changed then.
        """
        if path is None:
            try:
                path = latest_checkpoint(self.cfg.checkpoint_dir)
            except FileNotFoundError as error:
                raise FileNotFoundError(
                    f"{error} Save one with save_checkpoint() (train() saves only every "
                    "save_frequency_updates updates and at evaluations that improve)."
                ) from error
        checkpoint = read_checkpoint(path)
        same_world = saved_world_size(checkpoint) == self.data_parallel.world_size
        _load(
            self,
            path,
            resume_scheduler,
            restore_env_state=restore_env_state and same_world,
            checkpoint=checkpoint,
        )
        if restore_env_state and same_world:
            restore_rank_state(self, checkpoint)
        elif not same_world:
            fresh_rank_streams(self)
        self._rollout_index = int(checkpoint.get("rollout_index", self.num_updates))
        self._saved_update = checkpoint.get("saved_update")
        self.last_train_metrics = dict(checkpoint.get("last_train_metrics") or {})
        self.skips.load_state_dict(checkpoint.get("skipped_updates") or {})
        frequency = self.cfg.eval_frequency_steps
        saved_next = checkpoint.get("next_eval_step")
        if frequency <= 0:
            self._next_eval_step = None
        elif saved_next is not None:
            self._next_eval_step = int(saved_next)
        else:
            self._next_eval_step = (self.global_step // frequency + 1) * frequency
        self.start_time = time.time()
        self._start_step = self.global_step
