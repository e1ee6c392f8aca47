"""Scalar sinks of the trainer (TensorBoard, Weights & Biases) and what each entry logs."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["ScalarSinks", "eval_scalars", "train_scalars"]

_COUNTERS = ("global_step", "num_updates")
_EPISODE_CHARTS = ("charts/episode_reward_avg_100", "charts/episode_length_avg_100")


def train_scalars(entry: dict[str, float]) -> dict[str, float]:
    """Scalars of a training entry: its metrics, without counters or empty episode windows."""
    values = {key: value for key, value in entry.items() if key not in _COUNTERS}
    for key in _EPISODE_CHARTS:
        if key in values and not math.isfinite(values[key]):
            del values[key]
    return values


def eval_scalars(entry: dict[str, float]) -> dict[str, float]:
    """Scalars of an evaluation entry: its finite metrics."""
    return {
        key: value
        for key, value in entry.items()
        if key not in _COUNTERS and isinstance(value, float) and math.isfinite(value)
    }


class ScalarSinks:
    """Where the trainer's scalars go: an optional SummaryWriter and optional wandb.

    Args:
        writer: TensorBoard ``SummaryWriter`` (or ``None``).
        use_wandb: Also ``wandb.log`` (``wandb.init`` is the caller's).

    Raises:
        RuntimeError: If ``use_wandb`` and the package is not installed.
    """

    def __init__(self, writer: SummaryWriter | None = None, *, use_wandb: bool = False) -> None:
        self.writer = writer
        self.wandb = _import_wandb() if use_wandb else None

    def log(self, values: dict[str, float], step: int) -> None:
        """Log ``values`` at ``step`` to every sink."""
        if self.writer is not None:
            for key, value in values.items():
                self.writer.add_scalar(key, value, step)
        if self.wandb is not None:
            self.wandb.log(values, step=step)

    def flush(self) -> None:
        """Write what TensorBoard's writer holds to its file (wandb syncs on its own)."""
        flush = getattr(self.writer, "flush", None)  # a writer of the user's may have none
        if flush is not None:
            flush()


def _import_wandb() -> Any:
    """Import wandb for ``use_wandb=True``, with a clear error when it is missing."""
    try:
        import wandb
    except ImportError as error:
        raise RuntimeError(
            "use_wandb=True needs the 'wandb' package: pip install 'pathgrad[wandb]'."
        ) from error
    return wandb
