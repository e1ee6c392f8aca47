"""Env throughput: env-steps per second of every registered env.

Two modes per env and batch size, each over windows of 32 steps (``--window``) with random
actions: ``forward`` (no graph) and ``forward+backward`` (actions require
grad, the window's summed reward is backpropagated, then the state is
detached). Prints a Markdown table of medians over repeated windows.

Run: ``python benchmarks/envs.py [--num-envs 64 1024] [--windows 20] [--window 32] [--quick]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import pathgrad
from pathgrad.env import get_registered_learning_env_names
from pathgrad.trainer.threads import num_threads_argument, per_batch_size, use_num_threads

WINDOW = 32


def window_seconds(env, backward: bool, generator: torch.Generator, window: int) -> float:
    """Seconds for one window of ``window`` steps."""
    shape = (window, env.num_envs, int(env.single_action_space.shape[-1]))
    actions = torch.rand(shape, generator=generator, dtype=env.dtype) * 2 - 1
    start = time.perf_counter()
    if backward:
        actions.requires_grad_(True)
        total = torch.zeros((), dtype=env.dtype)
        for step_action in actions:
            total = total + env.step(step_action)[1].sum()
        total.backward()
        env.detach_state()
    else:
        with torch.no_grad():
            for step_action in actions:
                env.step(step_action)
    return time.perf_counter() - start


def measure(name: str, num_envs: int, windows: int, window: int) -> tuple[float, float]:
    """Median env-steps per second (forward, forward+backward)."""
    env = pathgrad.build_learning_env(name, num_envs=num_envs, device="cpu", seed=0)
    env.reset(seed=0)
    generator = torch.Generator().manual_seed(0)
    rates = []
    for backward in (False, True):
        window_seconds(env, backward, generator, window)  # warm-up
        times = [window_seconds(env, backward, generator, window) for _ in range(windows)]
        rates.append(window * num_envs / statistics.median(times))
    return rates[0], rates[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--windows", type=int, default=20, help="windows per measurement")
    parser.add_argument("--envs", nargs="+", default=None, help="env names (default: all)")
    parser.add_argument(
        "--module", action="append", default=[], help="import a module that registers envs"
    )
    parser.add_argument(
        "--num-threads", default="auto", type=num_threads_argument, help="torch threads: N or auto"
    )
    parser.add_argument("--window", type=int, default=WINDOW, help="steps per window")
    parser.add_argument(
        "--quick", action="store_true", help="one small batch, one window of 2 steps"
    )
    args = parser.parse_args()
    setting = args.num_threads
    if args.quick:
        args.num_envs, args.windows, args.window = [8], 1, 2
    pathgrad.env.import_env_modules(args.module)  # envs of installed plugins are known anyway
    names = args.envs or get_registered_learning_env_names()
    print(
        f"torch {torch.__version__}, {per_batch_size(setting, args.num_envs)}, float32, CPU; "
        f"median over {args.windows} windows of {args.window} steps; env-steps/s"
    )
    print()
    print("| env | envs | forward | forward+backward |")
    print("|---|---:|---:|---:|")
    for name in names:
        for num_envs in args.num_envs:
            use_num_threads(setting, num_envs)
            forward, backward = measure(name, num_envs, args.windows, args.window)
            print(f"| {name} | {num_envs} | {forward:,.0f} | {backward:,.0f} |")


if __name__ == "__main__":
    main()
