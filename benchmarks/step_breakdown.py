"""Where an eager pathgrad update spends its time, per env step, next to a minimal loop.

Trains Pendulum with the eager trainer (32-step windows, MLP
64x64, Adam, one thread) and times its parts by wrapping them with
``time.perf_counter`` (a few microseconds of timer per call are included):
the policy (noise and network), the env step (reset draws and the transition),
the collector's other per-step work, the loss and backward, the optimizer
step, and the trainer's bookkeeping per update. The minimal plain-PyTorch loop
of ``side_by_side.py`` is timed on the same settings for the total to compare.

Run: ``python benchmarks/step_breakdown.py [--num-envs 64] [--updates 100]``
"""

from __future__ import annotations

import argparse
import collections
import time
from collections.abc import Callable
from typing import Any

import overhead
import side_by_side
import torch


def timed(owner: Any, name: str, label: str, totals: collections.Counter) -> None:
    """Replace ``owner.name`` by a wrapper adding its seconds to ``totals[label]``."""
    function: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        result = function(*args, **kwargs)
        totals[label] += time.perf_counter() - started
        return result

    setattr(owner, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--updates", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)
    overhead.ENV_NAME = "pendulum"
    window = side_by_side.WINDOW
    trainer = overhead.make_trainer(args.num_envs, window, seed=0)
    trainer.train(total_updates=3)  # warm-up
    totals: collections.Counter = collections.Counter()
    timed(trainer.policy, "get_differentiable_action", "policy: noise, network, sample", totals)
    timed(trainer.env, "draw_reset_states", "env: reset-state draws", totals)
    timed(trainer.env, "_advance", "env: dynamics, reward, auto-reset, observation", totals)
    timed(trainer.collector, "collect", "forward total (collector)", totals)
    timed(trainer.algorithm, "accumulate_segment", "loss and backward", totals)
    timed(trainer.algorithm, "finish_update", "clip and Adam step", totals)
    timed(trainer, "_record_update", "trainer bookkeeping per update", totals)
    started = time.perf_counter()
    trainer.train(total_updates=trainer.num_updates + args.updates)
    elapsed = time.perf_counter() - started
    steps = args.updates * window  # vector steps
    minimal = side_by_side.minimal_loop(args.num_envs, window, args.updates, 0)
    forward = totals.pop("forward total (collector)")
    inside = sum(totals[label] for label in totals if label.startswith(("policy", "env")))
    totals["collector: per-step glue (transition record, hooks, callbacks)"] = forward - inside
    totals["other (trainer loop, detach, normalizer, episode flush)"] = (
        elapsed
        - forward
        - sum(
            value
            for label, value in totals.items()
            if not label.startswith(("policy", "env", "coll"))
        )
    )
    print(
        f"Pendulum, {args.num_envs} envs, {window}-step windows, "
        f"{args.updates} updates, one thread; microseconds per vector step (all envs)"
    )
    print()
    print("| part | us per step | share |")
    print("|---|---:|---:|")
    for label, seconds in totals.items():
        print(f"| {label} | {1e6 * seconds / steps:.0f} | {seconds / elapsed:.0%} |")
    print(f"| **pathgrad eager, total** | **{1e6 * elapsed / steps:.0f}** | 100% |")
    print(f"| minimal PyTorch loop, total | {1e6 * minimal / steps:.0f} | - |")
    print()
    print(f"pathgrad eager / minimal loop speed: {minimal / elapsed:.2f}x")


if __name__ == "__main__":
    main()
