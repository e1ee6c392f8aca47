"""Data-parallel training on ``torch.distributed``: ``torchrun ... -m pathgrad train``.

Each rank steps its own env batch (seeded by :func:`rank_seed`); gradients are
averaged after each update's backward, the observation normalizer merges every
rank's moments, episode statistics and interrupt requests are exchanged at the
end of every update, and rank 0 alone evaluates, logs and writes checkpoints
(which hold every rank's env and random state). See ``docs/distributed.md``.
"""

from pathgrad.distributed.context import exit_rank, join, leave, rank_seed, torchrun_world_size
from pathgrad.distributed.sync import DataParallel, DistributedError, LostContact

__all__ = [
    "DataParallel",
    "DistributedError",
    "LostContact",
    "exit_rank",
    "join",
    "leave",
    "rank_seed",
    "torchrun_world_size",
]
