"""Running mean/variance normalization of observations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["RunningObservationNormalizer", "apply_normalization"]


class RunningObservationNormalizer:
    """Normalize observations by running statistics, merged batch by batch.

    Statistics are accumulated in float64 (Chan et al.'s parallel merge), so
    millions of updates do not drift. They start from mean 0 and variance 1
    weighted by ``initial_count`` pseudo-observations (``1e-4`` by default, as
    in the reference; ``0`` makes the first batch's moments the statistics).
    :meth:`normalize` is differentiable in its input: the statistics are
    constants, and dimensions clipped at ``±clip`` get zero gradient.
    Dimensions where ``normalize_mask`` is false pass through unchanged.

    Rows of a batch with any non-finite entry are left out of the statistics
    and counted in :attr:`skipped_rows`, so one diverged env cannot poison
    them. :meth:`update` never synchronizes with the device.

    Args:
        dim: Observation size.
        device: Device of the statistics.
        normalize_mask: Optional bool per dimension; false leaves it as is.
        epsilon: Added to the variance before the square root.
        clip: Normalized values are clipped to ``[-clip, clip]``; ``None``
            (the default, as in the reference) does not clip; pathgrad's
            former default was ``10.0``.
        initial_count: Pseudo-count of the initial statistics (mean 0,
            variance 1); ``0`` is pathgrad's former behaviour.

    Attributes:
        skipped_rows: Rows left out of the statistics for non-finite entries
            since construction (int64 tensor; not part of the state dict).
        shared: The trainer's :class:`~pathgrad.distributed.DataParallel`
            when it has several ranks: batches then merge with every rank's
            (count, mean and M2 in float64, in rank order), carried by the
            update's gradient average or gathered when next read.
    """

    def __init__(
        self,
        dim: int,
        device: torch.device | str = "cpu",
        normalize_mask: Sequence[bool] | torch.Tensor | None = None,
        *,
        epsilon: float = 1e-8,
        clip: float | None = None,
        initial_count: float = 1e-4,
    ) -> None:
        if int(dim) <= 0:
            raise ValueError(f"dim must be positive, got {dim}.")
        if clip is not None and not clip > 0.0:
            raise ValueError(f"clip must be positive or None, got {clip}.")
        if not 0.0 <= initial_count < float("inf"):
            raise ValueError(f"initial_count must be finite and >= 0, got {initial_count}.")
        self.dim = int(dim)
        self.device = torch.device(device)
        self.epsilon = float(epsilon)
        self.clip = None if clip is None else float(clip)
        if normalize_mask is None:
            mask = torch.ones(self.dim, dtype=torch.bool)
        else:
            mask = torch.as_tensor(normalize_mask, dtype=torch.bool).flatten()
            if mask.numel() != self.dim:
                raise ValueError(f"normalize_mask has {mask.numel()} entries, expected {self.dim}.")
        self.normalize_mask = mask.to(self.device)
        self.mean = torch.zeros(self.dim, dtype=torch.float64, device=self.device)
        self.var = torch.ones(self.dim, dtype=torch.float64, device=self.device)
        self.count = torch.tensor(float(initial_count), dtype=torch.float64, device=self.device)
        self.skipped_rows = torch.zeros((), dtype=torch.int64, device=self.device)
        self._cache: dict[torch.dtype, tuple[torch.Tensor, ...]] = {}
        self.shared: Any = None  # a DataParallel of several ranks, set by the trainer
        self._pending: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    @property
    def observation_dim(self) -> int:
        """Observation size (the reference's name for :attr:`dim`)."""
        return self.dim

    @torch.no_grad()
    def update(self, observations: torch.Tensor) -> None:
        """Merge the finite rows of a batch ``[B, dim]`` into the running statistics.

        With data-parallel ranks (``shared``), the batch's moments wait and
        are merged with every rank's when the ranks next meet (the update's
        gradient average) or the statistics are next read.
        """
        batch = observations.detach().reshape(-1, self.dim).to(self.device, torch.float64)
        if batch.shape[0] == 0 and self.shared is None:
            return
        finite = torch.isfinite(batch).all(dim=1, keepdim=True)
        rows = finite.sum(dtype=torch.float64)
        self.skipped_rows = self.skipped_rows + (batch.shape[0] - rows).to(torch.int64)
        # Masked moments of the finite rows, without indexing (no host sync).
        safe_rows = rows.clamp_min(1.0)
        batch_mean = torch.where(finite, batch, 0.0).sum(dim=0) / safe_rows
        centered = torch.where(finite, batch - batch_mean, 0.0)
        batch_var = centered.square().sum(dim=0) / safe_rows
        if self.shared is None:
            self._merge(rows, batch_mean, batch_var)
        elif self._pending is None:
            self._pending = (rows, batch_mean, batch_var)
        else:  # several batches before the ranks meet: their moments combined here
            self._pending = _combined(*self._pending, rows, batch_mean, batch_var)

    def _merge(self, rows: torch.Tensor, batch_mean: torch.Tensor, batch_var: torch.Tensor) -> None:
        """Chan et al.'s merge of a batch's moments into the running statistics."""
        total = self.count + rows
        safe_total = torch.where(total > 0, total, 1.0)
        delta = batch_mean - self.mean
        mean = self.mean + delta * (rows / safe_total)
        merged_m2 = self.var * self.count + batch_var * rows
        var = (merged_m2 + delta.square() * self.count * rows / safe_total) / safe_total
        has_rows = rows > 0
        self.mean = torch.where(has_rows, mean, self.mean)
        self.var = torch.where(has_rows, var, self.var)
        self.count = total
        self._cache.clear()

    def pending_moments(self) -> torch.Tensor:
        """``[world_size, 1 + 2 dim]``: this rank's row holds its pending batch moments.

        Every other row is zero, so the sum over the ranks gathers every
        rank's moments (one all-reduce, carried by the gradient average).
        """
        slots = torch.zeros(
            self.shared.world_size, 1 + 2 * self.dim, dtype=torch.float64, device=self.device
        )
        if self._pending is not None:
            rows, mean, var = self._pending
            slots[self.shared.rank] = torch.cat([rows.reshape(1), mean, var])
        return slots.reshape(-1)

    def merge_gathered(self, gathered: torch.Tensor) -> None:
        """Merge every rank's pending moments (:meth:`pending_moments`, summed), in rank order.

        Every rank computes the same statistics from the same values; they
        equal those of one process merging all ranks' batches, to rounding.
        """
        if self._pending is None:
            return
        self._pending = None
        rows = gathered.to(self.device, torch.float64).reshape(-1, 1 + 2 * self.dim)
        merged = None
        for entry in rows:
            moments = (entry[0], entry[1 : 1 + self.dim], entry[1 + self.dim :])
            merged = moments if merged is None else _combined(*merged, *moments)
        self._merge(*merged)

    def synchronize(self) -> None:
        """Merge pending moments of every rank now (a collective when any are pending)."""
        if self._pending is not None:
            self.merge_gathered(
                self.shared.sum_across_ranks(self.pending_moments(), "the normalizer merge")
            )

    def constants(self, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """Shift, scale and clip bounds in ``dtype``; identity on masked-out dims.

        The bounds are ``±inf`` where nothing is clipped. :func:`apply_normalization`
        with them is :meth:`normalize`; they stay the same objects until the
        next :meth:`update` or load.
        """
        self.synchronize()
        if dtype not in self._cache:
            mask = self.normalize_mask
            inf = torch.full_like(self.mean, float("inf"))
            bound = inf if self.clip is None else torch.full_like(inf, self.clip)
            shift = torch.where(mask, self.mean, torch.zeros_like(self.mean))
            scale = torch.where(mask, (self.var + self.epsilon).rsqrt(), torch.ones_like(self.var))
            low = torch.where(mask, -bound, -inf)
            high = torch.where(mask, bound, inf)
            self._cache[dtype] = tuple(t.to(dtype) for t in (shift, scale, low, high))
        return self._cache[dtype]

    def normalize(self, observations: torch.Tensor) -> torch.Tensor:
        """Return ``clip((obs - mean) / sqrt(var + eps))``, keeping the graph."""
        return apply_normalization(observations, self.constants(observations.dtype))

    def state_dict(self) -> dict[str, Any]:
        """Statistics and settings, for checkpoints (``clip`` is ``None`` when off)."""
        self.synchronize()
        return {
            "mean": self.mean.clone(),
            "var": self.var.clone(),
            "count": self.count.clone(),
            "normalize_mask": self.normalize_mask.clone(),
            "epsilon": self.epsilon,
            "clip": self.clip,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned.

        The saved ``clip`` and ``epsilon`` replace this normalizer's, so a
        checkpoint written with ``clip=10.0`` normalizes as it did. A state
        without them (the reference's format: ``mean``, ``var``, a float
        ``count``, optional ``normalize_mask``) keeps this normalizer's settings.

        Raises:
            ValueError: If the saved statistics have another dimension or the
                count is negative or not finite.
        """
        mean = torch.as_tensor(state["mean"])
        shape = tuple(mean.shape)
        if shape != (self.dim,):
            raise ValueError(
                f"observation_normalizer.mean has shape {shape}, expected {(self.dim,)}."
            )
        count = torch.as_tensor(state["count"], dtype=torch.float64)
        if not bool(torch.isfinite(count)) or float(count) < 0.0:
            raise ValueError(
                f"observation_normalizer.count must be finite and >= 0, got {float(count)}."
            )
        mask = state.get("normalize_mask", self.normalize_mask)
        self.mean = mean.to(self.device, torch.float64).clone()
        self.var = torch.as_tensor(state["var"]).to(self.device, torch.float64).clone()
        self.count = count.to(self.device).clone()
        self.normalize_mask = torch.as_tensor(mask).to(self.device, torch.bool).clone()
        if "epsilon" in state:
            self.epsilon = float(state["epsilon"])
        if "clip" in state:
            self.clip = None if state["clip"] is None else float(state["clip"])
        self._pending = None
        self._cache.clear()


def _combined(
    rows_a: torch.Tensor,
    mean_a: torch.Tensor,
    var_a: torch.Tensor,
    rows_b: torch.Tensor,
    mean_b: torch.Tensor,
    var_b: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Moments of two batches together (Chan et al.), without host synchronisation."""
    rows = rows_a + rows_b
    safe = torch.where(rows > 0, rows, torch.ones_like(rows))
    delta = mean_b - mean_a
    mean = mean_a + delta * (rows_b / safe)
    var = (var_a * rows_a + var_b * rows_b + delta.square() * rows_a * rows_b / safe) / safe
    return rows, mean, var


def apply_normalization(
    observations: torch.Tensor, constants: tuple[torch.Tensor, ...]
) -> torch.Tensor:
    """``clamp((obs - shift) * scale, low, high)`` for ``constants = (shift, scale, low, high)``."""
    shift, scale, low, high = constants
    return ((observations - shift) * scale).clamp(low, high)
