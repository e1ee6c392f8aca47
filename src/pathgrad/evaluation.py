"""Evaluation of a policy over a fixed number of complete episodes."""

from __future__ import annotations

from collections.abc import Callable

import torch

from pathgrad.env import DifferentiableVecEnv
from pathgrad.policies import Policy

__all__ = ["evaluate_episodes"]


@torch.no_grad()
def evaluate_episodes(
    policy: Policy,
    env: DifferentiableVecEnv,
    num_episodes: int,
    device: torch.device | str,
    seed: int | None = None,
    observation_transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    max_steps: int | None = None,
) -> dict[str, float]:
    """Run deterministic actions until exactly ``num_episodes`` episodes complete.

    Episodes are spread over the batch: env ``i`` contributes its first
    ``num_episodes // N`` (one more for the first ``num_episodes % N`` envs)
    episodes, so short episodes are not favoured. The policy's train/eval
    mode is restored afterwards.

    Args:
        policy: Policy to evaluate (``get_action`` with ``deterministic=True``).
        env: Env to run; it is reset (with ``seed``) first.
        num_episodes: Episodes to count.
        device: Device of the statistics.
        seed: Optional reset seed, for repeatable evaluations.
        observation_transform: Applied to observations before the policy
            (the training observation normalizer).
        max_steps: Safety limit on vector steps; by default enough for every
            quota when the env has ``max_episode_steps``, otherwise 100000.

    Returns:
        ``eval/avg_reward``, ``eval/avg_length``, ``eval/success_rate`` (NaN if
        the env reports no ``success`` metric) and ``eval/<name>``: the mean of
        each ``info["metrics"]`` entry at the end of the counted episodes.

    Raises:
        ValueError: If ``num_episodes`` is not positive.
        RuntimeError: If the episodes do not complete within ``max_steps``.
    """
    if num_episodes <= 0:
        raise ValueError(f"num_episodes must be positive, got {num_episodes}.")
    device = torch.device(device)
    num_envs = env.num_envs
    quota = torch.full((num_envs,), num_episodes // num_envs, device=device)
    quota[: num_episodes % num_envs] += 1
    if max_steps is None:
        episode_limit = getattr(env, "max_episode_steps", None)
        max_steps = 100_000 if episode_limit is None else int(episode_limit) * int(quota.max())
    was_training = policy.training
    policy.eval()
    try:
        observation, _ = env.reset(seed=seed)
        completed = torch.zeros(num_envs, dtype=torch.long, device=device)
        episode_return = torch.zeros(num_envs, dtype=torch.float64, device=device)
        episode_length = torch.zeros(num_envs, dtype=torch.float64, device=device)
        totals: dict[str, torch.Tensor] = {}
        for _ in range(max_steps):
            policy_input = (
                observation
                if observation_transform is None
                else (observation_transform(observation))
            )
            action = policy.get_action(policy_input, deterministic=True)
            observation, reward, terminated, truncated, info = env.step(action)
            episode_return += reward.to(device, torch.float64)
            episode_length += 1
            done = (terminated | truncated).to(device)
            counted = (done & (completed < quota)).to(torch.float64)
            _add(totals, "return", episode_return * counted)
            _add(totals, "length", episode_length * counted)
            for name, value in info.get("metrics", {}).items():
                _add(totals, name, value.to(device, torch.float64) * counted)
            completed += done.long()
            episode_return = torch.where(done, torch.zeros_like(episode_return), episode_return)
            episode_length = torch.where(done, torch.zeros_like(episode_length), episode_length)
            if bool((completed >= quota).all()):
                break
        else:
            raise RuntimeError(
                f"Evaluation did not complete {num_episodes} episodes in {max_steps} steps."
            )
    finally:
        policy.train(was_training)
    means = {name: float(total) / num_episodes for name, total in totals.items()}
    metrics = {
        "eval/avg_reward": means.pop("return"),
        "eval/avg_length": means.pop("length"),
        "eval/success_rate": means.pop("success", float("nan")),
    }
    metrics.update({f"eval/{name}": value for name, value in means.items()})
    return metrics


def _add(totals: dict[str, torch.Tensor], name: str, values: torch.Tensor) -> None:
    totals[name] = totals.get(name, 0.0) + values.sum()
