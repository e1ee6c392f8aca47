"""One rollout of a fixed action sequence on Newton and on MuJoCo, side by side, per Gymnasium task.

pathgrad's Gymnasium tasks (``GymnasiumHopper`` ...) load Gymnasium's own files with
MuJoCo's meaning; what differs is the physics: Newton's Featherstone with penalty
contacts and spring limits, stepped semi-implicitly at the task's substeps, against
MuJoCo's soft-constraint solver. Both start from the same ``qpos``/``qvel`` (the Newton
env's seeded reset) and take the same actions (smooth sinusoids over the action range,
one phase per actuator), with terminations off where v5 has the option, for ``--steps``
env steps or until either ends the episode (v5's termination of a task without the
option). Reported per task: the largest difference of ``qpos`` (root and joints, in the
file's units) at a few steps, the first step at which it passes 0.1, and both sums of
reward. With contacts off and no limit active, one step's accelerations agree within 1%
(``tests/envs/newton/test_mujoco_meaning.py``); this measures how far contact and limits
take the two apart over a rollout.

Run: ``python benchmarks/gymnasium_side_by_side.py [--tasks GymnasiumHopper ...]
[--steps 200] [--out DIR] [--env-cfg joint_limits=mujoco ...]`` (needs ``mujoco``:
``pip install 'pathgrad[mujoco]'``);
prints a Markdown table and writes ``side_by_side.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
from pathlib import Path

import numpy as np
import torch

TASKS = {
    "GymnasiumHopper": "Hopper-v5",
    "GymnasiumWalker2d": "Walker2d-v5",
    "GymnasiumHalfCheetah": "HalfCheetah-v5",
    "GymnasiumAnt": "Ant-v5",
    "GymnasiumHumanoid": "Humanoid-v5",
    "GymnasiumHumanoidStandup": "HumanoidStandup-v5",
    "GymnasiumInvertedPendulum": "InvertedPendulum-v5",
    "GymnasiumInvertedDoublePendulum": "InvertedDoublePendulum-v5",
    "GymnasiumReacher": "Reacher-v5",
    "GymnasiumSwimmer": "Swimmer-v5",
    "GymnasiumPusher": "Pusher-v5",
}
MARKS = (1, 10, 50, 200, 1000)


def actions(low: np.ndarray, high: np.ndarray, steps: int) -> np.ndarray:
    """Sinusoids over 80% of each actuator's range, periods of 40 env steps, one phase each."""
    middle, half = (high + low) / 2, 0.8 * (high - low) / 2
    phases = np.linspace(0.0, 2.0 * math.pi, len(low), endpoint=False)
    times = np.arange(steps)[:, None]
    return (middle + half * np.sin(2.0 * math.pi * times / 40.0 + phases)).astype(np.float32)


def build(task: str, steps: int, env_cfg: dict | None = None):
    """The Newton env (one row, no termination) and Gymnasium's MuJoCo env of ``task``."""
    import gymnasium

    from pathgrad.env import build_learning_env

    options = {"terminate_when_unhealthy": False}
    try:
        reference = gymnasium.make(TASKS[task], **options).unwrapped
    except TypeError:  # a task without v5's termination option
        options = {}
        reference = gymnasium.make(TASKS[task]).unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the file's unapplied options, the substeps chosen
        env = build_learning_env(task, num_envs=1, device="cpu", seed=0,
                                 max_episode_steps=steps + 1, **options,
                                 **(env_cfg or {}))  # fmt: skip
    return env, reference


def side_by_side(task: str, steps: int, env_cfg: dict | None = None) -> dict:
    env, reference = build(task, steps, env_cfg)
    env.reset(seed=0)
    reference.reset(seed=0)
    qpos, qvel = env.mujoco_from_joint_state(env.state["joint_q"], env.state["joint_qd"])
    reference.set_state(qpos[0].double().numpy(), qvel[0].double().numpy())
    sequence = actions(env.single_action_space.low, env.single_action_space.high, steps)
    differences, rewards, ended = [], [0.0, 0.0], None
    for step, action in enumerate(sequence):
        with torch.no_grad():
            _, reward, terminated, *_ = env.step(torch.as_tensor(action)[None])
        _, reference_reward, reference_terminated, *_ = reference.step(action.astype(np.float64))
        if bool(terminated[0]) or reference_terminated:  # v5's end (a task without the option)
            ended = step + 1
            break
        rewards[0] += float(reward[0])
        rewards[1] += float(reference_reward)
        qpos, _ = env.mujoco_from_joint_state(env.state["joint_q"], env.state["joint_qd"])
        gap = np.abs(qpos[0].double().numpy() - reference.data.qpos)
        differences.append(float(gap.max()) if np.all(np.isfinite(gap)) else float("inf"))
    apart = next((i + 1 for i, gap in enumerate(differences) if gap > 0.1), None)
    substep = float(env.simulation.substep_dt)
    return {
        "task": task,
        "reference": TASKS[task],
        "substep": substep,
        "substeps": round(float(env.dt) / substep),  # per env step
        "ended": ended,
        "max_qpos_difference": {
            str(m): differences[m - 1] for m in MARKS if m <= len(differences)
        },  # fmt: skip
        "first_step_apart": apart,
        "largest_qpos_difference": max(differences, default=0.0),
        "return_newton": rewards[0],
        "return_mujoco": rewards[1],
    }


def table(results: list[dict], steps: int) -> str:
    marks = [m for m in MARKS if m <= steps]
    head = " | ".join(f"max abs qpos diff, step {m}" for m in marks)
    lines = [
        f"| task | substeps x substep | {head} | largest | first step over 0.1 | steps compared "
        "| return Newton | return MuJoCo |",
        "|---" * (7 + len(marks)) + "|",
    ]
    for r in results:
        gaps = " | ".join(
            f"{r['max_qpos_difference'][str(m)]:.3g}" if str(m) in r["max_qpos_difference"]
            else "" for m in marks
        )  # fmt: skip
        apart = r["first_step_apart"] or "never"
        compared = f"{r['ended'] - 1} (then v5 ends it)" if r["ended"] else str(steps)
        lines.append(
            f"| {r['task']} | {r['substeps']} x {r['substep']:.3g} s | {gaps} "
            f"| {r['largest_qpos_difference']:.3g} | {apart} "
            f"| {compared} | {r['return_newton']:.1f} | {r['return_mujoco']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("gymnasium_side_by_side"))
    parser.add_argument("--env-cfg", nargs="*", default=[], metavar="KEY=VALUE",
                        help="env options of every task, as env.cfg in a config")  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(1)
    from pathgrad.runs.config_sources import merge_layers

    env_cfg = merge_layers({}, {}, args.env_cfg)  # key=value as a config's overrides read them
    results = []
    for task in args.tasks:
        try:
            results.append(side_by_side(task, args.steps, env_cfg))
        except ImportError as error:  # a task whose module is not there yet
            print(f"{task}: skipped ({error})")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "side_by_side.json").write_text(json.dumps(results, indent=1))
    print(table(results, args.steps))


if __name__ == "__main__":
    main()
