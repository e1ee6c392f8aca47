"""Trainer overhead: pathgrad's trainer against a minimal hand-written APG loop.

Both do the same updates on the same env and policy (PointMass, or Pendulum
with ``--env pendulum``; Gaussian MLP 64x64, Adam, gradient clipping, discount
restarted at done, state detached after each window), from the same seed. Runs
alternate between the contenders so that machine noise hits them alike; the
script prints the median env-steps per second of each and their ratio to the
hand-written (eager) loop, per batch size. ``--compile`` adds the trainer with
``torch_compile=True``: per chunk size (``--chunk-steps``) and per ``--compile-
scope`` (``update``: the whole update compiled; ``rollout``: policy and env
step fused in compiled chunks, loss and optimizer eager) one contender;
compilation happens before timing and its seconds are printed.
``--compare-threads 1 2`` times the hand-written loop at each thread count
instead (where intra-op threads start to pay: ``pathgrad.trainer.threads``).
``--algorithm shac sapo`` adds rows of those algorithms (their default critics
and critic passes; no hand-written loop, so their ratios are to the eager
trainer).

Run: ``python benchmarks/overhead.py [--num-envs 16 64 1024] [--window 32]
[--updates 60] [--repeats 7] [--env pendulum]
[--compile [--chunk-steps 8 ...] [--compile-scope update rollout]]
[--algorithm apg shac sapo] [--compare-threads 1 2] [--num-threads N|auto] [--quick]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import pathgrad
from pathgrad.trainer.threads import num_threads_argument, per_batch_size, use_num_threads

GAMMA = 0.99
LEARNING_RATE = 1e-3
MAX_GRAD_NORM = 1.0


ENVS = {"point_mass": "PointMass", "pendulum": "Pendulum"}
ENV_NAME = "point_mass"  # set by --env
ALGORITHM = "apg"  # set per row by --algorithm


def build(num_envs: int, seed: int):
    """Env and policy, identically seeded for both contenders."""
    import pathgrad.envs

    torch.manual_seed(seed)
    env = getattr(pathgrad.envs, ENVS[ENV_NAME])(num_envs, seed=seed)
    policy = pathgrad.GaussianMLPPolicy(env.observation_dim, env.action_dim, hidden_sizes=(64, 64))
    return env, policy


def hand_written_loop(num_envs: int, window: int, updates: int, seed: int) -> float:
    """Seconds for ``updates`` APG updates written directly in PyTorch."""
    env, policy = build(num_envs, seed)
    optimizer = torch.optim.Adam(policy.parameters(), lr=LEARNING_RATE)
    obs, _ = env.reset()
    start = time.perf_counter()
    for _ in range(updates):
        optimizer.zero_grad(set_to_none=True)
        discount = torch.ones(num_envs)
        returns = torch.zeros(num_envs)
        for _ in range(window):
            action = policy.get_differentiable_action(obs)["action"]
            obs, reward, terminated, truncated, _ = env.step(action)
            returns = returns + discount * reward
            discount = torch.where(
                terminated | truncated, torch.ones_like(discount), discount * GAMMA
            )
        (-returns.mean()).backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        obs = env.detach_state()
    return time.perf_counter() - start


def make_trainer(
    num_envs: int, window: int, seed: int, chunk_steps: int | None = None, scope: str = "update"
):
    """The pathgrad trainer doing the same updates."""
    from pathgrad.algo.registry import get_algorithm

    env, policy = build(num_envs, seed)
    factory, cfg_type = get_algorithm(ALGORITHM)
    optimizer = {"name": "adamw" if ALGORITHM == "sapo" else "adam", "learning_rate": LEARNING_RATE}
    cfg = cfg_type(gamma=GAMMA, max_grad_norm=MAX_GRAD_NORM, optimizer=optimizer)
    algorithm = factory(cfg, policy, env)
    cfg = pathgrad.DifferentiableTrainerCfg(
        segment_length=window,
        torch_compile=chunk_steps is not None,
        compile_chunk_steps=chunk_steps or 8,
        compile_scope=scope,
        num_threads=torch.get_num_threads(),  # the count the benchmark chose, for all
    )
    trainer = pathgrad.DifferentiableTrainer(cfg, env, policy, algorithm)
    trainer.collector.reset()
    return trainer


def pathgrad_trainer(num_envs: int, window: int, updates: int, seed: int) -> float:
    """Seconds for the same updates through ``DifferentiableTrainer``."""
    trainer = make_trainer(num_envs, window, seed)
    start = time.perf_counter()
    trainer.train(total_updates=updates)
    return time.perf_counter() - start


_COMPILED: dict[tuple[str, int, int, int, str], pathgrad.DifferentiableTrainer] = {}
COMPILE_SECONDS: dict[tuple[str, int, int, str], float] = {}


def pathgrad_compiled(chunk_steps: int, scope: str):
    """A contender: the same updates compiled (``scope``: the update, or rollout chunks).

    One trainer per batch size is compiled (two updates: forward and backward
    graphs, with and without a graph-connected input) before any timing, then
    keeps training run after run: compiling afresh for every run would
    measure the compiler.
    """

    def run(num_envs: int, window: int, updates: int, seed: int) -> float:
        key = (ALGORITHM, num_envs, window, chunk_steps, scope)
        if key not in _COMPILED:
            start = time.perf_counter()
            _COMPILED[key] = make_trainer(num_envs, window, seed, chunk_steps, scope)
            _COMPILED[key].train(total_updates=2)
            COMPILE_SECONDS[(ALGORITHM, num_envs, chunk_steps, scope)] = time.perf_counter() - start
        trainer = _COMPILED[key]
        start = time.perf_counter()
        trainer.train(total_updates=trainer.num_updates + updates)
        return time.perf_counter() - start

    return run


def with_threads(threads: int):
    """A contender: the hand-written loop with ``threads`` intra-op threads."""

    def run(num_envs: int, window: int, updates: int, seed: int) -> float:
        torch.set_num_threads(threads)
        return hand_written_loop(num_envs, window, updates, seed)

    return run


def median_rates(
    contenders: dict,
    num_envs: int,
    window: int,
    updates: int,
    repeats: int,
    seed: int,
    warm_up: list[str] | None = None,
):
    """Median env-steps/s per contender, runs alternating so machine noise hits all alike.

    One warm-up run first of each contender named in ``warm_up`` (default: all;
    allocator, thread pool, lazy imports, compiles).
    """
    steps = num_envs * window * updates
    for name in contenders if warm_up is None else warm_up:
        contenders[name](num_envs, window, 1, seed)
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, run in contenders.items():
            rates[name].append(steps / run(num_envs, window, updates, seed))
    return {name: statistics.median(values) for name, values in rates.items()}


def main() -> None:
    global ENV_NAME, ALGORITHM
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[16, 64, 1024])
    parser.add_argument("--env", default=ENV_NAME, choices=sorted(ENVS), help="the dynamics")
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--updates", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile", action="store_true", help="add the torch.compile path")
    parser.add_argument(
        "--chunk-steps", type=int, nargs="+", default=[8], help="compiled chunk sizes to time"
    )
    parser.add_argument(
        "--compile-scope",
        nargs="+",
        default=["update"],
        choices=["update", "rollout"],
        help="what --compile compiles: the whole update, or rollout chunks",
    )
    parser.add_argument(
        "--num-threads", default="auto", type=num_threads_argument, help="torch threads: N or auto"
    )
    parser.add_argument(
        "--compare-threads",
        type=int,
        nargs="+",
        help="instead: the hand-written loop at each of these thread counts (ratio to the first)",
    )
    parser.add_argument(
        "--algorithm",
        nargs="+",
        default=["apg"],
        choices=["apg", "shac", "sapo"],
        help="rows per algorithm (shac, sapo: no hand-written loop; ratios to the eager trainer)",
    )
    parser.add_argument("--quick", action="store_true", help="a few short runs (for tests)")
    args = parser.parse_args()
    ENV_NAME = args.env
    if args.quick:
        args.updates, args.repeats, args.num_envs = 3, 2, [16]
    setting = args.num_threads
    contenders = {"hand-written": hand_written_loop, "pathgrad": pathgrad_trainer}
    if args.compare_threads:
        contenders = {f"{n} threads": with_threads(n) for n in args.compare_threads}
    elif args.compile:
        for scope in args.compile_scope:
            for chunk_steps in args.chunk_steps:
                contenders[f"compiled {scope} (chunk {chunk_steps})"] = pathgrad_compiled(
                    chunk_steps, scope
                )
    threads = (
        f"threads {' vs '.join(map(str, args.compare_threads))}"
        if args.compare_threads
        else per_batch_size(setting, args.num_envs)
    )
    print(
        f"{ENVS[args.env]}, {args.window}-step windows, {args.updates} updates per run, median of "
        f"{args.repeats} alternating runs, torch {torch.__version__}, {threads}; "
        "env-steps/s (ratio to the first column)"
    )
    print()
    print("| algorithm | envs | " + " | ".join(contenders) + " |")
    print("|---|---:|" + "---:|" * len(contenders))
    for ALGORITHM in args.algorithm:
        row = contenders
        if ALGORITHM != "apg":  # the hand-written loop is APG's
            row = {name: run for name, run in contenders.items() if name != "hand-written"}
        for num_envs in args.num_envs:
            if not args.compare_threads:
                use_num_threads(setting, num_envs)
            medians = median_rates(
                row, num_envs, args.window, args.updates, args.repeats, args.seed
            )
            base = next(iter(medians.values()))
            cells = [
                f"{medians[name]:,.0f} ({medians[name] / base:.3f})" if name in medians else "-"
                for name in contenders
            ]
            print(f"| {ALGORITHM.upper()} | {num_envs} | " + " | ".join(cells) + " |")
    if COMPILE_SECONDS:
        print()
        for (algorithm, num_envs, chunk_steps, scope), seconds in COMPILE_SECONDS.items():
            label = f"{algorithm} {scope}, {num_envs} envs, chunk {chunk_steps}"
            print(f"compile {label}: {seconds:.1f} s")


if __name__ == "__main__":
    main()
