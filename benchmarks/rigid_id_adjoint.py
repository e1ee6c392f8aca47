"""Milliseconds of Featherstone's inverse-dynamics kernel and its adjoint: Newton's
``eval_rigid_id`` as Warp differentiates it against the light kernel of
:mod:`pathgrad.envs.newton.engine.rigid_id_adjoint`, per robot.

Each robot runs a 2-step window (so that the bridge records and keeps its tapes),
then the recorded launch of a substep that reuses the mass matrix is launched
again on that substep's kept values: forward and adjoint, the two kernels in
alternation, medians.

Run: ``OMP_NUM_THREADS=1 python benchmarks/rigid_id_adjoint.py [--num-envs 64]
[--repeats 50]`` (one thread; say so beside any figure).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import warp as wp

from pathgrad.envs.newton import DiffRLAnt, DiffRLHalfCheetah, DiffRLHopper, DiffRLHumanoid
from pathgrad.envs.newton.engine.rigid_id_adjoint import (
    launch_on_recorded,
    light_rigid_id,
    recorded_rigid_id_launches,
)

ROBOTS = (DiffRLAnt, DiffRLHopper, DiffRLHalfCheetah, DiffRLHumanoid)


def recorded_launch(env) -> tuple:
    """The tape of a substep reusing the mass matrix and its ``eval_rigid_id`` launch, the
    substep's kept values put back."""
    env.simulation.light_rigid_id_adjoint = False
    env.reset(seed=0)
    actions = torch.zeros(2, env.num_envs, env.action_dim, requires_grad=True)
    rewards = [env.step(action)[1] for action in actions]
    torch.stack(rewards).sum().backward()
    env.simulation.kept[False].restore()
    tape = env.simulation._kept_tapes[False]
    ((_, launch),) = recorded_rigid_id_launches(tape)
    return tape, launch


def launch_seconds(kernel, tape, launch, adjoint: bool) -> float:
    start = time.perf_counter()
    launch_on_recorded(kernel, tape, launch, adjoint=adjoint)
    wp.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    print(
        f"eval_rigid_id per substep, {args.num_envs} envs, medians of {args.repeats}, "
        f"{torch.get_num_threads()} torch thread(s)\n"
    )
    print("| robot | Newton's forward ms | light forward ms | Warp's adjoint of Newton's ms "
          "| light adjoint ms | adjoint ratio |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    for robot in ROBOTS:
        tape, launch = recorded_launch(robot(args.num_envs, seed=0))
        kernels = {"newton": launch[0], "light": light_rigid_id}
        times: dict[tuple[str, bool], list[float]] = {}
        for _ in range(args.repeats + 1):  # the first round (loading the kernels) left out
            for name, kernel in kernels.items():
                for adjoint in (False, True):
                    seconds = launch_seconds(kernel, tape, launch, adjoint)
                    times.setdefault((name, adjoint), []).append(seconds)
        ms = {key: 1e3 * statistics.median(value[1:]) for key, value in times.items()}
        print(
            f"| {robot.__name__} | {ms['newton', False]:.3f} | {ms['light', False]:.3f} "
            f"| {ms['newton', True]:.3f} | {ms['light', True]:.3f} "
            f"| {ms['newton', True] / ms['light', True]:.2f} |"
        )


if __name__ == "__main__":
    main()
