"""Per-row clipping of backward adjoints, with on-device statistics."""

from __future__ import annotations

import torch

__all__ = ["BatchedGradientNormStats", "clip_batched_gradient_norm"]


class BatchedGradientNormStats:
    """Row-wise adjoint norm statistics, accumulated on the device during backward.

    Counters stay tensors so that the backward pass never waits for the host;
    :meth:`metrics` reads them once.

    Attributes:
        rows: Rows seen (one per env and hooked step).
        finite_rows: Rows whose entries are all finite.
        norm_sum: Sum of pre-clip L2 norms of the finite rows.
        norm_max: Largest pre-clip L2 norm of a finite row.
        clipped_rows: Finite rows whose norm exceeded the limit.
        nonfinite_rows: Rows with a NaN or infinite entry (zeroed by the clip).
    """

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        zeros = lambda: torch.zeros((), dtype=torch.float64, device=self.device)  # noqa: E731
        self.rows = zeros()
        self.finite_rows = zeros()
        self.norm_sum = zeros()
        self.norm_max = zeros()
        self.clipped_rows = zeros()
        self.nonfinite_rows = zeros()

    def record(self, norms: torch.Tensor, finite: torch.Tensor, max_norm: float) -> None:
        """Add one batch of row norms (``finite`` marks the usable ones)."""
        finite_norms = torch.where(finite, norms, torch.zeros_like(norms)).to(torch.float64)
        self.rows += finite.numel()
        self.finite_rows += finite.sum()
        self.norm_sum += finite_norms.sum()
        self.norm_max.copy_(torch.maximum(self.norm_max, finite_norms.max()))
        self.clipped_rows += (finite & (norms > max_norm)).sum()
        self.nonfinite_rows += (~finite).sum()

    @classmethod
    def merge(cls, all_stats: list[BatchedGradientNormStats]) -> BatchedGradientNormStats:
        """Combine the statistics of several rollouts into one accumulator."""
        merged = cls(all_stats[0].device)
        for stats in all_stats:
            merged.rows += stats.rows
            merged.finite_rows += stats.finite_rows
            merged.norm_sum += stats.norm_sum
            merged.clipped_rows += stats.clipped_rows
            merged.nonfinite_rows += stats.nonfinite_rows
            merged.norm_max.copy_(torch.maximum(merged.norm_max, stats.norm_max))
        return merged

    def metrics(self) -> dict[str, float]:
        """Mean and maximum pre-clip norm, clipped and non-finite fractions."""
        rows = float(self.rows)
        finite_rows = float(self.finite_rows)
        return {
            "action_adjoint_preclip_mean_norm": (
                float(self.norm_sum) / finite_rows if finite_rows > 0.0 else 0.0
            ),
            "action_adjoint_preclip_max_norm": float(self.norm_max),
            "action_adjoint_clipped_fraction": (
                float(self.clipped_rows) / rows if rows > 0.0 else 0.0
            ),
            "action_adjoint_nonfinite_fraction": (
                float(self.nonfinite_rows) / rows if rows > 0.0 else 0.0
            ),
        }


def clip_batched_gradient_norm(
    gradient: torch.Tensor,
    max_norm: float,
    stats: BatchedGradientNormStats | None = None,
) -> torch.Tensor:
    """Scale each row of ``gradient`` to an L2 norm of at most ``max_norm``.

    Rows are independent envs: clipping one never shrinks another, and the
    time horizon is not cut. A row with a NaN or infinite entry becomes zero.
    Norms are computed after dividing by the row's largest magnitude, so
    float32 rows with entries near 1e38 do not overflow.

    Args:
        gradient: Adjoint with a leading batch dimension.
        max_norm: Largest row norm; zero returns ``gradient`` unchanged (after
            recording statistics if ``stats`` is given).
        stats: Accumulator of pre-clip statistics, updated on the device.

    Returns:
        The clipped adjoint, same shape, dtype and device.

    Raises:
        ValueError: If ``max_norm`` is negative or ``gradient`` has no batch dimension.
    """
    if max_norm < 0.0:
        raise ValueError("max_norm cannot be negative.")
    if max_norm == 0.0 and stats is None:
        return gradient
    if gradient.ndim < 2:
        raise ValueError("gradient must have a leading batch dimension.")
    rows = gradient.reshape(gradient.shape[0], -1)
    finite = torch.isfinite(rows).all(dim=1)
    safe_rows = torch.where(finite.unsqueeze(1), rows, torch.zeros_like(rows))
    peak = safe_rows.abs().amax(dim=1).clamp_min(torch.finfo(rows.dtype).tiny)
    norms = peak * (safe_rows / peak.unsqueeze(1)).norm(dim=1)
    if stats is not None:
        stats.record(norms.detach(), finite, max_norm if max_norm > 0.0 else float("inf"))
    if max_norm == 0.0:
        return gradient  # statistics only: the adjoint passes unchanged
    scale = (max_norm / norms.clamp_min(torch.finfo(rows.dtype).tiny)).clamp(max=1.0)
    clipped = safe_rows * scale.unsqueeze(1)
    return clipped.reshape(gradient.shape)
