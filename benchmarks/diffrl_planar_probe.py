"""DiffRLHopper, DiffRLHalfCheetah and DiffRLHumanoid: window-gradient growth and throughput.

Sections (both by default, or those named):

- ``--gradients``: norm of d(window return)/d(first action) per env, for windows of
  1, 4, 16 and 32 steps from the state after 30 random steps, 16 envs (median and max
  over envs). ``--contact-kd`` repeats it with another Newton contact damping.
- ``--speed``: env-steps/s of a 32-step window (the configs' ``segment_length``) at the
  configs' ``num_envs`` (Hopper 256, HalfCheetah and Humanoid 64), forward (no graph) and
  forward + backward.

Run: ``OMP_NUM_THREADS=1 python benchmarks/diffrl_planar_probe.py [--env DiffRLHopper]``
(every env by default).
"""

from __future__ import annotations

import argparse
import time

import torch

from pathgrad.envs.newton import DiffRLHalfCheetah, DiffRLHopper, DiffRLHumanoid

ENVS = {
    "DiffRLHopper": (DiffRLHopper, 256),
    "DiffRLHalfCheetah": (DiffRLHalfCheetah, 64),
    "DiffRLHumanoid": (DiffRLHumanoid, 64),
}
WINDOWS = (1, 4, 16, 32)


def _make(name: str, num_envs: int, **kwargs):
    env = ENVS[name][0](num_envs, seed=0, **kwargs)
    env.reset(seed=0)
    return env


def _random_actions(steps: int, num_envs: int, dim: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return 2.0 * torch.rand(steps, num_envs, dim, generator=generator) - 1.0


def _snapshot(env):
    state = {key: value.detach().clone() for key, value in env.state.items()}
    return state, env.elapsed_steps.clone(), env.generator.get_state()


def _restore(env, snapshot) -> None:
    state, elapsed, generator = snapshot
    env.state = {key: value.clone() for key, value in state.items()}
    env.elapsed_steps = elapsed.clone()
    env.generator.set_state(generator)


def window_gradients(name: str, num_envs: int = 16, **kwargs) -> dict[int, tuple[float, float]]:
    """Median and max over envs of |d(window return)/d(first action)| per window length."""
    env = _make(name, num_envs, **kwargs)
    with torch.no_grad():
        for action in _random_actions(30, num_envs, env.action_dim, seed=1):
            env.step(action)
    start = _snapshot(env)
    later = _random_actions(max(WINDOWS), num_envs, env.action_dim, seed=2)
    result = {}
    for window in WINDOWS:
        _restore(env, start)
        first = later[0].clone().requires_grad_()
        total = torch.zeros(())
        for step in range(window):
            total = total + env.step(first if step == 0 else later[step])[1].sum()
        (grad,) = torch.autograd.grad(total, first)
        norms = torch.linalg.vector_norm(grad, dim=-1)
        result[window] = (float(norms.median()), float(norms.max()))
    return result


def speed(name: str, window: int = 32, repeats: int = 2) -> tuple[float, float]:
    """Env-steps/s of forward (no autograd graph) and of forward + backward windows."""
    num_envs = ENVS[name][1]
    env = _make(name, num_envs)
    actions = _random_actions(window, num_envs, env.action_dim, seed=3)
    start = _snapshot(env)

    def forward() -> None:
        _restore(env, start)
        with torch.no_grad():
            for action in actions:
                env.step(action)

    def forward_backward() -> None:
        _restore(env, start)
        leaf = actions.clone().requires_grad_()
        total = torch.zeros(())
        for action in leaf:
            total = total + env.step(action)[1].sum()
        total.backward()

    rates = []
    for run in (forward, forward_backward):
        run()  # warm-up: graph capture
        began = time.perf_counter()
        for _ in range(repeats):
            run()
        rates.append(repeats * window * num_envs / (time.perf_counter() - began))
    return rates[0], rates[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", choices=list(ENVS), action="append", help="default: all")
    parser.add_argument("--gradients", action="store_true", help="run the gradients section")
    parser.add_argument("--speed", action="store_true", help="run the speed section")
    parser.add_argument("--contact-kd", type=float, help="also the gradients at this contact kd")
    args = parser.parse_args()
    names = args.env or list(ENVS)
    both = not (args.gradients or args.speed)
    torch.set_num_threads(1)
    if args.gradients or both:
        variants = [("DiffRL's kd", {})]
        if args.contact_kd is not None:
            variants.append(
                (f"kd {args.contact_kd:g}", {"contact_model": {"contact_kd": args.contact_kd}})
            )
        print("|d window return / d first action| per env, 16 envs after 30 random steps")
        for name in names:
            for label, kwargs in variants:
                result = window_gradients(name, **kwargs)
                cells = "  ".join(f"{w}: {m:.3g} / {x:.3g}" for w, (m, x) in result.items())
                print(f"  {name:>17} {label:>12}  window: median / max  {cells}")
    if args.speed or both:
        print("env-steps/s of a 32-step window at the configs' num_envs, one thread")
        for name in names:
            forward, both_ways = speed(name)
            print(f"  {name:>17} ({ENVS[name][1]} envs): forward {forward:.0f}, "
                  f"forward+backward {both_ways:.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
