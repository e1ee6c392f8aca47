"""Newton bridge throughput against the torch cart-pole, captured graphs against launches.

Contenders, per batch size: the torch ``CartPoleSwingUp``, ``NewtonCartPoleSwingUp``
with captured Warp graphs (the default) and with every kernel launched from Python
(``capture=False``), optionally ``NewtonAnt`` both ways. Each measures 32-step
windows of random actions, ``forward`` (no graph) and ``forward+backward`` (the
window's summed reward backpropagated into the actions); windows alternate between
the contenders so that the machine's drift hits all alike. Prints a Markdown table
of median env-steps/s and the ratio of forward+backward to the torch cart-pole's.

Run: ``python benchmarks/newton_bridge.py [--num-envs 16 64 256] [--windows 10] [--ant]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

import pathgrad
from pathgrad.envs.newton import NewtonAnt, NewtonCartPoleSwingUp
from pathgrad.trainer.threads import num_threads_argument, per_batch_size, use_num_threads

sys.path.insert(0, str(Path(__file__).parent))
from envs import WINDOW, window_seconds  # noqa: E402 - the window of benchmarks/envs.py


def contenders(num_envs: int, ant: bool) -> dict[str, object]:
    envs = {
        "CartPoleSwingUp (torch)": pathgrad.build_learning_env(
            "CartPoleSwingUp", num_envs=num_envs, device="cpu", seed=0
        ),
        "NewtonCartPoleSwingUp, captured": NewtonCartPoleSwingUp(num_envs, seed=0),
        "NewtonCartPoleSwingUp, launched": NewtonCartPoleSwingUp(num_envs, seed=0, capture=False),
    }
    if ant:
        envs["NewtonAnt, captured"] = NewtonAnt(num_envs, seed=0)
        envs["NewtonAnt, launched"] = NewtonAnt(num_envs, seed=0, capture=False)
    for env in envs.values():
        env.reset(seed=0)
    return envs


def measure(num_envs: int, windows: int, ant: bool) -> dict[str, tuple[float, float]]:
    """Median env-steps/s (forward, forward+backward) of every contender."""
    envs = contenders(num_envs, ant)
    generator = torch.Generator().manual_seed(0)
    times: dict[tuple[str, bool], list[float]] = {}
    for backward in (False, True):
        for env in envs.values():
            window_seconds(env, backward, generator, WINDOW)  # warm-up (graphs captured here)
        for _ in range(windows):
            for name, env in envs.items():
                seconds = window_seconds(env, backward, generator, WINDOW)
                times.setdefault((name, backward), []).append(seconds)
    return {
        name: tuple(WINDOW * num_envs / statistics.median(times[name, b]) for b in (False, True))
        for name in envs
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--windows", type=int, default=10, help="windows per measurement")
    parser.add_argument("--ant", action="store_true", help="also NewtonAnt (slow)")
    parser.add_argument(
        "--num-threads", default="auto", type=num_threads_argument, help="torch threads: N or auto"
    )
    parser.add_argument("--quick", action="store_true", help="one small batch, two windows")
    args = parser.parse_args()
    setting = args.num_threads
    if args.quick:
        args.num_envs, args.windows = [4], 2
    print(
        f"torch {torch.__version__}, {per_batch_size(setting, args.num_envs)}, float32, CPU; "
        f"median over {args.windows} alternating windows of {WINDOW} steps; env-steps/s"
    )
    print()
    print("| env | envs | forward | forward+backward | fwd+bwd / torch cart-pole |")
    print("|---|---:|---:|---:|---:|")
    for num_envs in args.num_envs:
        use_num_threads(setting, num_envs)
        rates = measure(num_envs, args.windows, args.ant)
        reference = rates["CartPoleSwingUp (torch)"][1]
        for name, (forward, backward) in rates.items():
            print(
                f"| {name} | {num_envs} | {forward:,.0f} | {backward:,.0f} | "
                f"{backward / reference:.2f} |"
            )


if __name__ == "__main__":
    main()
