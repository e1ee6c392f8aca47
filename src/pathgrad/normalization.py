"""Running mean/variance normalization of observations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["RunningObservationNormalizer", "apply_normalization"]


class RunningObservationNormalizer:
    """Normalize observations by running statistics, merged batch by batch.

    Statistics are accumulated in float64 (Chan et al.'s parallel merge), so
    millions of updates do not drift. :meth:`normalize` is differentiable in
    its input: the statistics are constants, and dimensions clipped at
    ``±clip`` get zero gradient. Dimensions where ``normalize_mask`` is false
    pass through unchanged.

    Args:
        dim: Observation size.
        device: Device of the statistics.
        normalize_mask: Optional bool per dimension; false leaves it as is.
        epsilon: Added to the variance before the square root.
        clip: Normalized values are clipped to ``[-clip, clip]``.
    """

    def __init__(
        self,
        dim: int,
        device: torch.device | str = "cpu",
        normalize_mask: Sequence[bool] | torch.Tensor | None = None,
        *,
        epsilon: float = 1e-8,
        clip: float = 10.0,
    ) -> None:
        if int(dim) <= 0:
            raise ValueError(f"dim must be positive, got {dim}.")
        if not clip > 0.0:
            raise ValueError(f"clip must be positive, got {clip}.")
        self.dim = int(dim)
        self.device = torch.device(device)
        self.epsilon = float(epsilon)
        self.clip = float(clip)
        if normalize_mask is None:
            mask = torch.ones(self.dim, dtype=torch.bool)
        else:
            mask = torch.as_tensor(normalize_mask, dtype=torch.bool).flatten()
            if mask.numel() != self.dim:
                raise ValueError(f"normalize_mask has {mask.numel()} entries, expected {self.dim}.")
        self.normalize_mask = mask.to(self.device)
        self.mean = torch.zeros(self.dim, dtype=torch.float64, device=self.device)
        self.var = torch.ones(self.dim, dtype=torch.float64, device=self.device)
        self.count = torch.zeros((), dtype=torch.float64, device=self.device)
        self._cache: dict[torch.dtype, tuple[torch.Tensor, ...]] = {}

    @torch.no_grad()
    def update(self, observations: torch.Tensor) -> None:
        """Merge a batch ``[B, dim]`` into the running statistics."""
        batch = observations.detach().reshape(-1, self.dim).to(self.device, torch.float64)
        batch_count = batch.shape[0]
        if batch_count == 0:
            return
        batch_mean = batch.mean(dim=0)
        batch_var = batch.var(dim=0, unbiased=False)
        total = self.count + batch_count
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * (batch_count / total)
        merged_m2 = self.var * self.count + batch_var * batch_count
        self.var = (merged_m2 + delta.square() * self.count * batch_count / total) / total
        self.count = total
        self._cache.clear()

    def constants(self, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """Shift, scale and clip bounds in ``dtype``; identity on masked-out dims.

        :func:`apply_normalization` with them is :meth:`normalize`; they stay
        the same objects until the next :meth:`update` or load.
        """
        if dtype not in self._cache:
            mask = self.normalize_mask
            inf = torch.full_like(self.mean, float("inf"))
            shift = torch.where(mask, self.mean, torch.zeros_like(self.mean))
            scale = torch.where(mask, (self.var + self.epsilon).rsqrt(), torch.ones_like(self.var))
            low = torch.where(mask, torch.full_like(inf, -self.clip), -inf)
            high = torch.where(mask, torch.full_like(inf, self.clip), inf)
            self._cache[dtype] = tuple(t.to(dtype) for t in (shift, scale, low, high))
        return self._cache[dtype]

    def normalize(self, observations: torch.Tensor) -> torch.Tensor:
        """Return ``clip((obs - mean) / sqrt(var + eps))``, keeping the graph."""
        return apply_normalization(observations, self.constants(observations.dtype))

    def state_dict(self) -> dict[str, Any]:
        """Statistics and settings, for checkpoints."""
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

        Raises:
            ValueError: If the saved statistics have another dimension.
        """
        shape = tuple(state["mean"].shape)
        if shape != (self.dim,):
            raise ValueError(
                f"observation_normalizer.mean has shape {shape}, expected {(self.dim,)}."
            )
        self.mean = state["mean"].to(self.device, torch.float64).clone()
        self.var = state["var"].to(self.device, torch.float64).clone()
        self.count = state["count"].to(self.device, torch.float64).clone()
        self.normalize_mask = state["normalize_mask"].to(self.device, torch.bool).clone()
        self.epsilon = float(state["epsilon"])
        self.clip = float(state["clip"])
        self._cache.clear()


def apply_normalization(
    observations: torch.Tensor, constants: tuple[torch.Tensor, ...]
) -> torch.Tensor:
    """``clamp((obs - shift) * scale, low, high)`` for ``constants = (shift, scale, low, high)``."""
    shift, scale, low, high = constants
    return ((observations - shift) * scale).clamp(low, high)
