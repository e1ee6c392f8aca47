"""What the trainer's collaborators see of it: a protocol, so that none imports the trainer.

Checkpoints (:mod:`pathgrad.checkpoint`), interrupts
(:mod:`pathgrad.trainer.interruption`), budgets (:mod:`pathgrad.trainer.budgets`) and the
data-parallel hooks (:mod:`pathgrad.distributed.ranks`) act on a
:class:`~pathgrad.trainer.trainer.DifferentiableTrainer` through these
members only; the trainer imports them, never the other way round.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["TrainerState"]


class TrainerState(Protocol):
    """The members of a trainer that its collaborators read and write."""

    cfg: Any
    env: Any
    eval_env: Any
    policy: Any
    algorithm: Any
    collector: Any
    episodes: Any
    observation_normalizer: Any
    data_parallel: Any
    interrupts: Any
    global_step: int
    num_updates: int
    update_horizon: int
    latest_checkpoint_path: str | None
    best_checkpoint_path: str | None
    best_eval_value: float | None
    last_eval_metrics: dict[str, float]

    @property
    def global_num_envs(self) -> int:
        """Envs stepped per vector step by all ranks together."""
        ...

    def callback_requests_stop(self) -> bool:
        """Whether a callback asked to stop training."""
        ...
