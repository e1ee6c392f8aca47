"""Gradients of NewtonAnt through ground contact: per step against central
differences, and their growth over a window.

    python benchmarks/newton_ant_gradients.py [--num-envs 64] [--window 32] [--quick]

1. Per step (an ant standing on the ground, several instants): relative error
   of the analytic Jacobian of a random projection of (reward, observation)
   with respect to the actions and to the joint velocities, against central
   differences (step 1e-3), with the env's contact model and with contact
   damping off (a continuous contact force).
2. Growth: the norm of d(sum of rewards over T steps)/d(first action) per env,
   median and max over envs, for T = 1, 2, 4, ... up to the window, from
   states reached by a random policy, with the tuned friction slope and a stiff
   one (300); and against central differences for one env, which stop being a
   reference once a contact switches inside the window. One thread.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from pathgrad.envs.newton import NewtonAnt  # noqa: E402


def settled(num_envs: int, steps: int, **kwargs) -> tuple[NewtonAnt, dict]:
    env = NewtonAnt(num_envs, seed=0, **kwargs)
    env.reset(seed=0)
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        env.step(torch.tanh(0.5 * torch.randn(num_envs, 8, generator=generator)))
    return env, {key: value.detach().clone() for key, value in env.state.items()}


def per_step_errors(steps: int, contact_model: dict | None) -> tuple[float, float]:
    """Relative Jacobian errors (actions, joint velocities) of one step at instant ``steps``."""
    env, state = settled(1, steps, contact_model=contact_model)
    generator = torch.Generator().manual_seed(steps)
    action = 0.3 * torch.randn(1, 8, generator=generator)
    weights = torch.randn(38, generator=generator)

    def output(joint_qd, act):
        env.state = {**state, "joint_qd": joint_qd}
        env.elapsed_steps = torch.zeros(1, dtype=torch.long)
        observation, reward, *_ = env.step(act)
        return (torch.cat([reward, observation[0]]) * weights).sum()

    inputs = [state["joint_qd"].clone(), action.clone()]
    leaves = [x.clone().requires_grad_() for x in inputs]
    analytic = torch.autograd.grad(output(*leaves), leaves)
    errors = []
    for index in (1, 0):
        numeric = []
        for column in range(inputs[index].numel()):
            plus, minus = [x.clone() for x in inputs], [x.clone() for x in inputs]
            plus[index].view(-1)[column] += 1e-3
            minus[index].view(-1)[column] -= 1e-3
            with torch.no_grad():
                numeric.append(float(output(*plus) - output(*minus)) / 2e-3)
        numeric = torch.tensor(numeric)
        got = analytic[index].view(-1)
        errors.append(float(torch.linalg.norm(got - numeric) / torch.linalg.norm(numeric)))
    return errors[0], errors[1]


def window_returns(env: NewtonAnt, state: dict, first: torch.Tensor, actions: torch.Tensor):
    """Sum of rewards after each step of a window that starts with action ``first``."""
    env.state = dict(state)
    env.elapsed_steps = torch.zeros(env.num_envs, dtype=torch.long)
    total, sums = 0.0, []
    for step in range(actions.shape[0]):
        _, reward, *_ = env.step(first if step == 0 else actions[step])
        total = total + reward
        sums.append(total)
    return sums


def growth(num_envs: int, window: int, contact_model: dict | None) -> list[tuple]:
    env, state = settled(num_envs, 60, contact_model=contact_model)
    generator = torch.Generator().manual_seed(2)
    actions = torch.tanh(0.5 * torch.randn(window, num_envs, 8, generator=generator))
    rows, horizon = [], 1
    while horizon <= window:
        first = actions[0].clone().requires_grad_()
        sums = window_returns(env, state, first, actions[:horizon])
        (gradient,) = torch.autograd.grad(sums[-1].sum(), first)
        norms = torch.linalg.vector_norm(gradient, dim=-1)
        finite = norms[torch.isfinite(norms)]
        median = float(finite.median()) if finite.numel() else float("nan")
        rows.append((horizon, median, float(norms.max())))
        horizon *= 2
    return rows


def chain_errors(window: int, contact_model: dict | None) -> list[tuple[int, float]]:
    """Relative error of d(sum of T rewards)/d(first action) against central differences."""
    env, state = settled(1, 60, contact_model=contact_model)
    generator = torch.Generator().manual_seed(3)
    actions = torch.tanh(0.5 * torch.randn(window, 1, 8, generator=generator))
    rows, horizon = [], 1
    while horizon <= window:
        first = actions[0].clone().requires_grad_()
        (analytic,) = torch.autograd.grad(
            window_returns(env, state, first, actions[:horizon])[-1].sum(), first
        )
        numeric = torch.zeros(8)
        for column in range(8):
            plus, minus = actions[0].clone(), actions[0].clone()
            plus[0, column] += 1e-3
            minus[0, column] -= 1e-3
            with torch.no_grad():
                upper = window_returns(env, state, plus, actions[:horizon])[-1].sum()
                lower = window_returns(env, state, minus, actions[:horizon])[-1].sum()
            numeric[column] = float(upper - lower) / 2e-3
        error = torch.linalg.norm(analytic.view(-1) - numeric) / torch.linalg.norm(numeric)
        rows.append((horizon, float(error)))
        horizon *= 2
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--window", type=int, default=32)
    parser.add_argument("--instants", type=int, default=8, help="instants of the per-step check")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (tests)")
    args = parser.parse_args()
    if args.quick:
        args.num_envs, args.window, args.instants = 2, 2, 1
    torch.set_num_threads(1)

    print("per step, relative Jacobian error against central differences (step 1e-3)")
    print("| contact model | actions: median (max) | joint velocities: median (max) |")
    print("|---|---:|---:|")
    for label, model in (("tuned (damping 30)", None), ("damping off", {"contact_kd": 0.0})):
        errors = [per_step_errors(60 + k, model) for k in range(args.instants)]
        actions, velocities = zip(*errors, strict=True)
        print(
            f"| {label} | {statistics.median(actions):.2g} ({max(actions):.2g}) "
            f"| {statistics.median(velocities):.2g} ({max(velocities):.2g}) |"
        )

    print(f"\ngrowth over a window, {args.num_envs} envs: |d(sum of T rewards)/d a_0|")
    print("| T | tuned: median | tuned: max | friction slope 300: median | max |")
    print("|---:|---:|---:|---:|---:|")
    tuned = growth(args.num_envs, args.window, None)
    stiff = growth(args.num_envs, args.window, {"contact_kf": 300.0})
    for (horizon, median, peak), (_, stiff_median, stiff_peak) in zip(tuned, stiff, strict=True):
        print(f"| {horizon} | {median:.3g} | {peak:.3g} | {stiff_median:.3g} | {stiff_peak:.3g} |")

    print("\none env, d(sum of T rewards)/d a_0 against central differences (step 1e-3)")
    print("| T | tuned: relative error | damping off: relative error |")
    print("|---:|---:|---:|")
    tuned_chain = chain_errors(args.window, None)
    smooth_chain = chain_errors(args.window, {"contact_kd": 0.0})
    for (horizon, error), (_, smooth_error) in zip(tuned_chain, smooth_chain, strict=True):
        print(f"| {horizon} | {error:.2g} | {smooth_error:.2g} |")


if __name__ == "__main__":
    main()
