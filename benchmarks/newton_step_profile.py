"""Where one step of a Newton robot spends its time, forward and backward.

Two measurements of a window of ``--window`` env steps at ``--num-envs`` envs
(DiffRLAnt by default), random actions from the state after 30 random steps:

- captured (pathgrad's default): milliseconds per env step of the forward pass
  without a graph, with a graph, and of its backward pass;
- uncaptured: every Warp kernel launched from Python and timed, grouped into
  phases (collision detection, contact forces, forward kinematics, inverse
  dynamics, the mass matrix and its Cholesky factor, the rest of the
  Featherstone step; forward launches include the backward pass's recompute)
  and listed kernel by kernel. Launching each
  kernel from Python costs more than replaying a graph, so the uncaptured total
  is larger; the shares show what the work is.

Run: ``OMP_NUM_THREADS=1 python benchmarks/newton_step_profile.py [--env NewtonAnt]``
(one thread; say so beside any figure).
"""

from __future__ import annotations

import argparse
import collections
import time
from typing import Any

import torch
import warp as wp

from pathgrad.envs.newton import DiffRLAnt, NewtonAnt
from pathgrad.envs.newton.robots.gymnasium_pusher import GymnasiumPusher

ENVS = {"DiffRLAnt": DiffRLAnt, "NewtonAnt": NewtonAnt, "GymnasiumPusher": GymnasiumPusher}
# Phases by kernel name (Newton 1.8 / Warp 1.19); the first match wins.
PHASES = (
    ("collision detection", ("collide", "broad", "narrow", "sdf", "shape_aabb", "verify_")),
    ("contact forces", ("body_contact", "contact_kinematics", "contact_wrench")),
    ("forward kinematics", ("eval_rigid_fk", "eval_fk", "eval_articulation_fk")),
    ("inverse dynamics (eval_rigid_id)", ("eval_rigid_id",)),
    ("mass matrix + Cholesky", ("mass", "crba", "cholesky", "dense", "gemm", "tile")),
    ("zeroing", ("zero", "memset", "clear")),
)


def _phase(kernel: str) -> str:
    lowered = kernel.lower()
    for name, fragments in PHASES:
        if any(fragment in lowered for fragment in fragments):
            return name
    return "rest of the step"


class KernelTimer:
    """Times every ``wp.launch`` (forward and adjoint) while installed."""

    def __init__(self) -> None:
        self.seconds: collections.Counter[tuple[str, bool]] = collections.Counter()
        self.calls: collections.Counter[tuple[str, bool]] = collections.Counter()
        self._launch = wp.launch

    def __enter__(self) -> KernelTimer:
        def timed(kernel: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            result = self._launch(kernel, *args, **kwargs)
            key = (getattr(kernel, "key", str(kernel)), bool(kwargs.get("adjoint", False)))
            self.seconds[key] += time.perf_counter() - start
            self.calls[key] += 1
            return result

        wp.launch = timed
        return self

    def __exit__(self, *exc: object) -> None:
        wp.launch = self._launch


def _window(env: Any, actions: torch.Tensor, backward: bool) -> tuple[float, float]:
    """Seconds of the window's forward and backward (0 without a graph)."""
    action = actions[0].clone().requires_grad_(backward)
    start = time.perf_counter()
    total = torch.zeros(())
    for t in range(actions.shape[0]):
        step_action = action if t == 0 else actions[t]
        with torch.set_grad_enabled(backward):
            _, reward, *_ = env.step(step_action)
        total = total + reward.sum()
    forward = time.perf_counter() - start
    if not backward:
        return forward, 0.0
    start = time.perf_counter()
    total.backward()
    return forward, time.perf_counter() - start


def _fresh(name: str, num_envs: int, capture: bool) -> Any:
    env = ENVS[name](num_envs, seed=0, capture=capture)
    env.reset(seed=0)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(30):
            env.step(2.0 * torch.rand(num_envs, env.action_dim, generator=generator) - 1.0)
    env.detach_state()
    return env


def captured(name: str, num_envs: int, window: int, repeats: int) -> dict[str, float]:
    env = _fresh(name, num_envs, capture=True)
    generator = torch.Generator().manual_seed(2)
    actions = 2.0 * torch.rand(window, num_envs, env.action_dim, generator=generator) - 1.0
    _window(env, actions, backward=True)  # capture the graphs
    env.detach_state()
    nograph, forward, backward = [], [], []
    for _ in range(repeats):
        nograph.append(_window(env, actions, backward=False)[0])
        env.detach_state()
        f, b = _window(env, actions, backward=True)
        forward.append(f)
        backward.append(b)
        env.detach_state()

    def per_step(values: list[float]) -> float:
        return 1e3 * sorted(values)[len(values) // 2] / window

    return {
        "forward, no graph": per_step(nograph),
        "forward, graph kept": per_step(forward),
        "backward": per_step(backward),
    }


def uncaptured(name: str, num_envs: int, window: int) -> tuple[KernelTimer, float, float]:
    env = _fresh(name, num_envs, capture=False)
    generator = torch.Generator().manual_seed(2)
    actions = 2.0 * torch.rand(window, num_envs, env.action_dim, generator=generator) - 1.0
    _window(env, actions, backward=True)  # build the kernels
    env.detach_state()
    with KernelTimer() as timer:
        forward, backward = _window(env, actions, backward=True)
    return timer, forward, backward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=sorted(ENVS), default="DiffRLAnt")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kernels", type=int, default=15, help="kernels listed (slowest first)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{args.env}, {args.num_envs} envs, {args.window}-step window, one thread, "
          f"warp {wp.__version__}")  # fmt: skip
    print()
    print("| captured graphs | ms per env step |")
    print("|---|---:|")
    for label, value in captured(args.env, args.num_envs, args.window, args.repeats).items():
        print(f"| {label} | {value:.2f} |")
    timer, forward, backward = uncaptured(args.env, args.num_envs, args.window)
    kernels = sum(timer.seconds.values())
    print()
    print(f"Uncaptured: forward {1e3 * forward / args.window:.2f} ms and backward "
          f"{1e3 * backward / args.window:.2f} ms per env step, of which Warp kernels "
          f"{1e3 * kernels / args.window:.2f} ms")  # fmt: skip
    print()
    print("| phase | forward ms/step | adjoint ms/step | share of kernel time |")
    print("|---|---:|---:|---:|")
    phases: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for (kernel, adjoint), seconds in timer.seconds.items():
        phases[_phase(kernel)][int(adjoint)] += seconds
    for phase, (fwd, adj) in sorted(phases.items(), key=lambda item: -sum(item[1])):
        share = (fwd + adj) / kernels
        print(f"| {phase} | {1e3 * fwd / args.window:.2f} | {1e3 * adj / args.window:.2f} "
              f"| {share:.0%} |")  # fmt: skip
    print()
    print("| kernel | pass | launches per step | ms per step |")
    print("|---|---|---:|---:|")
    for (kernel, adjoint), seconds in timer.seconds.most_common(args.kernels):
        calls = timer.calls[(kernel, adjoint)] / args.window
        kind = "adjoint" if adjoint else "forward"
        print(f"| {kernel} | {kind} | {calls:.0f} | {1e3 * seconds / args.window:.2f} |")


if __name__ == "__main__":
    main()
