"""benchmarks/gradient_variance.py: its per-sample analytic gradients and its table."""

from __future__ import annotations

import importlib.util

import torch

from helpers import ROOT


def load_script():
    spec = importlib.util.spec_from_file_location(
        "gradient_variance", ROOT / "benchmarks" / "gradient_variance.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def window_returns(env, policy, starts, noise, steps, gamma):
    """Per-sample discounted return of ``steps`` steps through the policy's own forward pass."""
    state, total = dict(starts), 0.0
    for step in range(steps):
        action = policy.action_from_noise(env._observe(state), noise[step])["action"]
        state, reward = env._dynamics_and_reward(state, action)
        total = total + gamma**step * reward
    return total


def test_window_gradients_match_central_differences_and_the_table_has_its_columns():
    gv = load_script()
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    samples, windows, gamma = 8, [1, 2], 0.99
    env, policy, normalize = gv.build("CartPoleSwingUp", samples, seed=0)
    assert env.dtype == torch.float64 and policy.log_std.dtype == torch.float64
    starts = gv.sample_starts(env, policy, normalize, samples, 40, generator)
    noise = torch.randn(2, samples, 1, generator=generator, dtype=torch.float64)
    grads = gv.analytic_gradients(env, policy, normalize, starts, noise, windows, gamma)
    assert grads[1].shape == (samples, sum(p.numel() for p in policy.parameters()))

    parameters = list(policy.parameters())
    base = [p.detach().clone() for p in parameters]
    epsilon = 1e-6
    for h in windows:
        for _ in range(3):  # random directions: per-sample directional derivatives
            direction = [torch.randn_like(p) for p in parameters]
            flat = torch.cat([d.reshape(-1) for d in direction])
            values = []
            for sign in (1.0, -1.0):
                with torch.no_grad():
                    for p, p0, d in zip(parameters, base, direction, strict=True):
                        p.copy_(p0 + sign * epsilon * d)
                    values.append(window_returns(env, policy, starts, noise, h, gamma))
            with torch.no_grad():
                for p, p0 in zip(parameters, base, strict=True):
                    p.copy_(p0)
            finite_difference = (values[0] - values[1]) / (2 * epsilon)
            analytic = grads[h] @ flat
            error = (analytic - finite_difference).abs().max()
            assert error <= 1e-6 * finite_difference.abs().max(), (h, error)

    result = gv.run(
        "CartPoleSwingUp", samples=16, windows=(1, 2, 4), horizon=8, lr_rollouts=2, max_offset=10
    )
    header = gv.table(result).splitlines()[0]
    assert [cell.strip() for cell in header.strip("|").split("|")] == list(gv.COLUMNS)
    assert [row["h"] for row in result["rows"]] == [1, 2, 4]
    assert {"relative_variance", "exploded_fraction", "cosine", "cosine_se"} <= set(
        result["rows"][0]
    )
