"""The reference's APG demonstration on :class:`NewtonPlanarReachEnv`: ``train_planar_reach``.

Trains a deterministic tanh MLP (64, 64) with APG on random reaches, and
evaluates it on held-out reaches (their own seeds) before and after. As a
script: ``python -m pathgrad.experimental.newton.train_planar_reach --num-updates 30``
prints the result as JSON. ``pathgrad train newton_planar_reach`` trains the same
task through pathgrad's command line.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from typing import Any

import torch

from pathgrad.algo import APG, APGCfg
from pathgrad.collector import DifferentiableCollector, DifferentiableRollout
from pathgrad.experimental.newton.planar_reach import (
    NUM_JOINTS,
    OBSERVATION_DIM,
    NewtonPlanarReachEnv,
    NewtonPlanarReachEnvCfg,
)
from pathgrad.models import MLP, ActorOnly
from pathgrad.trainer.config import DifferentiableTrainerCfg
from pathgrad.trainer.trainer import DifferentiableTrainer
from pathgrad.utils import OptimizerCfg, configclass

__all__ = ["NewtonPlanarReachTrainingCfg", "train_planar_reach"]


@configclass
class NewtonPlanarReachTrainingCfg:
    """Settings of :func:`train_planar_reach` (the reference's fields and defaults).

    Attributes:
        device: Torch device of envs and policy.
        seed: Seed of torch (network initialization) and of the training resets.
        eval_seed: Evaluation batch ``b`` resets with ``eval_seed + b``.
        eval_batches: Held-out batches of ``num_envs`` reaches per evaluation.
        num_envs: Envs of the training and of the evaluation batch.
        num_updates: APG updates, each ``horizon`` steps of every env.
        horizon: Steps of an update, an episode and an evaluation rollout.
        segment_length: Steps between truncations of the gradient within an
            update (``None``: ``horizon``, the whole episode).
        learning_rate: Adam's learning rate.
        action_scale: The env's joint change per unit action (rad).
        success_threshold: A reach succeeds when its closest distance is below
            this (m); reported only, the envs never terminate early.
        initial_joint_scale: The env's initial-angle scale.
        target_joint_scale: The env's target-angle scale.
    """

    device: str = "cpu"
    seed: int = 29
    eval_seed: int = 10029
    eval_batches: int = 4
    num_envs: int = 128
    num_updates: int = 600
    horizon: int = 32
    segment_length: int | None = None
    learning_rate: float = 3e-3
    action_scale: float = 0.25
    success_threshold: float = 0.05
    initial_joint_scale: float = 0.5
    target_joint_scale: float = 1.0


def train_planar_reach(cfg: NewtonPlanarReachTrainingCfg | None = None) -> dict[str, Any]:
    """Train APG on random reaches; evaluate on held-out reaches before and after.

    Args:
        cfg: The settings (defaults when ``None``).

    Returns:
        ``seed``, ``eval_seed``, ``eval_samples``, ``num_envs``, ``num_updates``,
        ``global_step``, ``horizon``, ``segment_length``, ``initial_return`` and
        ``final_return`` (mean return of an evaluation reach), ``initial_`` and
        ``final_mean_min_distance`` (closest distance, m), ``final_distance``
        (distance at the last step after training), ``initial_`` and
        ``final_success_rate``, ``success_threshold`` and ``skipped_updates``.

    Raises:
        ValueError: If ``eval_batches`` or ``horizon`` is not positive or
            ``num_updates`` is negative.
    """
    cfg = cfg if cfg is not None else NewtonPlanarReachTrainingCfg()
    if cfg.eval_batches <= 0:
        raise ValueError("eval_batches must be positive.")
    if cfg.num_updates < 0:
        raise ValueError("num_updates cannot be negative.")
    if cfg.horizon <= 0:
        raise ValueError("horizon must be positive.")
    segment_length = cfg.horizon if cfg.segment_length is None else cfg.segment_length
    torch.manual_seed(cfg.seed)
    device = torch.device(cfg.device)
    train_env = _make_env(cfg, max_episode_steps=cfg.horizon)
    eval_env = _make_env(cfg, max_episode_steps=cfg.horizon + 1)  # no reset within a rollout
    actor = MLP(OBSERVATION_DIM, NUM_JOINTS, [64, 64], "tanh", last_activation="tanh").to(device)
    actor.init_orthogonal([math.sqrt(2.0), math.sqrt(2.0), 0.01])
    policy = ActorOnly(OBSERVATION_DIM, NUM_JOINTS, device, actor=actor)
    algorithm = APG(
        APGCfg(
            device=cfg.device,
            optimizer=OptimizerCfg(learning_rate=cfg.learning_rate),
            gamma=0.99,
            max_grad_norm=10.0,
        ),
        policy,
    )
    trainer = DifferentiableTrainer(
        DifferentiableTrainerCfg(
            segment_length=segment_length,
            update_horizon=cfg.horizon,
            deterministic_actions=True,
        ),
        train_env,
        policy,
        algorithm,
    )
    eval_collector = DifferentiableCollector(eval_env, policy, device)

    before = _evaluate(eval_collector, cfg)
    trainer.collector.reset(seed=cfg.seed)
    summary = trainer.train(total_timesteps=cfg.num_updates * cfg.horizon * cfg.num_envs)
    skipped = sum(int(entry["train/skipped_update"]) for entry in summary["train_history"])
    after = _evaluate(eval_collector, cfg)
    return {
        "seed": cfg.seed,
        "eval_seed": cfg.eval_seed,
        "eval_samples": cfg.eval_batches * cfg.num_envs,
        "num_envs": cfg.num_envs,
        "num_updates": summary["num_updates"],
        "global_step": summary["global_step"],
        "horizon": cfg.horizon,
        "segment_length": segment_length,
        "initial_return": before["return"],
        "final_return": after["return"],
        "initial_mean_min_distance": before["mean_min_distance"],
        "final_mean_min_distance": after["mean_min_distance"],
        "final_distance": after["final_distance"],
        "initial_success_rate": before["success_rate"],
        "final_success_rate": after["success_rate"],
        "success_threshold": cfg.success_threshold,
        "skipped_updates": skipped,
    }


def _make_env(cfg: NewtonPlanarReachTrainingCfg, *, max_episode_steps: int) -> NewtonPlanarReachEnv:
    """An env of the demonstration: never terminating early (success threshold 0)."""
    return NewtonPlanarReachEnv(
        NewtonPlanarReachEnvCfg(
            num_envs=cfg.num_envs,
            device=cfg.device,
            action_scale=cfg.action_scale,
            success_threshold=0.0,
            max_episode_steps=max_episode_steps,
            initial_joint_scale=cfg.initial_joint_scale,
            target_joint_scale=cfg.target_joint_scale,
        )
    )


def _evaluate(
    collector: DifferentiableCollector, cfg: NewtonPlanarReachTrainingCfg
) -> dict[str, float]:
    """Mean metrics of ``eval_batches`` deterministic rollouts of ``horizon`` steps.

    The policy runs in eval mode; its previous mode is restored afterwards.
    """
    was_training = collector.policy.training
    collector.policy.eval()
    try:
        batches = []
        for batch in range(cfg.eval_batches):
            collector.reset(seed=cfg.eval_seed + batch)
            rollout = collector.collect(cfg.horizon, deterministic=True)
            batches.append(_trajectory_metrics(rollout, cfg.success_threshold))
        return {key: sum(metrics[key] for metrics in batches) / len(batches) for key in batches[0]}
    finally:
        collector.policy.train(was_training)


def _trajectory_metrics(
    rollout: DifferentiableRollout, success_threshold: float
) -> dict[str, float]:
    """Return, closest and last distance, and success (closest distance below the threshold)."""
    distances = torch.stack([step.info["distance"] for step in rollout.transitions]).detach()
    closest = distances.min(dim=0).values
    return {
        "return": rollout.rewards.detach().sum(dim=0).mean().item(),
        "mean_min_distance": closest.mean().item(),
        "final_distance": distances[-1].mean().item(),
        "success_rate": (closest < success_threshold).float().mean().item(),
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Parse the command line (the reference's options), train, print the result as JSON."""
    defaults = NewtonPlanarReachTrainingCfg()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=defaults.device)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--eval-batches", type=int, default=defaults.eval_batches)
    parser.add_argument("--num-envs", type=int, default=defaults.num_envs)
    parser.add_argument("--num-updates", type=int, default=defaults.num_updates)
    parser.add_argument("--horizon", type=int, default=defaults.horizon)
    parser.add_argument("--segment-length", type=int, default=defaults.segment_length)
    args = parser.parse_args(argv)
    result = train_planar_reach(NewtonPlanarReachTrainingCfg(**vars(args)))
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
