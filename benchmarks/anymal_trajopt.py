"""Can a window's gradient move ANYmal? Open-loop trajectory optimisation on AnymalVelocity.

From a standing pose (a reset, then 60 steps of zero actions), the actions of one window
of H steps (4 envs, command ``--command`` held) are optimised by Adam on the window's
return (``only_positive_rewards`` off, ``smooth_collisions`` on: the configs' task), with
no policy and no critic. Printed every few iterations: the window's return per env, the
mean forward speed over the window (m/s, body frame), the base height at its end and the
gradient norm. If this moves the base toward the command, the window gradient carries the
signal a first-order policy method needs.

Run: ``OMP_NUM_THREADS=1 python benchmarks/anymal_trajopt.py [--horizon 32] [--iterations
25] [--learning-rate 0.1] [--command 1 0 0]``
"""

from __future__ import annotations

import argparse
import warnings

import torch

from pathgrad.envs.newton.robots.anymal_velocity import AnymalVelocity


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horizon", type=int, default=32)
    parser.add_argument("--iterations", type=int, default=25)
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--command", type=float, nargs=3, default=[1.0, 0.0, 0.0])
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the model's notes on its own inertias
    env = AnymalVelocity(4, seed=0, only_positive_rewards=False, smooth_collisions=True,
                         command=tuple(args.command))  # fmt: skip
    start = env._sample_initial_state(4)
    with torch.no_grad():
        for _ in range(60):
            start = env._dynamics(start, torch.zeros(4, 12))
    actions = torch.zeros(args.horizon, 4, 12, requires_grad=True)
    optimizer = torch.optim.Adam([actions], lr=args.learning_rate)
    print("| iteration | return per env | mean vx (m/s) | base height (m) | gradient norm |")
    print("|---:|---:|---:|---:|---:|")
    for iteration in range(args.iterations):
        state, total, speed = start, torch.zeros(4), torch.zeros(4)
        for action in actions:
            following = env._dynamics(state, action)
            total = total + env._reward(state, action, following)
            speed = speed + env._base_motion(following)[1][:, 0].detach()
            state = following
        optimizer.zero_grad()
        (-total.sum()).backward()
        norm = float(actions.grad.norm())
        optimizer.step()
        with torch.no_grad():
            actions.clamp_(-2.0, 2.0)  # the action space
        if iteration % 4 == 0 or iteration == args.iterations - 1:
            print(f"| {iteration} | {total.mean():.3f} | {speed.mean() / args.horizon:.3f} | "
                  f"{state['joint_q'][:, 2].mean():.3f} | {norm:.3g} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
