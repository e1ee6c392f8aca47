"""What the trainer does differently with several ranks, called at its fixed points.

* :func:`attach`: the algorithm averages gradients, the normalizer merges
  moments, episodes wait to be exchanged, interrupts wait for agreement, and
  every rank starts from rank 0's parameters;
* :func:`end_of_update`: finished episodes and interrupt requests exchanged,
  so every rank keeps the same episode windows and all stop at the same update;
* :func:`rank_states` / :func:`restore_rank_state`: each rank's env, random
  streams and running episode sums in the checkpoint rank 0 writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from pathgrad.distributed.sync import DataParallel
from pathgrad.interruption import InterruptGate

if TYPE_CHECKING:
    from pathgrad.differentiable_trainer import DifferentiableTrainer

__all__ = [
    "SharedInterruptGate",
    "attach",
    "end_of_update",
    "rank_states",
    "restore_rank_state",
    "saved_world_size",
]


class SharedInterruptGate(InterruptGate):
    """Ranks stop together: a request waits for the end of the update, where all agree.

    A signal on any rank (``request``) is only recorded; :func:`end_of_update`
    exchanges the requests, and every rank raises the agreed exception when
    the gate next opens, at the same update. The final checkpoint, a
    collective, is then written by all of them.
    """

    def __init__(self) -> None:
        super().__init__()
        self.requested: type[BaseException] | None = None

    def request(self, exception: type[BaseException]) -> None:
        """Record ``exception`` for the next agreement; never raise here."""
        self.requested = self.requested or exception

    def agree(self, requests: list[type[BaseException] | None]) -> None:
        """Raise, when the gate next opens, the first rank's request (if any)."""
        self.requested = None
        chosen = next((request for request in requests if request is not None), None)
        if chosen is not None:
            self._deferred = chosen


def attach(trainer: DifferentiableTrainer, data_parallel: DataParallel) -> None:
    """Make ``trainer`` one rank of ``data_parallel`` (nothing changes for a world of one).

    Raises:
        ValueError: With several ranks, if the algorithm does not average its
            gradients across them.
    """
    trainer.data_parallel = data_parallel
    if data_parallel.active and not getattr(trainer.algorithm, "supports_data_parallel", False):
        raise ValueError(
            f"{type(trainer.algorithm).__name__} cannot train data-parallel: it does not "
            "average its gradients across ranks (supports_data_parallel is False)."
        )
    trainer.algorithm.synchronizer = data_parallel
    if not data_parallel.active:
        return
    trainer.interrupts = SharedInterruptGate()
    trainer.episodes.hold_finished = True
    if trainer.observation_normalizer is not None:
        trainer.observation_normalizer.moments_reducer = data_parallel.merge_moments
    modules = [trainer.policy] + [
        value
        for value in vars(trainer.algorithm).values()
        if isinstance(value, torch.nn.Module) and value is not trainer.policy
    ]
    data_parallel.broadcast_modules(modules)


def end_of_update(trainer: DifferentiableTrainer) -> None:
    """Exchange finished episodes and interrupt requests (one collective)."""
    data_parallel = trainer.data_parallel
    if not data_parallel.active:
        return
    gate = trainer.interrupts
    returns, lengths = trainer.episodes.take_finished()
    payloads = data_parallel.exchange(
        "the end-of-update exchange", (returns, lengths, getattr(gate, "requested", None))
    )
    for rank_returns, rank_lengths, _ in payloads:
        trainer.episodes.add_finished(rank_returns, rank_lengths)
    if isinstance(gate, SharedInterruptGate):
        gate.agree([request for _, _, request in payloads])


def _cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {key: _cpu(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_cpu(item) for item in value)
    return value


def _rank_state(trainer: DifferentiableTrainer) -> dict[str, Any]:
    state_dict = getattr(trainer.env, "state_dict", None)
    episodes = trainer.episodes.state_dict()
    rng: dict[str, Any] = {"torch": torch.get_rng_state()}
    if trainer.algorithm.device.type == "cuda" and torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state()
    return _cpu(
        {
            "env": state_dict() if callable(state_dict) else None,
            "rng": rng,
            "running_return": episodes["running_return"],
            "running_length": episodes["running_length"],
        }
    )


def rank_states(trainer: DifferentiableTrainer) -> dict[str, Any] | None:
    """Every rank's own state for the checkpoint (on rank 0; ``None`` elsewhere and alone)."""
    data_parallel = trainer.data_parallel
    if not data_parallel.active:
        return None
    states = data_parallel.exchange("the checkpoint's state exchange", _rank_state(trainer))
    return {"world_size": data_parallel.world_size, "ranks": states}


def saved_world_size(checkpoint: dict[str, Any]) -> int:
    """Ranks of the run that wrote ``checkpoint`` (1 for a single process)."""
    saved = checkpoint.get("data_parallel")
    if saved is None:
        return 1
    if not isinstance(saved, dict) or not isinstance(saved.get("ranks"), list):
        raise ValueError("checkpoint entry 'data_parallel' is malformed (no list of ranks).")
    return int(saved["world_size"])


def restore_rank_state(trainer: DifferentiableTrainer, checkpoint: dict[str, Any]) -> None:
    """Restore this rank's own env, random streams and episode sums (same world size)."""
    data_parallel = trainer.data_parallel
    if not data_parallel.active:
        return
    state = checkpoint["data_parallel"]["ranks"][data_parallel.rank]
    if state["env"] is not None and callable(getattr(trainer.env, "load_state_dict", None)):
        trainer.env.load_state_dict(state["env"])
        trainer.collector.detach_state()
    torch.set_rng_state(state["rng"]["torch"])
    if "cuda" in state["rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["rng"]["cuda"])
    trainer.episodes.running_return = state["running_return"].to(trainer.episodes.device)
    trainer.episodes.running_length = state["running_length"].to(trainer.episodes.device)


def fresh_rank_streams(trainer: DifferentiableTrainer) -> None:
    """After a resume with another world size: this rank's own sampling stream."""
    from pathgrad.distributed.context import rank_seed

    data_parallel = trainer.data_parallel
    if data_parallel.rank > 0:
        seed = rank_seed(data_parallel.seed, data_parallel.rank) + trainer.num_updates
        torch.manual_seed(seed)
