"""Forward+backward throughput of ``DiffRLAnt`` as its contact handling changed.

Variants of the same Ant (same model, dynamics and gradients), measured in
alternation on windows of random actions so that the machine's drift hits all
alike:

- self-collisions and Newton's contact capacity, the contacts and the mass
  matrix recomputed in the backward pass (the Ant as issue 25 found it);
- ground-only contacts, 2 per shape pair (dflex's contact set);
- each forward substep's contacts kept for the backward pass;
- and the mass matrix kept too;
- and each substep's intermediates kept, so the backward pass recomputes
  nothing;
- and the mass matrix's adjoint written out instead of Warp's tile adjoint;
- and inverse dynamics differentiated from the lighter equivalent kernel
  (:mod:`pathgrad.envs.newton.engine.rigid_id_adjoint`; today's).

Prints a Markdown table of median env-steps/s (forward without a graph
excluded: the window is forward+backward, as SHAC trains) and the ratio to the
first row.

``--shac UPDATES`` times SHAC training instead (``configs/diffrl_ant_shac.yaml``,
each variant trained for UPDATES updates per round, the rounds alternating).

Run: ``OMP_NUM_THREADS=1 python benchmarks/ant_speed.py [--num-envs 64] [--windows 7]
[--shac 8 --rounds 2]`` (one thread; say so beside any figure).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import pathgrad
import pathgrad.api
from pathgrad.env import register_learning_env
from pathgrad.envs.newton import DiffRLAnt

sys.path.insert(0, str(Path(__file__).parent))
from envs import window_seconds  # noqa: E402 - the window timing of benchmarks/envs.py

# (class attributes, mass matrix kept, mass matrix's adjoint written out, inverse
# dynamics' adjoint from the light kernel) of each variant
RECOMPUTE = {"keep_intermediates": False}
VARIANTS = {
    "self-collisions, Newton's capacity, recomputed": (
        {"self_collisions": True, "contacts_per_shape_pair": None, "keep_contacts": False,
         **RECOMPUTE},
        False, False, False,
    ),
    "ground only, 2 per pair, recomputed": (
        {"keep_contacts": False, **RECOMPUTE}, False, False, False,
    ),
    "ground only, 2 per pair, contacts kept": (RECOMPUTE, False, False, False),
    "ground only, 2 per pair, contacts and mass matrix kept": (RECOMPUTE, True, False, False),
    "ground only, 2 per pair, every intermediate kept, no recompute": ({}, True, False, False),
    "and the mass matrix's adjoint written out": ({}, True, True, False),
    "and inverse dynamics' adjoint from the light kernel (now)": ({}, True, True, True),
}  # fmt: skip


def variant(
    attributes: dict[str, Any], keep_mass_matrix: bool, written_out: bool, light_rigid_id: bool
) -> type:
    """``DiffRLAnt`` with ``attributes``, its mass matrix kept or evaluated again, its
    adjoint Warp's or written out (:mod:`pathgrad.envs.newton.engine.inertia_adjoint`),
    inverse dynamics' adjoint Warp's or the light kernel's
    (:mod:`pathgrad.envs.newton.engine.rigid_id_adjoint`).
    """

    class Variant(DiffRLAnt):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if not keep_mass_matrix:
                self.simulation.saved_mass = None  # evaluated again in the backward pass
            self.simulation.written_out_inertia_adjoint = written_out
            self.simulation.light_rigid_id_adjoint = light_rigid_id

    for key, value in attributes.items():
        setattr(Variant, key, value)
    return Variant


def window_rates(args: argparse.Namespace) -> dict[str, float]:
    """Median env-steps/s of forward+backward windows, variants in alternation."""
    envs = {}
    for name, options in VARIANTS.items():
        envs[name] = variant(*options)(args.num_envs, seed=0)
        envs[name].reset(seed=0)
    generator = torch.Generator().manual_seed(0)
    times: dict[str, list[float]] = {name: [] for name in envs}
    for env in envs.values():
        window_seconds(env, True, generator, args.window)  # warm-up: graphs captured here
    for _ in range(args.windows):
        for name, env in envs.items():
            times[name].append(window_seconds(env, True, generator, args.window))
    return {name: args.window * args.num_envs / statistics.median(t) for name, t in times.items()}


def shac_rates(args: argparse.Namespace) -> dict[str, float]:
    """Median env-steps/s of SHAC updates (configs/diffrl_ant_shac.yaml), variants in turn."""
    config = Path(pathgrad.__file__).parent / "configs" / "diffrl_ant_shac.yaml"
    seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    steps_per_update = args.num_envs * 32
    with tempfile.TemporaryDirectory() as runs:
        for round_ in range(args.rounds):
            for index, (name, options) in enumerate(VARIANTS.items()):
                env_name = f"DiffRLAntSpeedVariant{index}"
                if round_ == 0:
                    register_learning_env(env_name)(variant(*options))
                times: list[float] = []

                def record(kind: str, entry: dict[str, Any], times: list[float] = times) -> None:
                    if kind == "train":
                        times.append(time.perf_counter())

                pathgrad.api.train(
                    config,
                    [f"env.name={env_name}", f"env.num_envs={args.num_envs}",
                     f"trainer.total_updates={args.shac}", "trainer.num_threads=1",
                     "trainer.save_frequency_updates=1000", "eval.frequency_steps=0",
                     "eval.final=false", "logging.tensorboard=false",
                     f"logging.runs_dir={runs}"],
                    callbacks=[record],
                )  # fmt: skip
                seconds[name] += [b - a for a, b in zip(times[1:], times[2:], strict=False)]
    return {name: steps_per_update / statistics.median(t) for name, t in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--window", type=int, default=16, help="env steps per window")
    parser.add_argument("--windows", type=int, default=7, help="windows per variant")
    parser.add_argument(
        "--shac", type=int, default=0, metavar="UPDATES",
        help="instead, time SHAC training: UPDATES updates per variant and round",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=2, help="rounds of SHAC runs")
    parser.add_argument(
        "--variants", type=int, nargs="+", metavar="I",
        help="measure only these rows (0-based; the first is the ratios' base)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.variants:
        chosen = list(VARIANTS.items())
        VARIANTS.clear()
        VARIANTS.update(chosen[i] for i in args.variants)
    torch.set_num_threads(1)
    if args.shac:
        rates = shac_rates(args)
        what = (f"SHAC training (configs/diffrl_ant_shac.yaml), median of updates 3-"
                f"{args.shac} in {args.rounds} rounds")  # fmt: skip
    else:
        rates = window_rates(args)
        what = f"{args.window}-step windows, forward+backward, medians of {args.windows}"
    first = next(iter(rates.values()))
    print(f"DiffRLAnt, {args.num_envs} envs, {what}, one thread\n")
    print("| variant | env-steps/s | ratio |\n|---|---:|---:|")
    for name, rate in rates.items():
        print(f"| {name} | {rate:,.0f} | {rate / first:.2f} |")


if __name__ == "__main__":
    main()
