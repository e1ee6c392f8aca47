"""AHAC's contact value on DiffRLAnt in both signal frames, under given policies.

For each policy (``random`` actions, or a checkpoint file / run directory, acted
deterministically), rolls out ``--num-envs`` stochastic-init envs for ``--steps``
steps once per frame (the same seed, so the same trajectory) and prints, per
frame, the per-step value AHAC compares with its threshold (the mean over envs
of :func:`~pathgrad.algo.adaptive_horizon.contact_values`): its mean, 10/50/90th
percentiles, and the share of steps above each ``--threshold``.

    OMP_NUM_THREADS=1 python benchmarks/ahac_contact_signal.py random RUN/checkpoints/X.pt
"""

from __future__ import annotations

import argparse

import torch

import pathgrad
from pathgrad.algo.adaptive_horizon import contact_values
from pathgrad.envs.newton import DiffRLAnt
from pathgrad.envs.newton.engine.contact_signal import CONTACT_SIGNAL_FRAMES


def step_values(policy: str, frame: str, num_envs: int, steps: int, seed: int) -> torch.Tensor:
    """The per-step contact value (mean over envs) ``[steps]`` under ``policy`` in ``frame``."""
    env = DiffRLAnt(num_envs, seed=seed, contact_signal_frame=frame)
    observation, _ = env.reset(seed=seed)
    act = None if policy == "random" else pathgrad.load(policy).module
    generator = torch.Generator().manual_seed(seed)
    values = []
    with torch.no_grad():
        for _ in range(steps):
            if act is None:
                action = torch.rand(num_envs, env.action_dim, generator=generator) * 2.0 - 1.0
            else:
                action = act(observation)
            observation, *_, info = env.step(action)
            values.append(contact_values(info["contact_forces"], info["accelerations"]).mean())
    return torch.stack(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("policies", nargs="+", help="'random', checkpoint files or run dirs")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threshold", type=float, action="append", default=None)
    args = parser.parse_args()
    thresholds = args.threshold or [500.0]
    above = " | ".join(f"> {c:g}" for c in thresholds)
    print(f"| policy | frame | mean | p10 | p50 | p90 | {above} |")
    print("|---|---|---:|---:|---:|---:|" + "---:|" * len(thresholds))
    for policy in args.policies:
        for frame in CONTACT_SIGNAL_FRAMES:
            values = step_values(policy, frame, args.num_envs, args.steps, args.seed)
            p10, p50, p90 = torch.quantile(
                values, torch.tensor([0.1, 0.5, 0.9], dtype=values.dtype)
            )
            shares = " | ".join(f"{float((values > c).double().mean()):.0%}" for c in thresholds)
            print(
                f"| {policy} | {frame} | {float(values.mean()):.0f} | {float(p10):.0f} | "
                f"{float(p50):.0f} | {float(p90):.0f} | {shares} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
