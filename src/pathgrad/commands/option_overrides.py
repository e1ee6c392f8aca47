"""Command-line options that stand for config keys, as the overrides they mean."""

from __future__ import annotations

import argparse

__all__ = ["budget_overrides", "device_overrides", "thread_overrides"]


def budget_overrides(args: argparse.Namespace) -> list[str]:
    """``--total-updates N`` / ``--total-timesteps N``: that budget, the other cleared."""
    if args.total_updates is not None:
        return [f"trainer.total_updates={args.total_updates}", "trainer.total_timesteps=null"]
    if args.total_timesteps is not None:
        return [f"trainer.total_timesteps={args.total_timesteps}", "trainer.total_updates=null"]
    return []


def thread_overrides(args: argparse.Namespace) -> list[str]:
    """``--num-threads N``: ``trainer.num_threads``."""
    return [] if args.num_threads is None else [f"trainer.num_threads={args.num_threads}"]


def device_overrides(args: argparse.Namespace) -> list[str]:
    """``resume --device X``: continue on another torch device than the run's."""
    device = getattr(args, "device", None)
    return [] if device is None else [f"env.device={device}"]
