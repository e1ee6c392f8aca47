"""One rank of a data-parallel test scenario, launched by torchrun (or alone as a world of one).

Usage: python -m torch.distributed.run --nproc-per-node N distributed_run.py SCENARIOS DIR
(SCENARIOS: one or more names separated by commas, run one after another in one group)
  match:   PointMass (float64) whose 64 reset states are split over the ranks,
           deterministic actions, observation normalizer; two updates.
  modes:   SHAC, complete rollouts with gradient accumulation and gradient
           checkpointing, action-adjoint clipping, compiled-rollout-free APG;
           three updates each, with a periodic and a final checkpoint.
  compiled: APG with the whole update compiled (torch_compile), two updates.
  early_stop: rank 0's callback asks to stop after update 2 of 10.
Each rank writes DIR/<scenario>-rank<R>-of-<N>.pt with its parameters and statistics.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from pathgrad.algo.registry import get_algorithm
from pathgrad.differentiable_trainer import DifferentiableTrainer, DifferentiableTrainerCfg
from pathgrad.distributed import exit_rank, join, leave, rank_seed
from pathgrad.envs import PointMass
from pathgrad.policies import GaussianMLPPolicy
from pathgrad.squashed_normal import SquashedNormalPolicy

TOTAL_ENVS = 64


def flat_parameters(trainer: DifferentiableTrainer) -> torch.Tensor:
    """Policy (and critic) parameters as one vector."""
    modules = [trainer.policy] + [
        getattr(trainer.algorithm, name)
        for name in ("critic", "target_critic")
        if getattr(trainer.algorithm, name, None) is not None  # SAPO has no target critic
    ]
    extra = [getattr(trainer.algorithm, "log_temperature", torch.zeros(0)).detach().reshape(-1)]
    return torch.cat([p.detach().reshape(-1) for m in modules for p in m.parameters()] + extra)


def build(data_parallel, num_envs: int, directory: Path, algorithm: str = "apg", **settings):
    torch.manual_seed(0)
    env = PointMass(
        num_envs,
        max_episode_steps=settings.pop("max_episode_steps", 12),
        seed=rank_seed(0, data_parallel.rank),
        dtype=settings.pop("dtype", "float32"),
    )
    if settings.pop("policy_name", "gaussian_mlp") == "squashed_normal":
        policy = SquashedNormalPolicy(6, 2, hidden_sizes=(16,)).to(env.dtype)
    else:
        policy = GaussianMLPPolicy(6, 2, hidden_sizes=(16,), squash=True).to(env.dtype)
    optimizer = {"name": "adam", "learning_rate": 1e-2}
    factory, cfg_type = get_algorithm(algorithm)
    learner = factory(cfg_type(optimizer=optimizer), policy, env)
    if data_parallel.rank > 0:
        torch.manual_seed(rank_seed(0, data_parallel.rank))
    cfg = DifferentiableTrainerCfg(
        **{
            "segment_length": 4,
            "update_horizon": 8,
            "normalize_observations": True,
            "checkpoint_dir": str(directory / "checkpoints"),
            "experiment_name": algorithm,
            **settings,
        }
    )
    return DifferentiableTrainer(cfg, env, policy, learner, data_parallel=data_parallel)


def match(data_parallel, directory: Path) -> dict:
    """Two updates from reset states split over the ranks."""
    per_rank = TOTAL_ENVS // data_parallel.world_size
    trainer = build(
        data_parallel, per_rank, directory,
        dtype="float64", deterministic_actions=True, max_episode_steps=50,
    )  # fmt: skip
    reference = PointMass(TOTAL_ENVS, max_episode_steps=50, seed=3, dtype="float64")
    reference.reset()
    rows = slice(data_parallel.rank * per_rank, (data_parallel.rank + 1) * per_rank)
    state = reference.state_dict()
    trainer.env.load_state_dict(
        {
            **state,
            "state": {key: value[rows] for key, value in state["state"].items()},
            "elapsed_steps": state["elapsed_steps"][rows],
        }
    )
    trainer.collector.detach_state()
    summary = trainer.train(total_updates=2)
    normalizer = trainer.observation_normalizer
    return {
        "parameters": flat_parameters(trainer),
        "mean": normalizer.mean,
        "var": normalizer.var,
        "count": normalizer.count,
        "loss": summary["last_train_metrics"]["train/loss"],
        "global_step": summary["global_step"],
    }


def modes(data_parallel, directory: Path) -> dict:
    """Several algorithms and rollout modes, three updates each."""
    cases = {
        "shac": {"algorithm": "shac"},
        "sapo": {"algorithm": "sapo", "policy_name": "squashed_normal"},
        "sapo_ensemble": {"algorithm": "sapo_ensemble"},
        "ahac_stiffness": {"algorithm": "ahac_stiffness"},
        "complete": {
            "rollout_mode": "complete",
            "update_horizon": 6,
            "gradient_accumulation_steps": 2,
            "gradient_checkpointing": True,
            "checkpoint_chunk_steps": 3,
        },
        "adjoint_clip": {"action_adjoint_max_norm": 0.5, "save_frequency_updates": 2},
    }
    results = {}
    for name, settings in cases.items():
        trainer = build(data_parallel, 8, directory / name, **settings)
        initial = flat_parameters(trainer).clone()
        summary = trainer.train(total_updates=3)
        results[name] = {
            "initial": initial,
            "parameters": flat_parameters(trainer),
            "returns": list(trainer.ret_window),
            "global_step": summary["global_step"],
            "checkpoint": trainer.save_checkpoint(kind="final"),
        }
    return results


def compiled(data_parallel, directory: Path) -> dict:
    """The whole update compiled."""
    trainer = build(data_parallel, 8, directory, torch_compile=True, compile_chunk_steps=4)
    initial = flat_parameters(trainer).clone()
    trainer.train(total_updates=2)
    return {
        "initial": initial,
        "parameters": flat_parameters(trainer),
        "scope": trainer.compile_scope,
    }


class StopAtUpdate:
    """A callback asking to stop once it has seen ``update`` updates (rank 0 only)."""

    def __init__(self, update: int) -> None:
        self.update, self.stop_training = update, False

    def __call__(self, kind: str, entry: dict) -> None:
        self.stop_training = self.stop_training or entry.get("num_updates", 0) >= self.update


def early_stop(data_parallel, directory: Path) -> dict:
    """A stop requested by rank 0's callback after update 2 ends every rank's training."""
    trainer = build(data_parallel, 8, directory)
    if data_parallel.is_main:
        trainer.callbacks.append(StopAtUpdate(2))
    summary = trainer.train(total_updates=10)
    return {"num_updates": summary["num_updates"], "stopped_early": trainer.stopped_early}


def main() -> None:
    names, directory = sys.argv[1].split(","), Path(sys.argv[2])
    torch.set_num_threads(1)
    scenarios = {"match": match, "modes": modes, "compiled": compiled, "early_stop": early_stop}
    data_parallel = join("cpu", timeout_seconds=120)
    try:
        for scenario in names:
            result = scenarios[scenario](data_parallel, directory)
            name = f"{scenario}-rank{data_parallel.rank}-of-{data_parallel.world_size}.pt"
            torch.save(result, directory / name)
    finally:
        leave(data_parallel)
    exit_rank(0)


if __name__ == "__main__":
    main()
