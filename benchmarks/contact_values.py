"""AHAC's contact value of the DiffRL robots under random actions (to scale its threshold C).

For each env, 64 envs with uniform random actions in [-1, 1] for 100 steps: the
median and the largest over the steps of the contact value (AHAC's per-env
``||contact wrench ./ max(|acceleration|, 1)||`` over the bodies, averaged over
the envs, :func:`pathgrad.algo.adaptive_horizon.contact_values`).

Run: ``OMP_NUM_THREADS=1 python benchmarks/contact_values.py [--frame body] [--steps 100]``
"""

from __future__ import annotations

import argparse
import statistics

import torch

from pathgrad.algo.adaptive_horizon import contact_values
from pathgrad.envs.newton import DiffRLAnt, DiffRLHalfCheetah, DiffRLHopper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frame", choices=["body", "world_origin"], default="body")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"| env | median contact value ({args.frame} frame) | largest |\n|---|---:|---:|")
    for cls in (DiffRLHopper, DiffRLHalfCheetah, DiffRLAnt):
        env = cls(args.num_envs, seed=0, contact_signal_frame=args.frame)
        env.reset(seed=0)
        generator = torch.Generator().manual_seed(0)
        values = []
        with torch.no_grad():
            for _ in range(args.steps):
                action = torch.rand(args.num_envs, env.action_dim, generator=generator) * 2 - 1
                *_, info = env.step(action)
                forces, accelerations = info["contact_forces"], info["accelerations"]
                values.append(float(contact_values(forces, accelerations).mean()))
        print(f"| {cls.__name__} | {statistics.median(values):.1f} | {max(values):.1f} |")


if __name__ == "__main__":
    main()
