"""The run's logging sinks besides ``metrics.jsonl``: TensorBoard and Weights & Biases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pathgrad.runs.config import RunConfig
from pathgrad.trainer.scalar_logging import eval_scalars, train_scalars

__all__ = ["open_tensorboard", "open_wandb"]


def open_wandb(config: RunConfig, run_dir: Path, resume: bool) -> Any:
    """The Weights & Biases run (``logging.wandb``), continued on resume; None without."""
    if not config.logging.wandb:
        return None
    import wandb  # load_config has checked that it is installed

    return wandb.init(
        project=config.logging.wandb_project,
        name=run_dir.name,
        id=run_dir.name.replace("/", "-"),
        dir=str(run_dir),
        config=config.model_dump(mode="python"),
        resume="allow" if resume else None,
    )


def open_tensorboard(config: RunConfig, run_dir: Path, trainer: Any, resume: bool) -> Any:
    """The TensorBoard writer; on resume, events after the checkpoint are purged.

    The checkpoint's own step is purged too and its scalars written again from
    the checkpoint, so every step appears once, as in an uninterrupted run.
    """
    if not config.logging.tensorboard:
        return None
    from torch.utils.tensorboard import SummaryWriter

    if not resume:
        return SummaryWriter(str(run_dir / "tb"))
    step = trainer.global_step
    replay = bool(trainer.last_train_metrics) or step == 0
    writer = SummaryWriter(str(run_dir / "tb"), purge_step=step if replay else step + 1)
    if trainer.last_train_metrics:
        for key, value in train_scalars(trainer.last_train_metrics).items():
            writer.add_scalar(key, value, step)
    if trainer.last_eval_metrics.get("global_step") == float(step):
        for key, value in eval_scalars(trainer.last_eval_metrics).items():
            writer.add_scalar(key, value, step)
    return writer
