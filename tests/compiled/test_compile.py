"""The torch.compile paths train like eager: fused compiled chunks, and per-step compilation."""

from __future__ import annotations

import pytest
import torch

from helpers import build_point_mass_trainer, learning_state
from pathgrad.collector import DifferentiableCollector
from pathgrad.compiled.rollout import CompiledRolloutChunks
from pathgrad.envs import Pendulum, PointMass
from pathgrad.normalization import RunningObservationNormalizer
from pathgrad.policies import GaussianMLPPolicy


def _collector(fused_chunk_steps: int | None) -> DifferentiableCollector:
    """Float64 PointMass with resets every 3 steps, a normalizer and action clipping."""
    env = PointMass(5, dtype="float64", max_episode_steps=3, seed=3)
    torch.manual_seed(0)
    policy = GaussianMLPPolicy(6, 2, hidden_sizes=(8,), init_log_std=0.5).double()
    normalizer = RunningObservationNormalizer(6)
    normalizer.update(torch.randn(64, 6, dtype=torch.float64) * 2.0 + 1.0)
    collector = DifferentiableCollector(
        env, policy, "cpu", observation_normalizer=normalizer, clip_actions_to_space=True
    )
    if fused_chunk_steps is not None:
        collector.use_compiled_chunks(
            CompiledRolloutChunks(
                env,
                policy,
                fused_chunk_steps,
                observation_normalizer=normalizer,
                action_bounds=collector.action_bounds,
            )
        )
    collector.reset(seed=4)
    return collector


@pytest.mark.slow
def test_fused_chunks_collect_what_the_eager_collector_collects():
    eager, fused = _collector(None), _collector(3)
    chunks = fused.compiled_chunks
    compiled_calls = []

    def counting(*args):
        compiled_calls.append(len(args[3]))
        return compiled_steps(*args)

    compiled_steps, chunks._compiled_steps = chunks._compiled_steps, counting
    seen = []
    for segment in range(2):  # 7 steps: two compiled chunks and one eager step, twice
        torch.manual_seed(10 + segment)
        expected = eager.collect(7)
        torch.manual_seed(10 + segment)
        got = fused.collect(7, on_step_callback=seen.append)
        assert got.dones.any() and len(seen) == 7 * (segment + 1)
        assert torch.equal(got.dones, expected.dones)
        for name in ("observations", "rewards", "final_observation"):
            assert torch.allclose(getattr(got, name), getattr(expected, name), rtol=1e-12), name
        for ours, theirs in zip(got.transitions, expected.transitions, strict=True):
            for key in ("action", "log_prob", "entropy", "mean"):
                assert torch.allclose(ours.policy_output[key], theirs.policy_output[key]), key
            final = ours.info["final_observation"], theirs.info["final_observation"]
            assert torch.allclose(*final, rtol=1e-12)
            assert ours.info["metrics"].keys() == theirs.info["metrics"].keys()
        gradients = [
            torch.autograd.grad(
                rollout.rewards.sum() + rollout.final_observation.square().sum(),
                list(collector.policy.parameters()),
            )
            for rollout, collector in ((got, fused), (expected, eager))
        ]
        for ours, theirs in zip(*gradients, strict=True):
            assert torch.allclose(ours, theirs, rtol=1e-10, atol=1e-12)
        for key, value in fused.env.state.items():
            assert torch.allclose(value, eager.env.state[key], rtol=1e-12), key
        assert torch.equal(fused.env.elapsed_steps, eager.env.elapsed_steps)
        fused.detach_state(), eager.detach_state()
    assert compiled_calls == [3, 3, 3, 3]


def _apg_cfg(**fields):
    from pathgrad.algo import APGCfg

    return APGCfg(
        optimizer={"name": "adam", "learning_rate": 1e-2, "kwargs": {"weight_decay": 0.1}},
        lr_scheduler={"name": "linear", "kwargs": {"total_iters": 40, "end_factor": 0.5}},
        **fields,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("settings", "scope"),
    [
        ({"action_adjoint_max_norm": 0.0, "compile_chunk_steps": 3}, "update"),
        (
            {
                "action_adjoint_max_norm": 0.0,
                "compile_chunk_steps": 3,
                "compile_scope": "rollout",
                "algorithm_cfg": _apg_cfg(ent_coef=0.01),
            },
            "rollout",
        ),
        (
            {
                "action_adjoint_max_norm": 0.0,
                "compile_chunk_steps": 3,
                "algorithm": "shac",
                "compile_scope": "rollout",
            },
            "rollout",
        ),
        ({}, "step"),
    ],
    ids=["whole-update", "fused-chunks", "fused-chunks-shac", "per-step-with-adjoint-hooks"],
)
def test_torch_compile_gives_the_results_of_eager(tmp_path, settings, scope):
    settings = {"dtype": "float64", "eval_frequency_steps": 0, **settings}
    if scope == "update":  # entropy bonus, coupled weight decay, clipped actions too;
        # 8 envs x 2 actions: the chunks' noise and resets drawn in one call each
        settings.update(
            algorithm_cfg=_apg_cfg(ent_coef=0.01), clip_actions_to_space=True, num_envs=8
        )
    eager = build_point_mass_trainer(tmp_path / "eager", **settings)
    eager.train(total_updates=3)
    compiled = build_point_mass_trainer(tmp_path / "compiled", torch_compile=True, **settings)
    compiled.train(total_updates=3)
    assert (compiled.compiled_update is not None) is (scope == "update")
    assert (compiled.collector.compiled_chunks is not None) is (scope == "rollout")
    compiled_policy = hasattr(compiled.policy.action_from_noise, "_torchdynamo_orig_callable")
    assert compiled_policy is (scope == "step")
    for name, value in learning_state(eager).items():
        assert torch.allclose(value, learning_state(compiled)[name], rtol=1e-9, atol=1e-12), name
    assert list(compiled.ret_window) == pytest.approx(list(eager.ret_window), rel=1e-9)
    for ours, theirs in zip(compiled.train_history, eager.train_history, strict=True):
        for key in ("train/loss", "train/objective", "train/entropy", "train/grad_norm"):
            assert ours[key] == pytest.approx(theirs[key], rel=1e-9), key
        assert ours["train/learning_rate"] == theirs["train/learning_rate"]
    assert compiled.algorithm.last_policy_entropy == pytest.approx(
        eager.algorithm.last_policy_entropy, rel=1e-9
    )
    if scope == "update":
        update = compiled.compiled_update
        for draws in (update.draws.noises, update.draws.resets):  # one call per segment
            assert draws.verified and all(draws.verified.values())
        assert update.guards.active  # the later updates skipped guard evaluation


def test_compile_chunk_steps_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="compile_chunk_steps must be positive"):
        build_point_mass_trainer(tmp_path, torch_compile=True, compile_chunk_steps=0)


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
