"""SHAC's and SAPO's compiled update: equal to eager, its critic step, fallbacks and resume.

The programs run uncompiled here (they are pure tensor code), so the logic is
tested without paying for compilation; ``test_compile.py`` compiles them.
"""

from __future__ import annotations

import pytest
import torch

from helpers import build_point_mass_trainer, learning_state
from pathgrad.compiled.adam import clipped_adam_step
from pathgrad.compiled.critic_update import CompiledCriticStep, CompiledCriticUpdate

SETTINGS = {"dtype": "float64", "eval_frequency_steps": 0, "action_adjoint_max_norm": 0.0}


def critic_cfg(algorithm: str, **fields):
    """A small critic, few passes, a schedule on both learning rates, weight decay on the actor."""
    from pathgrad.algo.registry import get_algorithm

    _, cfg_type = get_algorithm(algorithm)
    return cfg_type(
        optimizer={"name": "adam", "learning_rate": 1e-2, "kwargs": {"weight_decay": 0.1}},
        lr_scheduler={"name": "linear", "kwargs": {"total_iters": 40, "end_factor": 0.5}},
        critic_hidden_sizes=[8, 8],
        critic_epochs=3,
        critic_minibatches=2,
        **fields,
    )


def uncompiled(trainer):
    """The trainer's compiled update with its programs uncompiled (the same code)."""
    update = trainer.compiled_update
    assert isinstance(update, CompiledCriticUpdate)
    update._compiled_chunk = update._chunk
    update.optimizer_step._compiled = clipped_adam_step
    critic_step = trainer.algorithm.fused_critic_step
    assert isinstance(critic_step, CompiledCriticStep)
    critic_step._compiled = critic_step._step
    return trainer


CASES = {
    "shac": {},
    "shac-entropy-bonus-warmup": {"ent_coef": 0.05, "critic_warmup_updates": 1},
    "sapo": {},
    "sapo-shuffled": {"shuffle_critic_minibatches": True, "num_critics": 3},
}


def trained_pair(tmp_path, case: str, updates: int, *, programs: str = "uncompiled", **settings):
    """Eager and compiled trainers of ``case`` after ``updates`` updates.

    ``programs``: ``uncompiled`` runs the compiled update's programs as plain
    Python (no compile time), ``compiled`` compiles them.

    Each is built (seeding torch's RNG) right before it trains: they share that RNG.
    """
    algorithm = case.split("-")[0]
    settings = {**SETTINGS, "compile_chunk_steps": 3, "algorithm": algorithm, **settings}
    trainers = []
    for name, compiled in (("eager", False), ("ours", True)):
        trainer = build_point_mass_trainer(
            tmp_path / name,
            torch_compile=compiled,
            algorithm_cfg=critic_cfg(algorithm, **CASES[case]),
            **settings,
        )
        if compiled:
            assert trainer.compile_scope == "update"
            if programs == "uncompiled":
                uncompiled(trainer)
        trainer.train(total_updates=updates)
        trainers.append(trainer)
    return trainers


def assert_same_training(eager, ours, rtol: float) -> None:
    """Parameters, critics, optimizer states, normalizer, episode returns and metrics agree."""
    theirs, mine = learning_state(eager), learning_state(ours)
    assert mine.keys() == theirs.keys()
    assert any(name.startswith("critic.") for name in mine)
    for name, value in theirs.items():
        assert torch.allclose(mine[name], value, rtol=rtol, atol=rtol * 1e-2), name
    assert list(ours.ret_window) == pytest.approx(list(eager.ret_window), rel=rtol)
    for got, expected in zip(ours.train_history, eager.train_history, strict=True):
        assert got.keys() == expected.keys()
        for key, value in expected.items():
            if key not in ("charts/SPS", "time/elapsed_seconds"):
                assert got[key] == pytest.approx(value, rel=rtol, abs=rtol, nan_ok=True), key


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_compiled_update_equals_eager_training(tmp_path, case):
    eager, ours = trained_pair(tmp_path, case, 3, clip_actions_to_space=True)
    assert ours.get_summary()["first_compiled_update_seconds"] > 0.0
    assert_same_training(eager, ours, 1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["shac-entropy-bonus-warmup", "sapo"])
def test_the_compiled_programs_equal_eager_training(tmp_path, case):
    """Compiled for real: 7-step windows of 3-step chunks and an eager remainder of 1."""
    eager, ours = trained_pair(
        tmp_path, case, 3, programs="compiled", segment_length=7, update_horizon=7
    )
    assert_same_training(eager, ours, 1e-9)
    update = ours.compiled_update
    assert update.guards.active  # the later updates' compiled calls skipped guard evaluation
    for draws in (update.draws.noises, update.draws.resets):
        assert draws.verified.get(7) is not None  # checked once per 7-step segment


def test_resume_of_a_compiled_shac_run_is_exact(tmp_path):
    straight = uncompiled(
        build_point_mass_trainer(
            tmp_path / "straight", torch_compile=True, algorithm="shac", compile_chunk_steps=3,
            algorithm_cfg=critic_cfg("shac"), **SETTINGS,
        )
    )  # fmt: skip
    straight.train(total_updates=4)

    def resumed():
        return uncompiled(
            build_point_mass_trainer(
                tmp_path / "resumed", torch_compile=True, algorithm="shac", compile_chunk_steps=3,
                algorithm_cfg=critic_cfg("shac"), **SETTINGS,
            )
        )  # fmt: skip

    first = resumed()
    first.train(total_updates=2)
    path = first.save_checkpoint()
    second = resumed()
    second.load_checkpoint(path)
    second.train(total_updates=4)
    for name, value in learning_state(straight).items():
        assert torch.equal(value, learning_state(second)[name]), name


def test_the_critic_step_equals_the_eager_step():
    from pathgrad.algo.sapo import CriticEnsemble

    torch.manual_seed(0)
    critic = CriticEnsemble(2, 3, [8], "silu", True, norm_before_activation=True).double()
    twin = CriticEnsemble(2, 3, [8], "silu", True, norm_before_activation=True).double()
    twin.load_state_dict(critic.state_dict())
    kwargs = {"lr": 0.01, "betas": (0.7, 0.95), "weight_decay": 0.01}
    optimizer = torch.optim.AdamW(critic.parameters(), **kwargs)
    theirs = torch.optim.AdamW(twin.parameters(), **kwargs)
    step = CompiledCriticStep(critic, optimizer, 0.5, {})
    step._compiled = step._step  # the same code, uncompiled
    inputs, targets = torch.randn(12, 3, dtype=torch.float64), torch.randn(12, dtype=torch.float64)
    for _ in range(3):
        index = torch.randperm(12)[:6]
        loss = step(inputs, targets, index)
        expected = (twin(inputs[index]).squeeze(-1) - targets[index]).square().mean()
        theirs.zero_grad()
        expected.backward()
        torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.5)
        theirs.step()
        assert float(loss) == pytest.approx(float(expected.detach()), rel=1e-13)
    for name, value in twin.state_dict().items():
        assert torch.allclose(critic.state_dict()[name], value, rtol=1e-12, atol=1e-14), name
    for mine, reference in zip(optimizer.state.values(), theirs.state.values(), strict=True):
        for key, value in reference.items():
            assert torch.allclose(mine[key], value, rtol=1e-12, atol=1e-14), key


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (
            {"algorithm_cfg": critic_cfg("shac", critic_optimizer={"name": "sgd"})},
            "the critic optimizer is SGD, not Adam or AdamW",
        ),
        ({"action_adjoint_max_norm": 5.0}, "per-step gradient hooks are on"),
    ],
)
def test_the_trainer_says_why_a_critic_update_is_not_compiled(tmp_path, overrides, reason):
    settings = {**SETTINGS, "algorithm": "sapo", "torch_compile": True, **overrides}
    if "algorithm_cfg" in overrides:
        settings["algorithm"] = "shac"
    trainer = build_point_mass_trainer(tmp_path, **settings)
    assert trainer.compiled_update is None
    assert reason in trainer.compile_scope_reason
