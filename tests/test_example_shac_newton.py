"""examples/shac_newton.py: the single-file SHAC example trains on a Newton robot."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("newton", reason="needs Newton: pip install 'pathgrad[newton]'")
pytestmark = pytest.mark.xdist_group("newton")  # Warp kernels are built once per worker

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "shac_newton.py"


def load_example():
    spec = importlib.util.spec_from_file_location("shac_newton_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shac_example_trains_and_differentiates_through_the_simulator(capsys):
    example = load_example()
    argv = ["--env", "DiffRLHopper", "--iterations", "2", "--num-envs", "4", "--horizon", "4",
            "--critic-epochs", "2", "--log-every", "1", "--threads", "1", "--eval"]  # fmt: skip
    threads = torch.get_num_threads()
    try:
        with torch.random.fork_rng():  # main seeds the global generator
            result = example.main(argv)
    finally:
        torch.set_num_threads(threads)

    history = result["history"]
    assert len(history) == 2
    for entry in history:
        for key in ("actor_loss", "critic_loss", "reward", "grad_norm"):
            assert math.isfinite(entry[key]), (key, entry)
        # The window objective's gradient reaches the actions through the simulator.
        assert math.isfinite(entry["action_grad_norm"]) and entry["action_grad_norm"] > 0.0
    changed = [
        not torch.equal(before, result["actor"].state_dict()[name])
        for name, before in result["initial_actor"].items()
    ]
    assert any(changed), "the actor's parameters did not change"
    assert math.isfinite(result["eval_return"])
    output = capsys.readouterr().out
    assert "iter    2" in output and "eval: deterministic episode return" in output


def test_td_lambda_targets_of_the_example():
    example = load_example()
    rewards, values = torch.ones(3, 1), torch.full((3, 1), 10.0)
    no = torch.zeros(3, 1, dtype=torch.bool)
    # lam = 1 without episode ends: the window's discounted return plus gamma^3 V(s_3).
    targets = example.td_lambda(rewards, values, no, no, 0.5, 1.0)
    assert targets[0].item() == pytest.approx(1 + 0.5 + 0.25 + 0.125 * 10)
    # A termination at t = 1 ends the sum there, with no value after it.
    ended = torch.tensor([[False], [True], [False]])
    targets = example.td_lambda(rewards, values, ended, ended, 0.5, 1.0)
    assert targets[1].item() == 1.0 and targets[0].item() == pytest.approx(1.5)
