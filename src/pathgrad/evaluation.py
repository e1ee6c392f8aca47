"""Evaluation of a policy over a fixed number of complete episodes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from pathgrad.env import DifferentiableVecEnv
from pathgrad.policies import Policy, as_tensor_policy

__all__ = ["EPISODE_SELECTIONS", "PATHGRAD_EVALUATION", "VECTOR_METRICS", "evaluate_episodes"]

# "per_env": env i contributes its first quota_i episodes (quotas differ by at
# most one), so short episodes are not favoured. "first_completed": the first
# episodes to finish, in step order then env order (the reference's rule).
EPISODE_SELECTIONS = ("per_env", "first_completed")
# Metrics shaped [N, K] with K > 1: "drop" them (the reference), or report
# "components" <name>/<i>.
VECTOR_METRICS = ("drop", "components")
# pathgrad's own choices, which its trainer, `pathgrad eval` and benchmarks pass:
# unbiased episodes (docs/porting.md measures the bias of "first_completed"),
# short keys, every component of vector metrics. The defaults are the reference's.
PATHGRAD_EVALUATION: dict[str, str] = {
    "episode_selection": "per_env",
    "metric_prefix": "eval/",
    "vector_metrics": "components",
}


@torch.no_grad()
def evaluate_episodes(
    policy: Policy,
    env: DifferentiableVecEnv,
    num_episodes: int,
    device: torch.device | str,
    seed: int | None = None,
    observation_transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    max_steps: int | None = None,
    *,
    action_transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
    on_step: Callable[[Any], None] | None = None,
    episode_selection: str = "first_completed",
    metric_prefix: str = "eval/metrics/",
    vector_metrics: str = "drop",
) -> dict[str, float]:
    """Run deterministic actions until exactly ``num_episodes`` episodes complete.

    The defaults are the reference's: the first ``num_episodes`` episodes to
    finish count (``episode_selection="first_completed"``, in step order then
    env order), env metrics are reported as ``eval/metrics/<name>`` and metrics
    with several values per env are dropped. pathgrad's trainer and commands
    pass :data:`PATHGRAD_EVALUATION` instead: with ``"per_env"`` env ``i``
    contributes its first ``num_episodes // N`` (one more for the first
    ``num_episodes % N`` envs) episodes, so short episodes are not favoured.
    The policy's train/eval mode is restored afterwards.

    Success is read from ``info["success"]`` when the env gives it there (it
    wins), otherwise from ``info["metrics"]["success"]``. Each other entry of
    ``info["metrics"]`` shaped ``[N]`` or ``[N, 1]`` is reported as its mean
    under ``<prefix><name>``; one shaped ``[N, ...]`` with more values per env
    (e.g. a ``[N, 2]`` final position) is dropped, or with
    ``vector_metrics="components"`` flattened per env, component ``i``
    reported under ``<prefix><name>/<i>``. Entries that are not per env
    (no leading ``N`` dimension) are ignored. A metric is averaged over the
    counted episodes whose final step reported it.

    Args:
        policy: Policy to evaluate (``get_action`` with ``deterministic=True``),
            of either calling convention (tensors or the reference's TensorDicts).
        env: Env to run; it is reset (with ``seed``) first.
        num_episodes: Episodes to count.
        device: Device of the statistics.
        seed: Optional reset seed, for repeatable evaluations.
        observation_transform: Applied to observations before the policy
            (the training observation normalizer).
        max_steps: Safety limit on vector steps; by default enough for every
            quota when the env has ``max_episode_steps``, otherwise 100000.
        action_transform: Applied to the policy's action before ``env.step``
            (e.g. the clamp to the action space the trainer trains with);
            off by default.
        on_step: Called with each step's raw ``info``.
        episode_selection: ``first_completed`` (default) or ``per_env``.
        metric_prefix: Prefix of the env metrics' keys (pathgrad's: ``"eval/"``).
        vector_metrics: ``drop`` (default) or ``components``.

    Returns:
        ``eval/avg_reward``, ``eval/avg_length``, ``eval/success_rate`` (NaN if
        the env reports no success) and the env metrics as described above.

    Raises:
        ValueError: If ``num_episodes`` is not positive or
            ``episode_selection`` or ``vector_metrics`` is unknown.
        RuntimeError: If the episodes do not complete within ``max_steps``.
    """
    if num_episodes <= 0:
        raise ValueError(f"num_episodes must be positive, got {num_episodes}.")
    if episode_selection not in EPISODE_SELECTIONS:
        raise ValueError(
            f"episode_selection must be one of {list(EPISODE_SELECTIONS)}, "
            f"got '{episode_selection}'."
        )
    if vector_metrics not in VECTOR_METRICS:
        raise ValueError(
            f"vector_metrics must be one of {list(VECTOR_METRICS)}, got '{vector_metrics}'."
        )
    acting = as_tensor_policy(policy)
    device = torch.device(device)
    num_envs = int(env.num_envs)
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
        counted_total = torch.zeros((), dtype=torch.long, device=device)
        episode_return = torch.zeros(num_envs, dtype=torch.float64, device=device)
        episode_length = torch.zeros(num_envs, dtype=torch.float64, device=device)
        sums = _Sums()  # return, length, success
        env_metrics = _Sums()
        for _ in range(max_steps):
            policy_input = (
                observation if observation_transform is None else observation_transform(observation)
            )
            action = acting.get_action(policy_input, deterministic=True)
            if action_transform is not None:
                action = action_transform(action)
            observation, reward, terminated, truncated, info = env.step(action)
            if on_step is not None:
                on_step(info)
            reward = torch.as_tensor(reward, device=device).reshape(num_envs)
            episode_return += reward.to(torch.float64)
            episode_length += 1
            done = (
                torch.as_tensor(terminated, device=device, dtype=torch.bool)
                | torch.as_tensor(truncated, device=device, dtype=torch.bool)
            ).reshape(num_envs)
            if episode_selection == "per_env":
                counted = done & (completed < quota)
            else:
                order = torch.cumsum(done.long(), dim=0)
                counted = done & (order <= num_episodes - counted_total)
            weight = counted.to(torch.float64)
            sums.add("return", episode_return, weight)
            sums.add("length", episode_length, weight)
            info = info if isinstance(info, Mapping) else {}
            _add_info(sums, env_metrics, info, weight, num_envs, device, vector_metrics)
            completed += done.long()
            counted_total += counted.long().sum()
            episode_return = torch.where(done, torch.zeros_like(episode_return), episode_return)
            episode_length = torch.where(done, torch.zeros_like(episode_length), episode_length)
            finished = (
                (completed >= quota).all()
                if episode_selection == "per_env"
                else counted_total >= num_episodes
            )
            if bool(finished):
                break
        else:
            raise RuntimeError(
                f"Evaluation did not complete {num_episodes} episodes in {max_steps} steps."
            )
    finally:
        policy.train(was_training)
    means = sums.means()
    metrics = {
        "eval/avg_reward": means.pop("return"),
        "eval/avg_length": means.pop("length"),
        "eval/success_rate": means.pop("success", float("nan")),
    }
    metrics.update({metric_prefix + name: value for name, value in env_metrics.means().items()})
    return metrics


class _Sums:
    """Weighted sums and weights per key, kept on the device until the end."""

    def __init__(self) -> None:
        self.totals: dict[str, torch.Tensor] = {}
        self.weights: dict[str, torch.Tensor] = {}

    def add(self, key: str, values: torch.Tensor, weight: torch.Tensor) -> None:
        self.totals[key] = self.totals.get(key, 0.0) + (values * weight).sum()
        self.weights[key] = self.weights.get(key, 0.0) + weight.sum()

    def means(self) -> dict[str, float]:
        result = {}
        for key, total in self.totals.items():
            weight = float(self.weights[key])
            if weight > 0:
                result[key] = float(total) / weight
        return result


def _per_env(value: Any, num_envs: int, device: torch.device) -> torch.Tensor | None:
    """``value`` as float64 ``[N, K]``, or ``None`` if it is not one entry per env."""
    try:
        tensor = torch.as_tensor(value, device=device)
    except (TypeError, ValueError, RuntimeError):
        return None
    if tensor.ndim == 0 or tensor.shape[0] != num_envs or tensor.numel() == 0:
        return None
    return tensor.detach().reshape(num_envs, -1).to(torch.float64)


def _add_info(
    sums: _Sums,
    env_metrics: _Sums,
    info: Mapping[str, Any],
    weight: torch.Tensor,
    num_envs: int,
    device: torch.device,
    vector_metrics: str,
) -> None:
    """Add one step's success to ``sums`` and its per-env metrics to ``env_metrics``."""
    metrics = info.get("metrics", {})
    metrics = metrics if isinstance(metrics, Mapping) else {}
    success = _per_env(info["success"], num_envs, device) if "success" in info else None
    if success is None:
        success = _per_env(metrics["success"], num_envs, device) if "success" in metrics else None
    if success is not None and success.shape[1] == 1:
        sums.add("success", success[:, 0], weight)
    for name, value in metrics.items():
        if name == "success":
            continue
        values = _per_env(value, num_envs, device)
        if values is None:
            continue
        if values.shape[1] == 1:
            env_metrics.add(str(name), values[:, 0], weight)
        elif vector_metrics == "components":
            for index in range(values.shape[1]):
                env_metrics.add(f"{name}/{index}", values[:, index], weight)
