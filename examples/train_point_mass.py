"""Train a policy on PointMass with analytic policy gradients, top to bottom.

Run: ``python examples/train_point_mass.py [--updates N] [--seed S] [--run-dir DIR]``.
Writes TensorBoard logs and checkpoints under ``runs/point_mass-<time>/``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch.utils.tensorboard import SummaryWriter

import pathgrad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=300, help="optimizer updates")
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-dir", type=Path, default=None)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    run_dir = args.run_dir or Path("runs") / f"point_mass-{time.strftime('%Y%m%d-%H%M%S')}"
    if run_dir.exists():
        raise SystemExit(f"error: run directory '{run_dir}' exists; choose another --run-dir.")

    # 1. Batched differentiable environments: one to train on, one to evaluate on.
    env = pathgrad.build_learning_env(
        "PointMass", num_envs=args.num_envs, device="cpu", seed=args.seed
    )
    eval_env = pathgrad.build_learning_env(
        "PointMass", num_envs=64, device="cpu", seed=args.seed + 1
    )

    # 2. A Gaussian MLP policy, squashed to the action space, and analytic policy
    #    gradients (Adam, linear LR decay).
    policy = pathgrad.GaussianMLPPolicy.from_spaces(
        env.single_observation_space, env.single_action_space, hidden_sizes=(64, 64), squash=True
    )
    algorithm = pathgrad.APG(
        pathgrad.APGCfg(
            gamma=0.99,
            max_grad_norm=1.0,
            optimizer=pathgrad.OptimizerCfg(learning_rate=3e-3, kwargs={"betas": (0.7, 0.95)}),
            lr_scheduler=pathgrad.LRSchedulerCfg(name="linear", kwargs={"end_factor": 0.1}),
        ),
        policy,
    )

    # 3. The trainer: 32-step TBPTT windows, evaluation (also of the final policy)
    #    and checkpoints.
    segment = 32
    cfg = pathgrad.DifferentiableTrainerCfg(
        segment_length=segment,
        checkpoint_dir=str(run_dir / "checkpoints"),
        experiment_name="point_mass",
        save_frequency_updates=100,
        eval_frequency_steps=args.num_envs * segment * 50,
        num_eval_episodes=64,
        eval_seed=12345,
        final_evaluation=True,
    )
    writer = SummaryWriter(str(run_dir / "tb"))
    trainer = pathgrad.DifferentiableTrainer(cfg, env, policy, algorithm, writer, eval_env)

    start = time.time()
    summary = trainer.train(total_updates=args.updates)
    final_checkpoint = trainer.save_checkpoint(kind="final")
    writer.close()
    final = summary["last_eval_metrics"]
    print(
        f"PointMass: {summary['num_updates']} updates, {summary['global_step']} env steps "
        f"in {time.time() - start:.1f} s"
    )
    print(
        f"evaluation at step {int(final.get('global_step', 0))}: "
        f"return {final.get('eval/avg_reward', float('nan')):.2f}, "
        f"final distance {final.get('eval/final_distance', float('nan')):.3f} m, "
        f"success rate {final.get('eval/success_rate', float('nan')):.2f}"
    )
    print(f"run directory: {run_dir}")
    print(f"TensorBoard:   tensorboard --logdir {run_dir / 'tb'}")
    print(f"checkpoint:    {final_checkpoint}")
    print(f"best:          {summary['best_checkpoint_path']}")


if __name__ == "__main__":
    main()
