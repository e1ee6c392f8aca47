"""The compiled whole update: its optimizer step, skips, fallbacks and resume.

The end-to-end float64 comparison with eager training, compiled, is in
``test_compile.py``; here the same functions run uncompiled (they are pure
tensor code), so the logic is tested without paying for compilation.
"""

from __future__ import annotations

import pytest
import torch

from helpers import build_point_mass_trainer, learning_state
from pathgrad.compiled.adam import adam_constants, clipped_adam_step


def _uncompiled(trainer):
    """Run the trainer's compiled update with its functions uncompiled (same code)."""
    update = trainer.compiled_update
    assert update is not None
    update._compiled_chunk = update._chunk
    update.optimizer_step._compiled = clipped_adam_step
    return trainer


def _whole_update_trainer(path, **overrides):
    settings = {
        "dtype": "float64",
        "eval_frequency_steps": 0,
        "action_adjoint_max_norm": 0.0,
        "compile_chunk_steps": 3,
        "torch_compile": True,
        **overrides,
    }
    return _uncompiled(build_point_mass_trainer(path, **settings))


@pytest.mark.parametrize("name", ["adam", "adamw"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_optimizer_step_equals_clip_and_torch_optim(name, weight_decay):
    torch.manual_seed(0)
    shapes = [(4, 3), (3,), (2,)]
    ours = [torch.randn(shape, dtype=torch.float64) for shape in shapes]
    theirs = [value.clone().requires_grad_() for value in ours]
    kind = torch.optim.Adam if name == "adam" else torch.optim.AdamW
    optimizer = kind(theirs, lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=weight_decay)
    constants = adam_constants(optimizer, 0.7, 0.0)
    exp_avgs = [torch.zeros_like(value) for value in ours]
    exp_avg_sqs = [torch.zeros_like(value) for value in ours]
    steps = [torch.zeros(()) for _ in ours]
    for update in range(3):
        gradients = [torch.randn(shape, dtype=torch.float64) * (update + 1) for shape in shapes]
        for parameter, gradient in zip(theirs, gradients, strict=True):
            parameter.grad = gradient.clone()
        expected_norm = torch.nn.utils.clip_grad_norm_(theirs, 0.7)
        optimizer.step()
        learning_rate = torch.tensor(0.05, dtype=torch.float64)
        loss = torch.tensor(1.0, dtype=torch.float64)
        norm, finite, applied = clipped_adam_step(
            ours, gradients, exp_avgs, exp_avg_sqs, steps, learning_rate, loss, constants
        )
        assert bool(finite) and bool(applied)
        assert torch.allclose(norm, expected_norm, rtol=1e-14)
        for value, parameter in zip(ours, theirs, strict=True):
            assert torch.allclose(value, parameter.detach(), rtol=1e-12, atol=1e-14)
        state = optimizer.state[theirs[0]]
        assert torch.allclose(exp_avgs[0], state["exp_avg"], rtol=1e-12)
        assert torch.allclose(exp_avg_sqs[0], state["exp_avg_sq"], rtol=1e-12)
        assert float(steps[0]) == float(state["step"]) == update + 1


@pytest.mark.parametrize("case", ["nan-gradient", "nan-loss", "norm-over-limit"])
def test_a_skipped_optimizer_step_changes_nothing(case):
    parameters = [torch.ones(3, dtype=torch.float64)]
    gradients = [torch.full((3,), float("nan") if case == "nan-gradient" else 2.0).double()]
    states = [torch.full((3,), 0.5, dtype=torch.float64) for _ in range(2)]
    steps = [torch.tensor(4.0)]
    loss = torch.tensor(float("nan") if case == "nan-loss" else 1.0, dtype=torch.float64)
    limit = 1.0 if case == "norm-over-limit" else 0.0
    constants = (0.9, 0.999, 1e-8, 0.0, False, 1.0, limit)
    before = [tensor.clone() for tensor in (*parameters, *states, *steps)]
    norm, finite, applied = clipped_adam_step(
        parameters, gradients, states[:1], states[1:], steps,
        torch.tensor(0.1, dtype=torch.float64), loss, constants,
    )  # fmt: skip
    assert not bool(applied)
    assert bool(finite) is (case == "norm-over-limit")
    for old, new in zip(before, (*parameters, *states, *steps), strict=True):
        assert torch.equal(old, new)
    if case == "norm-over-limit":
        assert float(norm) == pytest.approx(12**0.5)


def test_compiled_update_matches_eager_training_and_reports_its_first_update(tmp_path):
    eager = build_point_mass_trainer(
        tmp_path / "eager", dtype="float64", eval_frequency_steps=0, action_adjoint_max_norm=0.0
    )
    eager.train(total_updates=3)
    ours = _whole_update_trainer(tmp_path / "ours")
    summary = ours.train(total_updates=3)
    assert summary["compile_scope"] == "update"
    assert summary["first_compiled_update_seconds"] > 0.0
    for name, value in learning_state(eager).items():
        assert torch.allclose(value, learning_state(ours)[name], rtol=1e-10, atol=1e-13), name
    assert list(ours.ret_window) == pytest.approx(list(eager.ret_window), rel=1e-10)
    assert ours.algorithm.lr_schedule.step_count == eager.algorithm.lr_schedule.step_count == 3
    assert all(param.grad is None for param in ours.policy.parameters())


def test_nonfinite_updates_are_skipped_or_raise_like_eager(tmp_path, monkeypatch):
    ours = _whole_update_trainer(tmp_path / "skip")
    reward = ours.env._reward
    monkeypatch.setattr(ours.env, "_reward", lambda *args: reward(*args) * float("nan"))
    ours.skips.limit = 0  # every update skipped on purpose: no divergence stop
    before = learning_state(ours)
    ours.train(total_updates=1)
    metrics = ours.last_train_metrics
    assert metrics["train/skipped_update"] == 1.0
    assert metrics["train/skipped_excessive_gradient"] == 0.0
    assert metrics["train/grad_norm"] != metrics["train/grad_norm"]  # NaN
    assert ours.algorithm.lr_schedule.step_count == 0
    for name, value in learning_state(ours).items():
        if name.startswith(("policy.", "optimizer.")):
            assert torch.equal(value, before[name]), name

    strict_cfg = ours.algorithm.cfg
    strict_cfg.skip_nonfinite_updates = False
    with pytest.raises(FloatingPointError, match="non-finite loss"):
        ours.train(total_updates=2)
    assert ours.num_updates == 1  # the failed update is not counted


def test_an_excessive_gradient_skips_the_update(tmp_path):
    from pathgrad.algo import APGCfg

    cfg = APGCfg(optimizer={"name": "adam", "learning_rate": 1e-2}, max_grad_norm_before_clip=1e-9)
    ours = _whole_update_trainer(tmp_path, algorithm_cfg=cfg)
    ours.skips.limit = 0  # every update skipped on purpose: no divergence stop
    ours.train(total_updates=2)
    assert ours.last_train_metrics["train/skipped_excessive_gradient"] == 1.0
    assert ours.last_train_metrics["train/grad_norm"] > 1e-9
    assert not ours.algorithm.optimizer.state  # never stepped, as in eager training


def test_resume_of_a_compiled_update_run_is_exact(tmp_path):
    straight = _whole_update_trainer(tmp_path / "straight")
    straight.train(total_updates=4)
    first = _whole_update_trainer(tmp_path / "resumed")
    first.train(total_updates=2)
    path = first.save_checkpoint()
    second = _whole_update_trainer(tmp_path / "resumed")
    second.load_checkpoint(path)
    second.train(total_updates=4)
    for name, value in learning_state(straight).items():
        assert torch.equal(value, learning_state(second)[name]), name


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"algorithm": "ahac_stiffness"}, "StiffnessAHAC, which declares no compiled_update"),
        (
            {"algorithm": "ahac", "contacts": True},
            "AHAC reads info['contact_forces', 'accelerations']",
        ),
        ({"rollout_mode": "complete", "update_horizon": 8}, "rollout_mode is 'complete'"),
        ({"action_adjoint_max_norm": 5.0}, "per-step gradient hooks are on"),
        ({"compile_scope": "rollout"}, "trainer.compile_scope is 'rollout'"),
        (
            {"algorithm_cfg": {"optimizer": {"name": "sgd", "learning_rate": 0.1}}},
            "the optimizer is SGD, not Adam or AdamW",
        ),
    ],
)
def test_the_trainer_says_why_the_update_is_not_compiled(tmp_path, overrides, reason):
    if isinstance(overrides.get("algorithm_cfg"), dict):
        from pathgrad.algo import APGCfg

        overrides["algorithm_cfg"] = APGCfg(**overrides["algorithm_cfg"])
    trainer = build_point_mass_trainer(tmp_path, torch_compile=True, **overrides)
    assert trainer.compiled_update is None
    assert trainer.compile_scope == "rollout"
    assert reason in trainer.compile_scope_reason


def test_compile_scope_is_validated(tmp_path):
    with pytest.raises(ValueError, match="compile_scope must be 'update' or 'rollout'"):
        build_point_mass_trainer(tmp_path, torch_compile=True, compile_scope="everything")
