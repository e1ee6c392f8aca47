"""Peak memory of one update against its horizon, with and without gradient checkpointing.

For each horizon, three settings train one APG update on PointMass (64 envs,
float32) in a fresh process: ``segmented`` (32-step TBPTT segments, the
update spans the horizon), ``complete`` (one graph through the whole
horizon) and ``checkpointed`` (complete, recomputed in 32-step chunks during
backward). The memory of an update is the process's peak resident set size
during it minus its resident size just before it (Linux, ``ru_maxrss``).

Run: ``python benchmarks/memory.py [--horizons 32 128 512 1024 2048 4096] [--quick]``
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

SETTINGS = {
    "segmented": {"rollout_mode": "segmented", "segment_length": 32},
    "complete": {"rollout_mode": "complete"},
    "checkpointed": {
        "rollout_mode": "complete",
        "gradient_checkpointing": True,
        "checkpoint_chunk_steps": 32,
    },
}


def _resident_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as handle:
        pages = int(handle.read().split()[1])
    return pages * resource.getpagesize()


def measure(setting: str, horizon: int, num_envs: int) -> dict[str, float]:
    """Train one update in this process; return its peak extra memory in MiB."""
    import torch

    import pathgrad
    from pathgrad.envs import PointMass

    torch.manual_seed(0)
    env = PointMass(num_envs, seed=0, max_episode_steps=horizon)
    policy = pathgrad.GaussianMLPPolicy(6, 2, hidden_sizes=(64, 64))
    algorithm = pathgrad.APG(pathgrad.APGCfg(), policy)
    cfg = pathgrad.DifferentiableTrainerCfg(update_horizon=horizon, **SETTINGS[setting])
    trainer = pathgrad.DifferentiableTrainer(cfg, env, policy, algorithm)
    before = _resident_bytes()
    trainer.train(total_updates=1)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"setting": setting, "horizon": horizon, "mib": max(0, peak - before) / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizons", type=int, nargs="+", default=[32, 128, 512, 1024, 2048, 4096])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="one short horizon")
    parser.add_argument("--worker", nargs=2, metavar=("SETTING", "HORIZON"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args.worker[0], int(args.worker[1]), args.num_envs)))
        return
    if args.quick:
        args.horizons = [32]
    rows: dict[int, dict[str, float]] = {}
    for horizon in args.horizons:
        for setting in SETTINGS:
            command = [sys.executable, __file__, "--worker", setting, str(horizon)]
            command += ["--num-envs", str(args.num_envs)]
            output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            result = json.loads(output.strip().splitlines()[-1])
            rows.setdefault(horizon, {})[setting] = result["mib"]
    print(f"PointMass, {args.num_envs} envs, one APG update; peak extra resident memory (MiB)")
    print()
    print("| horizon | " + " | ".join(SETTINGS) + " |")
    print("|---:|" + "---:|" * len(SETTINGS))
    for horizon, values in rows.items():
        print(f"| {horizon} | " + " | ".join(f"{values[s]:.1f}" for s in SETTINGS) + " |")


if __name__ == "__main__":
    main()
