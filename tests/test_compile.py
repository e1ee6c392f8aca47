"""The torch.compile path trains like eager (compiled env step and policy network)."""

from __future__ import annotations

import pytest
import torch

from helpers import build_point_mass_trainer, learning_state
from pathgrad.envs import Pendulum


@pytest.mark.slow
def test_torch_compile_gives_the_results_of_eager(tmp_path):
    settings = {"dtype": "float64", "eval_frequency_steps": 0}
    eager = build_point_mass_trainer(tmp_path / "eager", **settings)
    eager.train(total_updates=3)
    compiled = build_point_mass_trainer(tmp_path / "compiled", torch_compile=True, **settings)
    compiled.train(total_updates=3)
    assert hasattr(compiled.policy._distribution, "_torchdynamo_orig_callable")
    for name, value in learning_state(eager).items():
        assert torch.allclose(value, learning_state(compiled)[name], rtol=1e-9, atol=1e-12), name
    assert list(compiled.ret_window) == pytest.approx(list(eager.ret_window), rel=1e-9)


@pytest.mark.slow
def test_compiled_step_equals_the_eager_step():
    eager = Pendulum(8, dtype="float64", match_gymnasium_precision=False, seed=0)
    compiled = Pendulum(8, dtype="float64", match_gymnasium_precision=False, seed=0)
    compiled.compile_step()
    eager.reset(seed=1)
    compiled.reset(seed=1)
    for step in range(5):
        action = torch.full((8, 1), 0.3 * step, dtype=torch.float64)
        for ours, theirs in zip(compiled.step(action)[:4], eager.step(action)[:4], strict=True):
            assert torch.allclose(ours, theirs, rtol=1e-12, atol=1e-12)
