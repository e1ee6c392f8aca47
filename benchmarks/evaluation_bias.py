"""How much "first_completed" episode selection (the reference's) biases an evaluation.

MountainCarContinuous ends an episode when the car reaches the goal, so
successes are short episodes. A fixed policy (push along the velocity at half
force, nothing while ``|v| < 0.003``) reaches the goal from about 65% of the
start states. Its true success rate is measured on one episode of each of
4096 envs; then ``evaluate_episodes`` estimates it with each selection rule
and the evaluation sizes of pathgrad's trainer (16 envs, 64 episodes), of the
reference's defaults (16 envs, 5 episodes) and of the reference's PointMass
config (32 envs, 128 episodes), over many evaluation seeds.

    OMP_NUM_THREADS=1 python benchmarks/evaluation_bias.py [--seeds 40]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from pathgrad.envs import MountainCarContinuous
from pathgrad.evaluation import evaluate_episodes

SETTINGS = {
    "pathgrad trainer": (16, 64),
    "reference defaults": (16, 5),
    "reference PointMass": (32, 128),
}


class DeadZonePump(torch.nn.Module):
    """Half force along the velocity; none while the car is almost still."""

    def get_action(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        velocity = obs[:, 1:2]
        return torch.where(velocity.abs() < 0.003, 0.0, 0.5 * torch.sign(velocity)).to(obs.dtype)


def success(num_envs: int, episodes: int, seed: int, selection: str) -> float:
    env = MountainCarContinuous(num_envs, seed=seed)
    metrics = evaluate_episodes(
        DeadZonePump(), env, episodes, "cpu", seed=seed, episode_selection=selection
    )
    return metrics["eval/success_rate"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    truth = success(4096, 4096, 0, "per_env")  # one first episode per env: unbiased
    print(f"true success rate (4096 first episodes): {truth:.3f}")
    print("| evaluation (envs, episodes) | per_env | first_completed |")
    print("|---|---|---|")
    for name, (num_envs, episodes) in SETTINGS.items():
        cells = []
        for selection in ("per_env", "first_completed"):
            values = [success(num_envs, episodes, 1 + s, selection) for s in range(args.seeds)]
            mean, spread = statistics.mean(values), statistics.stdev(values)
            cells.append(f"{mean:.3f} (bias {mean - truth:+.3f}, sd {spread:.3f})")
        print(f"| {name} ({num_envs}, {episodes}) | {cells[0]} | {cells[1]} |")
    print(f"{time.perf_counter() - start:.0f} s, {args.seeds} seeds per cell")


if __name__ == "__main__":
    main()
