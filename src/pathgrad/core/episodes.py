"""Vectorized bookkeeping over done flags: discounts and episode statistics."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["EpisodeTracker", "first_episode_mask", "last_done_before", "restarting_discounts"]


def last_done_before(dones: torch.Tensor) -> torch.Tensor:
    """Index of the last done strictly before each step, ``-1`` where there is none.

    Args:
        dones: Done flags ``[T, N]``.

    Returns:
        Long tensor ``[T + 1, N]``; row ``t`` looks at steps ``0 .. t-1``.
    """
    num_steps, num_envs = dones.shape
    steps = torch.arange(num_steps, device=dones.device).unsqueeze(-1).expand(num_steps, num_envs)
    done_steps = torch.where(dones, steps, torch.full_like(steps, -1))
    none_yet = torch.full((1, num_envs), -1, dtype=steps.dtype, device=dones.device)
    return torch.cat([none_yet, torch.cummax(done_steps, dim=0).values])


def first_episode_mask(dones: torch.Tensor) -> torch.Tensor:
    """``[T, N]``: true up to and including each env's first done in ``dones`` ``[T, N]``."""
    done_counts = dones.to(torch.int32)
    return torch.cumsum(done_counts, dim=0) - done_counts == 0


def restarting_discounts(
    dones: torch.Tensor, gamma: float, initial: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Discount of every step when the discount restarts at 1 after each done.

    ``d[0] = initial`` (1 by default) and ``d[t+1] = 1 if done[t] else gamma d[t]``,
    computed without a Python loop over time steps.

    Args:
        dones: Done flags ``[T, N]``.
        gamma: Per-step discount.
        initial: Discount ``[N]`` carried in from an earlier segment.

    Returns:
        The discounts ``[T, N]`` of the steps and ``d[T]`` to carry on.
    """
    last_done = last_done_before(dones)
    steps = torch.arange(dones.shape[0] + 1, device=dones.device).unsqueeze(-1)
    restarted = last_done >= 0
    exponent = torch.where(restarted, steps - last_done - 1, steps.expand_as(last_done))
    dtype = torch.float64 if initial is None else initial.dtype
    discounts = torch.full(exponent.shape, gamma, dtype=dtype, device=dones.device) ** exponent
    if initial is not None:
        discounts = torch.where(restarted, discounts, discounts * initial)
    return discounts[:-1], discounts[-1]


class EpisodeTracker:
    """Returns and lengths of finished episodes over a moving window.

    :meth:`record` only stores each step's reward and done flags (no host
    synchronisation); :meth:`flush` turns the stored steps into finished
    episodes with a handful of tensor operations and one transfer to the host.
    Episodes enter the window in the order they finish (time, then env index).

    Args:
        num_envs: Number of envs.
        device: Device of the running sums.
        window: Number of finished episodes kept.

    Attributes:
        hold_finished: Keep finished episodes aside (:meth:`take_finished`)
            instead of adding them to the window; data-parallel ranks exchange
            them and add every rank's (:meth:`add_finished`).
    """

    def __init__(self, num_envs: int, device: torch.device | str, window: int = 100) -> None:
        self.device = torch.device(device)
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[float] = deque(maxlen=window)
        self.running_return = torch.zeros(num_envs, dtype=torch.float64, device=self.device)
        self.running_length = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self._rewards: list[torch.Tensor] = []
        self._dones: list[torch.Tensor] = []
        self.hold_finished = False
        self._held: tuple[list[float], list[float]] = ([], [])

    @property
    def held_count(self) -> int:
        """Finished episodes held for the exchange (see ``hold_finished``)."""
        return len(self._held[0])

    def take_finished(self) -> tuple[list[float], list[float]]:
        """Returns and lengths of the episodes held since the last call."""
        held, self._held = self._held, ([], [])
        return held

    def add_finished(self, returns: list[float], lengths: list[float]) -> None:
        """Add finished episodes to the window."""
        self.returns.extend(returns)
        self.lengths.extend(lengths)

    def record(self, reward: torch.Tensor, done: torch.Tensor) -> None:
        """Store one step of every env."""
        self._rewards.append(reward.detach())
        self._dones.append(done.detach())

    def record_steps(self, rewards: torch.Tensor, dones: torch.Tensor) -> None:
        """Store consecutive steps ``[T, N]`` of every env."""
        self._rewards.append(rewards.detach())
        self._dones.append(dones.detach())

    def flush(self) -> None:
        """Move the episodes finished since the last flush into the window."""
        if not self._dones:
            return
        dones = _steps(self._dones)
        rewards = _steps(self._rewards).to(torch.float64)
        self._rewards.clear()
        self._dones.clear()
        if not bool(dones.any()):
            self.running_return = self.running_return + rewards.sum(dim=0)
            self.running_length = self.running_length + dones.shape[0]
            return
        # Running sums since the last reset: the cumulative sum minus its value
        # at the step that ended the previous episode.
        cumulative = self.running_return + torch.cumsum(rewards, dim=0)
        last_done = last_done_before(dones)[:-1]
        restarted = last_done >= 0
        base = torch.where(
            restarted, cumulative.gather(0, last_done.clamp_min(0)), torch.zeros_like(cumulative)
        )
        running_return = cumulative - base
        steps = torch.arange(dones.shape[0], device=dones.device).unsqueeze(-1)
        running_length = torch.where(restarted, steps - last_done, self.running_length + steps + 1)
        returns = running_return[dones].tolist()
        lengths = [float(length) for length in running_length[dones].tolist()]
        if self.hold_finished:
            self._held[0].extend(returns)
            self._held[1].extend(lengths)
        else:
            self.add_finished(returns, lengths)
        self.running_return = torch.where(
            dones[-1], torch.zeros_like(running_return[-1]), running_return[-1]
        )
        self.running_length = torch.where(
            dones[-1], torch.zeros_like(running_length[-1]), running_length[-1]
        )

    def restart_episodes(self) -> None:
        """Zero the running sums: every env starts a new episode (after a fresh reset)."""
        self._rewards.clear()
        self._dones.clear()
        self.running_return = torch.zeros_like(self.running_return)
        self.running_length = torch.zeros_like(self.running_length)

    def state_dict(self) -> dict[str, Any]:
        """Window and running sums (after a flush), for checkpoints."""
        self.flush()
        return {
            "returns": list(self.returns),
            "lengths": list(self.lengths),
            "running_return": self.running_return.clone(),
            "running_length": self.running_length.clone(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; running sums need the same env count."""
        self._rewards.clear()
        self._dones.clear()
        self.returns = deque(state["returns"], maxlen=self.returns.maxlen)
        self.lengths = deque(state["lengths"], maxlen=self.lengths.maxlen)
        if state["running_return"].shape == self.running_return.shape:
            self.running_return = state["running_return"].to(self.device, torch.float64)
            self.running_length = state["running_length"].to(self.device, torch.long)


def _steps(recorded: list[torch.Tensor]) -> torch.Tensor:
    """Recorded steps ``[N]`` and runs of steps ``[T, N]`` as one ``[T_total, N]`` tensor."""
    if all(entry.ndim == 1 for entry in recorded):
        return torch.stack(recorded)
    return torch.cat([entry.view(1, -1) if entry.ndim == 1 else entry for entry in recorded])
