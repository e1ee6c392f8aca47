"""Run one phase of the exact-resume test in its own process.

Usage: python resume_run.py MODE PHASE DIR UPDATES (MODE: segmented, complete or shac)
  full:   train UPDATES updates, save the learning state to DIR/full.pt
  first:  train UPDATES updates, save a checkpoint to DIR/checkpoints
  second: load the latest checkpoint, train to UPDATES, save DIR/resumed.pt
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from helpers import build_point_mass_trainer, learning_state

MODE_SETTINGS = {
    "segmented": {},
    "shac": {"algorithm": "shac", "update_horizon": 4},
    "complete": {
        "rollout_mode": "complete",
        "update_horizon": 6,
        "gradient_accumulation_steps": 2,
        "rollout_seed": 5,
    },
}


def main() -> None:
    mode, phase, directory, updates = sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
    trainer = build_point_mass_trainer(directory / "checkpoints", **MODE_SETTINGS[mode])
    if phase == "second":
        trainer.load_checkpoint()
    summary = trainer.train(total_updates=updates)
    if phase == "first":
        trainer.save_checkpoint()
        return
    result = {
        "state": learning_state(trainer),
        "global_step": summary["global_step"],
        "ret_window": list(trainer.ret_window),
        "eval": summary["last_eval_metrics"],
        "learning_rate": trainer.algorithm.current_learning_rate(),
    }
    torch.save(result, directory / f"{phase}.pt")


if __name__ == "__main__":
    main()
