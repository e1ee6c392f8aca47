"""Variance and bias of the analytic policy gradient against the window length.

Method (float64 throughout, one policy held fixed):

1. Start states: ``--samples`` envs run the stochastic policy from reset for a
   random number of steps in ``[0, --max-offset)`` each, so the starts cover
   the pole hanging, swinging and (for a trained policy) upright.
2. Analytic gradient (what APG backpropagates): from every start, one rollout
   of ``max(windows)`` steps with the reparameterised policy (its own fixed
   Gaussian noise per sample and step). For each window length ``h`` the
   objective is the window's discounted return ``J_h = sum_{t<h} gamma^t r_t``
   (the discount restarts at each window, as in APG); every sample has its own
   copy of the parameters, so one backward pass gives all per-sample
   gradients ``g_i``. Reported: the norm of their mean, the mean and median of
   the per-sample norms, the relative variance ``tr Cov / |E g|^2`` (about the
   number of samples needed for a signal-to-noise ratio of 1; ``|E g|^2`` is
   estimated without bias as ``|mean|^2 - tr Cov / n``, ``inf``: no detectable
   mean) and the fraction of samples whose norm exceeds 100x the median.
3. Reference (bias): a likelihood-ratio (REINFORCE) estimate of the gradient of
   the long-horizon expected return ``E[sum_{t<H} gamma^t r_t]`` from the same
   starts, with ``--lr-rollouts`` rollouts per start, reward-to-go and a
   leave-one-out baseline. It is unbiased for the same expectation as the
   analytic gradient at ``h = H`` but does not differentiate the dynamics, so
   chaos does not inflate it. Reported: ``cos(mean g_h, reference)`` with a
   jackknife standard error over blocks of starts, plus the reference's own
   relative standard error and split-half cosine (its noise ceiling).

Rollouts step the env's pure physics (``_dynamics_and_reward``), without time
limits or resets, so a window may run past the end of the start's episode.

Run: ``OMP_NUM_THREADS=1 python benchmarks/gradient_variance.py [--env CartPoleSwingUp]
[--checkpoint RUN_DIR_OR_PT] [--samples 256] [--lr-rollouts 16] [--json PATH]``
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = {"CartPoleSwingUp": "cartpole_swingup.yaml", "Pendulum": "pendulum.yaml"}
WINDOWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 500)
COLUMNS = (
    "h",
    "norm of mean",
    "mean norm",
    "median norm",
    "rel. variance",
    "exploded (>100x median)",
    "cos to reference",
)
Params = dict[str, torch.Tensor]


def build(env_name: str, num_envs: int, seed: int, checkpoint: str | None = None):
    """Float64 env, policy (untrained as in the config, or a checkpoint's) and normalizer."""
    from pathgrad.env import build_learning_env
    from pathgrad.runs.config import env_kwargs, load_config
    from pathgrad.runs.run import build_policy

    normalizer = None
    if checkpoint is None:
        config = load_config(ROOT / "configs" / CONFIGS[env_name], [f"trainer.seed={seed}"])
    else:
        from pathgrad.runs.loading import load_for_evaluation

        config, state, path = load_for_evaluation(Path(checkpoint), "cpu")
    kwargs = env_kwargs(config)
    if config.env.name == "Pendulum":
        kwargs["match_gymnasium_precision"] = False  # plain float64 kernels
    env = build_learning_env(
        config.env.name, num_envs=num_envs, device="cpu", dtype="float64", seed=seed, **kwargs
    )
    if checkpoint is None:
        torch.manual_seed(seed)
        policy = build_policy(config, env)
    else:
        from pathgrad.runs.loading import policy_from_checkpoint

        policy, normalizer = policy_from_checkpoint(config, state, env, path)
    policy = policy.double()
    normalize = normalizer.normalize if normalizer is not None else (lambda obs: obs)
    return env, policy, normalize


def per_sample_params(policy: nn.Module, n: int) -> Params:
    """``n`` copies of every parameter (leading dim), leaves for per-sample gradients."""
    return {
        name: p.detach().expand(n, *p.shape).clone().requires_grad_(True)
        for name, p in policy.named_parameters()
    }


def policy_mean(policy: nn.Module, params: Params, obs: torch.Tensor) -> torch.Tensor:
    """Pre-squash mean ``[n, ..., A]`` of ``obs`` ``[n, ..., D]``; sample ``i`` uses ``params[i]``.

    The same computation as ``policy.mean_net``, with per-sample weights.
    """
    hidden = obs
    for index, layer in enumerate(policy.mean_net):
        if isinstance(layer, nn.Linear):
            weight, bias = params[f"mean_net.{index}.weight"], params[f"mean_net.{index}.bias"]
            shape = (bias.shape[0],) + (1,) * (hidden.ndim - 2) + (bias.shape[1],)
            hidden = torch.einsum("noi,n...i->n...o", weight, hidden) + bias.view(shape)
        else:
            hidden = layer(hidden)
    return hidden


def squash(policy: nn.Module, pre: torch.Tensor) -> torch.Tensor:
    """The action the env receives for the pre-squash sample ``pre``."""
    if policy.squash:
        return policy.action_center + policy.action_half_range * torch.tanh(pre)
    return pre


def sample_starts(env, policy, normalize, n: int, max_offset: int, generator) -> dict:
    """States reached after ``U[0, max_offset)`` on-policy steps from reset, one per sample."""
    env.reset(seed=int(torch.randint(0, 2**31, (1,), generator=generator)))
    state, starts = env.state, {key: value.clone() for key, value in env.state.items()}
    offsets = torch.randint(0, max(max_offset, 1), (n,), generator=generator)
    with torch.no_grad():
        for step in range(1, max_offset):
            obs = normalize(env._observe(state))
            noise = torch.randn(n, env.action_dim, generator=generator, dtype=torch.float64)
            action = policy.action_from_noise(obs, noise)["action"]
            state, _ = env._dynamics_and_reward(state, action)
            for key in starts:
                starts[key] = torch.where(offsets == step, state[key], starts[key])
    return starts


def analytic_gradients(env, policy, normalize, starts, noise, windows, gamma) -> dict:
    """Per-sample gradients ``{h: [n, P]}`` of each window's return, one shared rollout."""
    n = noise.shape[1]
    params = per_sample_params(policy, n)
    state, total, prefix = dict(starts), 0.0, {}
    for step in range(max(windows)):
        obs = normalize(env._observe(state))
        pre = policy_mean(policy, params, obs) + params["log_std"].exp() * noise[step]
        state, reward = env._dynamics_and_reward(state, squash(policy, pre))
        total = total + gamma**step * reward
        if step + 1 in windows:
            prefix[step + 1] = total
    grads = {}
    for h in windows:
        parts = torch.autograd.grad(prefix[h].sum(), list(params.values()), retain_graph=True)
        grads[h] = torch.cat([part.reshape(n, -1) for part in parts], dim=1)
    return grads


def reference_gradients(env, policy, normalize, starts, horizon, gamma, rollouts, generator):
    """Likelihood-ratio gradients ``[n, P]`` of ``E[sum_{t<H} gamma^t r_t]`` per start."""
    n, m = next(iter(starts.values())).shape[0], rollouts
    state = {key: value.repeat_interleave(m, 0) for key, value in starts.items()}
    observations, samples, rewards = [], [], []
    with torch.no_grad():
        for step in range(horizon):
            obs = normalize(env._observe(state))
            noise = torch.randn(n * m, env.action_dim, generator=generator, dtype=torch.float64)
            pre = policy.mean_net(obs) + policy.log_std.exp() * noise
            state, reward = env._dynamics_and_reward(state, squash(policy, pre))
            observations.append(obs.view(n, m, -1))
            samples.append(pre.view(n, m, -1))
            rewards.append(gamma**step * reward.view(n, m))
        to_go = torch.stack(rewards).flip(0).cumsum(0).flip(0)  # [H, n, m]
        baseline = (to_go.sum(-1, keepdim=True) - to_go) / max(m - 1, 1)
        advantage = to_go - baseline if m > 1 else to_go
    params = per_sample_params(policy, n)
    for begin in range(0, horizon, 50):  # chunks bound the memory of the backward
        obs = torch.stack(observations[begin : begin + 50], dim=1)  # [n, T, m, D]
        pre = torch.stack(samples[begin : begin + 50], dim=1)
        log_std = params["log_std"].view(n, 1, 1, -1)
        standard = (pre - policy_mean(policy, params, obs)) / log_std.exp()
        log_prob = (-0.5 * standard.square() - log_std).sum(-1)  # [n, T, m]
        weight = advantage[begin : begin + 50].permute(1, 0, 2)
        ((weight * log_prob).sum() / m).backward()
    return torch.cat([p.grad.reshape(n, -1) for p in params.values()], dim=1)


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(a @ b / (a.norm() * b.norm()))


def jackknife_cosine(grads, reference, blocks: int = 16) -> tuple[float, float]:
    """Cosine of the two mean gradients and its jackknife standard error over blocks of starts."""
    block = torch.arange(grads.shape[0]) % blocks
    total, ref_total = grads.sum(0), reference.sum(0)
    values = [
        cosine(total - grads[block == k].sum(0), ref_total - reference[block == k].sum(0))
        for k in range(blocks)
    ]
    mean = sum(values) / blocks
    spread = math.sqrt((blocks - 1) / blocks * sum((v - mean) ** 2 for v in values))
    return cosine(total, ref_total), spread


def gradient_stats(grads: torch.Tensor, reference: torch.Tensor | None = None) -> dict:
    """The table's statistics of per-sample gradients ``[n, P]``."""
    n = grads.shape[0]
    norms = grads.norm(dim=1)
    median = float(norms.median())
    mean = grads.mean(0)
    trace = float(((grads - mean) ** 2).sum(1).sum() / max(n - 1, 1))
    signal = float(mean.norm()) ** 2 - trace / n  # unbiased estimate of |E g|^2
    row = {
        "norm_of_mean": float(mean.norm()),
        "mean_norm": float(norms.mean()),
        "median_norm": median,
        "relative_variance": trace / signal if signal > 0 else math.inf,
        "exploded_fraction": float((~(norms <= 100 * median)).double().mean()),
    }
    if reference is not None:
        row["cosine"], row["cosine_se"] = jackknife_cosine(grads, reference)
    return row


def reference_quality(reference: torch.Tensor) -> dict:
    """Relative standard error of the reference's mean and the cosine of its two halves."""
    n = reference.shape[0]
    mean = reference.mean(0)
    trace = float(((reference - mean) ** 2).sum(1).sum() / (n - 1))
    return {
        "norm_of_mean": float(mean.norm()),
        "relative_standard_error": math.sqrt(trace / n) / float(mean.norm()),
        "split_half_cosine": cosine(reference[0::2].mean(0), reference[1::2].mean(0)),
    }


def run(env_name="CartPoleSwingUp", checkpoint=None, samples=256, **options) -> dict:
    """Every statistic of the table for one policy, as a dict (see :func:`table`).

    ``options``: ``windows``, ``horizon`` (H), ``gamma``, ``lr_rollouts`` (0: no
    reference), ``max_offset`` and ``seed``, defaulting as on the command line.
    """
    settings = {"windows": WINDOWS, "horizon": 500, "gamma": 0.99, "lr_rollouts": 16}
    settings.update({"max_offset": 500, "seed": 0, **options})
    seed, gamma, horizon = settings["seed"], settings["gamma"], settings["horizon"]
    generator = torch.Generator().manual_seed(seed)
    env, policy, normalize = build(env_name, samples, seed, checkpoint)
    windows = settings["windows"] = [h for h in settings["windows"] if h <= horizon]
    starts = sample_starts(env, policy, normalize, samples, settings["max_offset"], generator)
    shape = (max(windows), samples, env.action_dim)
    noise = torch.randn(shape, generator=generator, dtype=torch.float64)
    begin = time.time()
    grads = analytic_gradients(env, policy, normalize, starts, noise, windows, gamma)
    reference = None
    if settings["lr_rollouts"] > 0:
        reference = reference_gradients(
            env, policy, normalize, starts, horizon, gamma, settings["lr_rollouts"], generator
        )
    return {
        "env": env_name,
        "checkpoint": checkpoint,
        "samples": samples,
        **settings,
        "parameters": grads[windows[0]].shape[1],
        "reference": reference_quality(reference) if reference is not None else None,
        "rows": [{"h": h, **gradient_stats(grads[h], reference)} for h in windows],
        "seconds": time.time() - begin,
    }


def table(result: dict) -> str:
    """Markdown table of :func:`run`'s result."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---:|" * len(COLUMNS)]
    for row in result["rows"]:
        cos = f"{row['cosine']:+.3f} ± {row['cosine_se']:.3f}" if "cosine" in row else "-"
        lines.append(
            f"| {row['h']} | {row['norm_of_mean']:.3g} | {row['mean_norm']:.3g} "
            f"| {row['median_norm']:.3g} | {row['relative_variance']:.3g} "
            f"| {row['exploded_fraction']:.3f} | {cos} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=sorted(CONFIGS), default="CartPoleSwingUp")
    parser.add_argument("--checkpoint", help="run directory or checkpoint (default: untrained)")
    parser.add_argument("--samples", type=int, default=256, help="start states (one noise each)")
    parser.add_argument("--windows", type=int, nargs="+", default=list(WINDOWS))
    parser.add_argument("--horizon", type=int, default=None, help="reference horizon H")
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--lr-rollouts", type=int, default=16, help="0: no reference")
    parser.add_argument("--max-offset", type=int, default=None, help="default: episode length")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    length = {"CartPoleSwingUp": 500, "Pendulum": 200}[args.env]
    args.horizon, args.max_offset = args.horizon or length, args.max_offset or length
    options = ("windows", "horizon", "gamma", "lr_rollouts", "max_offset", "seed")
    result = run(args.env, args.checkpoint, args.samples, **{k: getattr(args, k) for k in options})
    policy = args.checkpoint or "untrained policy"
    print(
        f"{args.env}, {policy}: {result['samples']} starts, {result['parameters']} parameters, "
        f"gamma {args.gamma}, reference H={result['horizon']} "
        f"({result['lr_rollouts']} likelihood-ratio rollouts per start)"
    )
    if result["reference"]:
        quality = result["reference"]
        print(
            f"reference: norm of mean {quality['norm_of_mean']:.3g}, "
            f"relative standard error {quality['relative_standard_error']:.2f}, "
            f"split-half cosine {quality['split_half_cosine']:+.2f}"
        )
    print(table(result))
    print(f"({result['seconds']:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
