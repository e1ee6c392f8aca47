"""Where does a trained Pusher policy's window gradient point? Each term of its objective apart.

Builds a GymnasiumPusher run as its config says (4 envs), restores its final (or given)
checkpoint, rolls the deterministic policy for ``--start`` steps from a seeded reset, then
takes the policy's next ``--window`` actions as free variables and backpropagates into them
each term of v5's reward summed over the window (``near``: -0.5 |object - tip|, ``dist``:
-|object - goal|, ``ctrl``: -0.1 |action|^2), the discounted window return, and the
critic's discounted value at the window's end (what SHAC and SAPO add to the return).
Printed per term: the gradient's norm and how fast the fingertip's height at the window's
end changes along it (m per unit step along the normalised gradient; negative: ascending
the term lowers the tip toward the table and the object).

Run: ``OMP_NUM_THREADS=1 python benchmarks/pusher_window_terms.py RUN_DIR [--checkpoint
FILE] [--start 60] [--window 8]``.
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a GymnasiumPusher run directory")
    parser.add_argument("--checkpoint", type=Path, default=None, help="default: the final one")
    parser.add_argument("--start", type=int, default=60)
    parser.add_argument("--window", type=int, default=8)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the file's notes
    torch.set_num_threads(1)
    from pathgrad.runs.config import load_config
    from pathgrad.runs.run import build_run

    config = load_config(str(args.run / "config.yaml"), ["env.num_envs=4", "eval.num_envs=4"])
    built = build_run(config, Path(tempfile.mkdtemp()))
    checkpoint = args.checkpoint or sorted((args.run / "checkpoints").glob("*final*.pt"))[-1]
    built.trainer.load_checkpoint(checkpoint, restore_env_state=False)
    env, algorithm, policy = built.env, built.algorithm, built.policy
    transform = algorithm.observation_transform or (lambda observation: observation)
    gamma = float(algorithm.cfg.gamma)
    observation = env.reset(seed=3)
    observation = observation[0] if isinstance(observation, tuple) else observation
    planned = []
    with torch.no_grad():
        for step in range(args.start + args.window):
            if step == args.start:
                start = {key: value.clone() for key, value in env.state.items()}
            action = policy.get_action(transform(observation))
            planned += [action] if step >= args.start else []
            observation = env.step(action)[0]
    actions = torch.stack(planned).requires_grad_(True)
    state = start
    terms = {"near": 0.0, "dist": 0.0, "ctrl": 0.0, "window return": 0.0}
    for step, action in enumerate(actions):
        following = env._dynamics(state, action)
        tip, target, goal = env.tracked_positions(following).unbind(1)
        terms["near"] = terms["near"] - 0.5 * torch.linalg.vector_norm(target - tip, dim=-1)
        terms["dist"] = terms["dist"] - torch.linalg.vector_norm(target - goal, dim=-1)
        terms["ctrl"] = terms["ctrl"] - 0.1 * action.square().sum(-1)
        terms["window return"] = terms["window return"] + gamma**step * env._reward(
            state, action, following
        )
        state = following
    terms["value at the end"] = gamma ** len(actions) * algorithm._bootstrap_values(
        env._observe(state)
    )
    height = env.tracked_positions(state)[:, 0, 2]
    (lowering,) = torch.autograd.grad(height.sum(), actions, retain_graph=True)
    gradients = {}
    for name, value in terms.items():
        (gradients[name],) = torch.autograd.grad(value.sum(), actions, retain_graph=True)
    gradients["return + value"] = gradients["window return"] + gradients["value at the end"]
    object_height = env.tracked_positions(state)[:, 1, 2]
    print(f"{checkpoint.name}: tip height {[round(h, 3) for h in height.tolist()]} m, "
          f"object {[round(h, 3) for h in object_height.tolist()]} m")  # fmt: skip
    print("| term | gradient norm | tip height along it (m per unit step) |")
    print("|---|---:|---:|")
    for name, gradient in gradients.items():
        along = float((lowering * gradient).sum() / (gradient.norm() + 1e-12))
        print(f"| {name} | {float(gradient.norm()):.3g} | {along:.3g} |")


if __name__ == "__main__":
    main()
