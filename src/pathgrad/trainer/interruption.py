"""Interrupts that never split a unit of work, and undoing an interrupted update.

The command line turns SIGINT/SIGTERM into exceptions through
:meth:`InterruptGate.request`. While the gate is closed (an optimizer step and
the counters that record it, writing a record, saving a checkpoint) the
request waits and is raised when the gate opens, so every checkpoint written
afterwards describes a state an uninterrupted run also passes through.
:class:`UpdateSnapshot` undoes the part of an update that ran before an
interrupt (env, observation, RNG, normalizer, episode statistics).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from pathgrad.core.trainer_state import TrainerState

__all__ = ["InterruptGate", "UpdateSnapshot"]


class InterruptGate:
    """Raise requested interrupts at once, or when the current unit of work ends."""

    def __init__(self) -> None:
        self.closed = False
        self._deferred: type[BaseException] | None = None

    def request(self, exception: type[BaseException]) -> None:
        """Raise ``exception()`` now, or when the gate opens if it is closed."""
        if self.closed:
            self._deferred = self._deferred or exception
            return
        raise exception()

    def close(self) -> None:
        """Start a unit of work that interrupts must not split."""
        self.closed = True

    def open(self) -> None:
        """End the unit of work; raise an interrupt requested meanwhile."""
        self.closed = False
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            raise deferred()

    def abandon(self) -> None:
        """Open after a failure: the exception already propagating wins."""
        self.closed = False
        self._deferred = None

    @contextlib.contextmanager
    def deferring(self) -> Iterator[None]:
        """Close the gate around a block (nested blocks share the outer one)."""
        if self.closed:
            yield
            return
        self.close()
        try:
            yield
        except BaseException:
            self.abandon()
            raise
        self.open()


@dataclasses.dataclass
class UpdateSnapshot:
    """What an update changes besides the optimizer (which the algorithm cancels itself)."""

    env: dict[str, Any] | None
    observation: torch.Tensor | None
    rng: torch.Tensor
    normalizer: dict[str, Any] | None
    episodes: dict[str, Any]
    rollout_index: int

    @classmethod
    def take(cls, trainer: TrainerState) -> UpdateSnapshot:
        """Record the trainer's state before an update."""
        env_state = getattr(trainer.env, "state_dict", None)
        normalizer = trainer.observation_normalizer
        return cls(
            env=env_state() if callable(env_state) else None,
            observation=trainer.collector.observation,
            rng=torch.get_rng_state(),
            normalizer=normalizer.state_dict() if normalizer is not None else None,
            episodes=trainer.episodes.state_dict(),
            rollout_index=trainer._rollout_index,
        )

    def restore(self, trainer: TrainerState) -> None:
        """Undo an interrupted update; envs without ``load_state_dict`` restart from a reset."""
        if self.env is not None:
            trainer.env.load_state_dict(self.env)
            trainer.collector._observation = self.observation
        else:
            trainer.collector.clear_observation()
        torch.set_rng_state(self.rng)
        if self.normalizer is not None:
            trainer.observation_normalizer.load_state_dict(self.normalizer)
        trainer.episodes.load_state_dict(self.episodes)
        trainer._rollout_index = self.rollout_index
