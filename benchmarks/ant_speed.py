"""Forward+backward throughput of ``DiffRLAnt`` as its contact handling changed.

Variants of the same Ant (same model, dynamics and gradients), measured in
alternation on windows of random actions so that the machine's drift hits all
alike:

- self-collisions and Newton's contact capacity, the contacts and the mass
  matrix recomputed in the backward pass (the Ant as issue 25 found it);
- ground-only contacts, 2 per shape pair (dflex's contact set);
- each forward substep's contacts kept for the backward pass;
- and the mass matrix kept too (today's).

Prints a Markdown table of median env-steps/s (forward without a graph
excluded: the window is forward+backward, as SHAC trains) and the ratio to the
first row.

Run: ``OMP_NUM_THREADS=1 python benchmarks/ant_speed.py [--num-envs 64] [--windows 7]``
(one thread; say so beside any figure).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

from pathgrad.envs.newton import DiffRLAnt

sys.path.insert(0, str(Path(__file__).parent))
from envs import window_seconds  # noqa: E402 - the window timing of benchmarks/envs.py

# (class attributes, mass matrix kept) of each variant
VARIANTS = {
    "self-collisions, Newton's capacity, recomputed": (
        {"self_collisions": True, "contacts_per_shape_pair": None, "keep_contacts": False},
        False,
    ),
    "ground only, 2 per pair, recomputed": ({"keep_contacts": False}, False),
    "ground only, 2 per pair, contacts kept": ({}, False),
    "ground only, 2 per pair, contacts and mass matrix kept (now)": ({}, True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--window", type=int, default=16, help="env steps per window")
    parser.add_argument("--windows", type=int, default=7, help="windows per variant")
    args = parser.parse_args()
    torch.set_num_threads(1)
    envs = {}
    for name, (attributes, keep_mass_matrix) in VARIANTS.items():
        env = type("DiffRLAnt", (DiffRLAnt,), attributes)(args.num_envs, seed=0)
        if not keep_mass_matrix:
            env.simulation.saved_mass = None  # evaluated again in the backward pass
        env.reset(seed=0)
        envs[name] = env
    generator = torch.Generator().manual_seed(0)
    times: dict[str, list[float]] = {name: [] for name in envs}
    for env in envs.values():
        window_seconds(env, True, generator, args.window)  # warm-up: graphs captured here
    for _ in range(args.windows):
        for name, env in envs.items():
            times[name].append(window_seconds(env, True, generator, args.window))
    rates = {name: args.window * args.num_envs / statistics.median(t) for name, t in times.items()}
    first = next(iter(rates.values()))
    print(f"DiffRLAnt, {args.num_envs} envs, {args.window}-step windows, forward+backward, "
          f"one thread, medians of {args.windows}\n")  # fmt: skip
    print("| variant | env-steps/s | ratio |\n|---|---:|---:|")
    for name, rate in rates.items():
        print(f"| {name} | {rate:,.0f} | {rate / first:.2f} |")


if __name__ == "__main__":
    main()
