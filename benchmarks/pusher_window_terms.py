"""Where does a trained Pusher policy's window gradient point? Each v5 reward term apart.

Rolls a run's deterministic policy for ``--start`` steps (4 envs, seeded), then takes the
policy's next ``--window`` actions as free variables and backpropagates each term of v5's
reward summed over the window (``near``: -0.5 |object - tip|, ``dist``: -|object - goal|,
``ctrl``: -0.1 |action|^2) into them. Printed per term: the gradient's norm and how fast the
fingertip's height at the window's end changes along it (m per unit step along the
normalised gradient; negative: ascending the term lowers the tip toward the table). The
critic's value at the window's end is not included: this is the dynamics' signal alone.

Run: ``OMP_NUM_THREADS=1 python benchmarks/pusher_window_terms.py RUN_DIR [--start 60]
[--window 8] [--env-cfg contact_ke=250 ...]`` (the run's env options as env.cfg).
"""

from __future__ import annotations

import argparse
import warnings

import torch
import yaml


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a GymnasiumPusher run directory or checkpoint")
    parser.add_argument("--start", type=int, default=60)
    parser.add_argument("--window", type=int, default=8)
    parser.add_argument("--env-cfg", nargs="*", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the file's notes
    torch.set_num_threads(1)
    import pathgrad
    from pathgrad.envs.newton.robots.gymnasium_pusher import GymnasiumPusher

    options = {k: yaml.safe_load(v) for k, _, v in (item.partition("=") for item in args.env_cfg)}
    policy = pathgrad.load(args.run)
    env = GymnasiumPusher(4, seed=3, **options)
    observation = env.reset(seed=3)
    observation = observation[0] if isinstance(observation, tuple) else observation
    planned = []
    with torch.no_grad():
        for step in range(args.start + args.window):
            if step == args.start:
                start = {key: value.clone() for key, value in env.state.items()}
            action = torch.as_tensor(policy.predict(observation), dtype=torch.float32)
            planned += [action] if step >= args.start else []
            observation = env.step(action)[0]
    actions = torch.stack(planned).requires_grad_(True)
    state, terms = start, {"near": 0.0, "dist": 0.0, "ctrl": 0.0}
    for action in actions:
        following = env._dynamics(state, action)
        tip, target, goal = env.tracked_positions(following).unbind(1)
        terms["near"] = terms["near"] - 0.5 * torch.linalg.vector_norm(target - tip, dim=-1)
        terms["dist"] = terms["dist"] - torch.linalg.vector_norm(target - goal, dim=-1)
        terms["ctrl"] = terms["ctrl"] - 0.1 * action.square().sum(-1)
        state = following
    height = env.tracked_positions(state)[:, 0, 2]
    (lowering,) = torch.autograd.grad(height.sum(), actions, retain_graph=True)
    gradients = {}
    for name, value in terms.items():
        (gradients[name],) = torch.autograd.grad(value.sum(), actions, retain_graph=True)
    gradients["total"] = sum(gradients.values())
    object_height = env.tracked_positions(state)[:, 1, 2]
    print(f"tip height {height.tolist()} m; object {object_height.tolist()} m")
    print("| term | gradient norm | tip height along it (m per unit step) |")
    print("|---|---:|---:|")
    for name, gradient in gradients.items():
        along = float((lowering * gradient).sum() / (gradient.norm() + 1e-12))
        print(f"| {name} | {float(gradient.norm()):.3g} | {along:.3g} |")


if __name__ == "__main__":
    main()
