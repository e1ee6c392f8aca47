"""What the trainer does differently with several ranks, called at its fixed points.

* :func:`attach`: the algorithm averages gradients, the normalizer merges
  moments, episodes wait to be exchanged, interrupts wait for agreement, and
  every rank starts from rank 0's parameters;
* :func:`end_of_update`: finished episodes exchanged (when any finished) and
  interrupt requests agreed, both announced in the update's gradient average,
  so every rank keeps the same episode windows and all stop at the same update;
* :func:`rank_states` / :func:`restore_rank_state`: each rank's env, random
  streams and running episode sums in the checkpoint rank 0 writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from pathgrad.core.termination import Terminated
from pathgrad.distributed.sync import DataParallel
from pathgrad.trainer.interruption import InterruptGate

if TYPE_CHECKING:
    from pathgrad.core.trainer_state import TrainerState

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

    A signal on any rank (``request``) is only recorded; the requests travel
    with the update's gradient average (:func:`attach`), and every rank raises
    the agreed exception when the gate next opens, after the same update. The
    final checkpoint, a collective, is then written by all of them.
    """

    KINDS: tuple[type[BaseException], ...] = (KeyboardInterrupt, Terminated)

    def __init__(self) -> None:
        super().__init__()
        self.requested: type[BaseException] | None = None
        self.sent: type[BaseException] | None = None  # the request in the all-reduce on its way

    def request(self, exception: type[BaseException]) -> None:
        """Record ``exception`` for the next agreement; never raise here."""
        self.requested = self.requested or exception

    def votes(self) -> torch.Tensor:
        """This rank's request as counts per kind (last: any other exception)."""
        self.sent = self.requested
        votes = torch.zeros(len(self.KINDS) + 1, dtype=torch.float64)
        if self.sent is not None:
            kinds = list(self.KINDS)
            votes[kinds.index(self.sent) if self.sent in kinds else -1] = 1.0
        return votes

    def agree(self, votes: torch.Tensor) -> None:
        """Raise, when the gate next opens, the first kind any rank requested.

        A request that came after this rank voted (a signal during the
        all-reduce) was not counted: it stays for the next agreement.
        """
        sent, self.sent = self.sent, None
        if sent is not None:
            self.requested = None
        chosen = [index for index, count in enumerate(votes.tolist()) if count > 0]
        if chosen:
            kinds = (*self.KINDS, sent if sent not in (None, *self.KINDS) else Terminated)
            self._deferred = kinds[chosen[0]]


def attach(trainer: TrainerState, data_parallel: DataParallel) -> None:
    """Make ``trainer`` one rank of ``data_parallel`` (nothing changes for a world of one).

    Raises:
        ValueError: With several ranks, if the algorithm does not average its
            gradients across them.
    """
    trainer.data_parallel = data_parallel
    if data_parallel.active and not trainer.algorithm.supports_data_parallel:
        raise ValueError(
            f"{type(trainer.algorithm).__name__} cannot train data-parallel: it does not "
            "average its gradients across ranks (supports_data_parallel is False)."
        )
    trainer.algorithm.synchronizer = data_parallel
    if not data_parallel.active:
        return
    data_parallel.forget_riders()  # a DataParallel serves the latest trainer built on it
    data_parallel.stop_agreed = False
    gate = trainer.interrupts = SharedInterruptGate()
    data_parallel.carry(len(gate.KINDS) + 1, gate.votes, gate.agree)
    episodes = trainer.episodes
    episodes.hold_finished = True
    exchange = {"due": False}

    def finished_count() -> torch.Tensor:
        episodes.flush()
        return torch.tensor([float(episodes.held_count)], dtype=torch.float64)

    def note_finished(total: torch.Tensor) -> None:
        exchange["due"] = bool(total[0] > 0)

    data_parallel.carry(1, finished_count, note_finished)

    def stop_vote() -> torch.Tensor:
        return torch.tensor([float(trainer.callback_requests_stop())], dtype=torch.float64)

    def note_stop(votes: torch.Tensor) -> None:
        data_parallel.stop_agreed = data_parallel.stop_agreed or bool(votes[0] > 0)

    data_parallel.carry(1, stop_vote, note_stop)
    trainer._episode_exchange = exchange
    normalizer = trainer.observation_normalizer
    if normalizer is not None:
        normalizer.shared = data_parallel
        size = data_parallel.world_size * (1 + 2 * normalizer.dim)
        data_parallel.carry(size, normalizer.pending_moments, normalizer.merge_gathered)
    modules = [trainer.policy] + [
        value
        for value in vars(trainer.algorithm).values()
        if isinstance(value, torch.nn.Module) and value is not trainer.policy
    ]
    data_parallel.broadcast_modules(modules)


def end_of_update(trainer: TrainerState) -> None:
    """Finish what the update's gradient average carried: episodes, interrupts, statistics.

    Finished episodes travel as a count; only updates where some rank finished
    an episode exchange them (one more collective).
    """
    data_parallel = trainer.data_parallel
    if not data_parallel.active:
        return
    if not data_parallel.carried:  # the algorithm averaged no gradient in this update
        data_parallel.carry_now()
    data_parallel.carried = False
    if trainer._episode_exchange["due"]:
        trainer._episode_exchange["due"] = False
        payloads = data_parallel.exchange("the episode exchange", trainer.episodes.take_finished())
        for rank_returns, rank_lengths in payloads:
            trainer.episodes.add_finished(rank_returns, rank_lengths)


def _cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {key: _cpu(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_cpu(item) for item in value)
    return value


def _rank_state(trainer: TrainerState) -> dict[str, Any]:
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


def rank_states(trainer: TrainerState) -> dict[str, Any] | None:
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


def restore_rank_state(trainer: TrainerState, checkpoint: dict[str, Any]) -> None:
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


def fresh_rank_streams(trainer: TrainerState) -> None:
    """After a resume with another world size: this rank's own sampling stream."""
    from pathgrad.distributed.context import rank_seed

    data_parallel = trainer.data_parallel
    if data_parallel.rank > 0:
        seed = rank_seed(data_parallel.seed, data_parallel.rank) + trainer.num_updates
        torch.manual_seed(seed)
