"""A run that diverges says so: the first skipped update named, a stop after too many."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import warm_processes
from pathgrad.envs import PointMass
from pathgrad.trainer.divergence import SkipWatch

POISON_STEP = 20
MODULE = f'''
import torch
from pathgrad import register_learning_env
from pathgrad.envs import PointMass


class PoisonedPointMass(PointMass):
    """PointMass whose first two rows turn NaN at episode step {POISON_STEP} and stay NaN."""

    def _dynamics(self, state, action):
        next_state = super()._dynamics(state, action)
        rows = torch.arange(self.num_envs, device=self.device) < 2
        poison = rows & (self.elapsed_steps >= {POISON_STEP})
        return {{
            key: torch.where(poison.view(-1, *[1] * (value.dim() - 1)),
                             torch.full_like(value, float("nan")), value)
            for key, value in next_state.items()
        }}


register_learning_env("PoisonedPointMass", PoisonedPointMass)
'''


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory) -> Iterator[type[PointMass]]:
    import pathgrad.env
    from pathgrad.core import env_registry

    pathgrad.env.get_registered_learning_env_names()  # the built-in envs first
    saved = dict(env_registry._REGISTRY), dict(env_registry._DISPLAY_NAMES)
    folder = tmp_path_factory.mktemp("module")
    (folder / "poisoned_env.py").write_text(MODULE)
    sys.path.insert(0, str(folder))
    try:
        import poisoned_env
    finally:
        sys.path.remove(str(folder))
    yield poisoned_env.PoisonedPointMass
    env_registry._REGISTRY, env_registry._DISPLAY_NAMES = saved  # the next tests' registry
    sys.modules.pop("poisoned_env", None)


def trainer_on(env, tmp_path, **overrides):
    from pathgrad.algo import APG, APGCfg
    from pathgrad.differentiable_trainer import DifferentiableTrainer, DifferentiableTrainerCfg
    from pathgrad.policies import GaussianMLPPolicy

    torch.manual_seed(0)
    policy = GaussianMLPPolicy(6, 2, hidden_sizes=(16,), squash=True)
    settings = {"segment_length": 4, "update_horizon": 8, "checkpoint_dir": str(tmp_path),
                "max_consecutive_skipped_updates": 3, **overrides}  # fmt: skip
    algorithm = APG(APGCfg(optimizer={"name": "adam", "learning_rate": 1e-2}), policy)
    return DifferentiableTrainer(DifferentiableTrainerCfg(**settings), env, policy, algorithm)


def test_skip_watch_counts_in_a_row_and_in_all():
    watch = SkipWatch(limit=2)
    assert [watch.record(s) for s in (True, False, True)] == [True, False, False]
    assert (watch.total, watch.consecutive, watch.diverged) == (2, 1, False)
    watch.record(True)
    assert watch.diverged
    restored = SkipWatch(limit=2)
    restored.load_state_dict(watch.state_dict())
    assert restored.state_dict() == watch.state_dict() and restored.diverged
    never = SkipWatch(limit=0)
    for _ in range(100):
        never.record(True)
    assert not never.diverged


def test_the_first_skipped_update_is_named_and_the_run_stops_with_good_parameters(
    poisoned, tmp_path
):
    env = poisoned(4, max_episode_steps=1000, seed=0)
    trainer = trainer_on(env, tmp_path)
    notices: list[str] = []
    trainer.notify = notices.append
    trainer.train(total_updates=2)  # 16 steps: all finite
    good = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    summary = trainer.train(total_updates=50)  # returned, as the reference's train() does
    assert summary["status"] == "diverged" and summary["num_updates"] == 5
    assert trainer.diverged.startswith("3 updates in a row were skipped")
    # Update 3 takes the episodes' steps 17-24; rows 0 and 1 turn NaN in the step taken
    # after 20 (its 5th, index 4): env step 2 * 8 * 4 + 4 * 4 = 80.
    assert notices == [
        "update 3 was skipped: non-finite reward in 2 of 4 envs from env step 80, "
        "non-finite observation in 2 of 4 envs from env step 80; its loss (the negated "
        "return) is not finite."
    ]
    assert trainer.num_updates == 5
    for key, value in trainer.policy.state_dict().items():
        assert torch.equal(value, good[key]), key
    summary = trainer.get_summary()
    assert (summary["skipped_updates"], summary["consecutive_skipped_updates"]) == (3, 3)
    assert float(env.state_dict()["state"]["position"][0, 0]) != float(
        env.state_dict()["state"]["position"][0, 0]
    )  # the replay restored the env as it was: still NaN


def test_an_excessive_gradient_is_named_with_its_limit(tmp_path):
    env = PointMass(4, seed=0)
    trainer = trainer_on(env, tmp_path, max_consecutive_skipped_updates=0)
    trainer.algorithm.cfg.max_grad_norm_before_clip = 1e-9
    notices: list[str] = []
    trainer.notify = notices.append
    assert trainer.train(total_updates=3)["status"] == "completed"  # no limit: it trains on
    notice, every = notices
    assert every.startswith("every one of the run's 3 updates was skipped")
    assert re.fullmatch(
        r"update 1 was skipped: its gradient norm \S+ exceeds "
        r"algorithm.cfg.max_grad_norm_before_clip \(1e-09\)\.",
        notice,
    ), notice
    assert trainer.get_summary()["skipped_updates"] == 3


def test_a_run_whose_every_update_was_skipped_below_the_limit_returns_with_a_warning(tmp_path):
    env = PointMass(4, seed=0)
    trainer = trainer_on(env, tmp_path, max_consecutive_skipped_updates=20)
    trainer.algorithm.cfg.max_grad_norm_before_clip = 1e-9  # every update skipped
    notices: list[str] = []
    trainer.notify = notices.append
    initial = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    summary = trainer.train(total_updates=3)  # 3 < 20 in a row: not stopped, nothing learned
    assert summary["status"] == "completed" and summary["skipped_updates"] == 3
    assert notices[-1].startswith("every one of the run's 3 updates was skipped")
    assert all(torch.equal(v, initial[k]) for k, v in trainer.policy.state_dict().items())
    trainer.algorithm.cfg.max_grad_norm_before_clip = 0.0
    trainer.train(total_updates=4)  # one applied update: the run is not all skipped
    trainer.algorithm.cfg.max_grad_norm_before_clip = 1e-9
    trainer.train(total_updates=6)  # then skipped ones below the limit: it ends normally
    assert trainer.get_summary()["skipped_updates"] == 5


def test_the_references_one_skipped_update_returns_its_summary(tmp_path):
    # The reference's trainer test: one update, skipped for a non-finite reward.
    env = PointMass(4, seed=0)
    env.step = lambda action, step=env.step: (
        lambda result: (result[0], result[1] * float("nan"), *result[2:])
    )(step(action))
    trainer = trainer_on(env, tmp_path)
    trainer.notify = lambda message: None
    initial = {k: v.clone() for k, v in trainer.policy.state_dict().items()}
    summary = trainer.train(total_updates=1)
    assert summary["status"] == "completed" and summary["num_updates"] == 1
    assert summary["last_train_metrics"]["train/skipped_update"] == 1.0
    assert all(torch.equal(v, initial[k]) for k, v in trainer.policy.state_dict().items())


def test_a_diverging_run_ends_diverged_with_its_own_exit_status(poisoned, tmp_path):
    folder = Path(sys.modules[poisoned.__module__].__file__).parent
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(folder)}
    result = warm_processes.run(
        [sys.executable, "-m", "pathgrad", "train", "env.module=poisoned_env",
         "env.name=PoisonedPointMass", "env.num_envs=8", "env.cfg={max_episode_steps: 1000}",
         "trainer.segment_length=8", "trainer.total_updates=200", "eval.frequency_steps=0",
         "trainer.max_consecutive_skipped_updates=4"],
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    warning, diverged = result.stderr.strip().splitlines()
    assert warning.startswith("pathgrad: warning: update 3 was skipped: non-finite reward in 2")
    assert diverged.startswith("pathgrad: diverged: 4 updates in a row were skipped")
    assert "diverged: 6 updates, 4 skipped, 384 env steps" in result.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["skipped_updates"] == 4
    assert summary["latest_checkpoint_path"].endswith("_final_step_384.pt")


class MaskedSqrt(PointMass):
    """A finite reward whose gradient is NaN: the sqrt branch torch.where does not choose."""

    def _reward(self, state, action, next_state):
        x = next_state["position"][:, 0]
        bonus = torch.where(x > 0, x.sqrt(), torch.zeros_like(x))
        return bonus + super()._reward(state, action, next_state)


class Folding(PointMass):
    """Finite steps whose gradient grows 1e12-fold per step, as through a stiff spring; it has
    a Newton env's instability_hint."""

    def _dynamics(self, state, action):
        following = super()._dynamics(state, action)
        return {**following, "position": torch.sin(1e12 * following["position"])}

    def instability_hint(self) -> str:
        return "the stiff terms"

    def steps_are_stable(self) -> bool:  # as a Newton env's whose terms are within bounds
        return True


def test_a_gradient_that_overflows_through_finite_stiff_steps_says_so(tmp_path):
    trainer = trainer_on(Folding(4, seed=0), tmp_path, max_consecutive_skipped_updates=0)
    notices: list[str] = []
    trainer.notify = notices.append
    trainer.train(total_updates=1)
    assert notices[0] == (
        "update 1 was skipped: its policy gradient is not finite though its rollout was finite; "
        "the gradient through the window overflowed: it grows through stiff springs (joint "
        "limits, contacts) step after step even where the steps stay finite (`pathgrad "
        "check-env` prints the env's window gradient norms); bound it with more substeps "
        "(twice as many), a shorter trainer.segment_length or trainer.action_adjoint_max_norm."
    )


def test_a_nan_gradient_of_a_finite_rollout_names_the_users_line(tmp_path):
    trainer = trainer_on(MaskedSqrt(4, seed=0), tmp_path, max_consecutive_skipped_updates=0)
    notices: list[str] = []
    trainer.notify = notices.append
    trainer.train(total_updates=2)
    notice = notices[0]  # then: every update was skipped
    line = 1 + Path(__file__).read_text().splitlines().index(
        "        bonus = torch.where(x > 0, x.sqrt(), torch.zeros_like(x))"
    )
    assert notice.startswith(
        "update 1 was skipped: its policy gradient is not finite though its rollout was finite; "
        "the first NaN gradient is that of `bonus = torch.where(x > 0, x.sqrt(), "
        f"torch.zeros_like(x))` at test_divergence.py:{line} in _reward; a common cause is "
        "torch.where"
    ), notice
    assert trainer.get_summary()["skipped_updates"] == 2  # the replay changed nothing


class _GradientBooster(torch.autograd.Function):
    """Identity forward; the backward multiplies the gradient (an exploding adjoint)."""

    @staticmethod
    def forward(ctx, value, factor):
        ctx.factor = factor
        return value.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None


class _ExplodingPointMass(PointMass):
    """A finite rollout whose gradient through each step is multiplied by ``factor``."""

    factor = 1.0

    def _dynamics(self, state, action):
        return super()._dynamics(state, _GradientBooster.apply(action, self.factor))


def test_a_gradient_that_grew_until_it_overflowed_is_named_with_its_remedies(tmp_path):
    env = _ExplodingPointMass(4, seed=0)
    trainer = trainer_on(env, tmp_path, max_consecutive_skipped_updates=0)
    notices: list[str] = []
    trainer.notify = notices.append
    env.factor = 1e5  # finite norms (1e6-1e9), far beyond what clipping is meant for
    trainer.train(total_updates=2)
    assert notices == [] and trainer.train_history[-1]["train/grad_norm"] > 1e6
    env.factor = float("inf")  # the next window's gradient overflows; the rollout does not
    trainer.train(total_updates=3)
    (notice,) = notices
    overflowed = trainer.train_history[-1]  # skipped for a non-finite norm, not an excessive one
    assert (overflowed["train/skipped_update"], overflowed["train/skipped_excessive_gradient"]) == (
        1.0,
        0.0,
    )
    assert notice.startswith(
        "update 3 was skipped: its policy gradient is not finite; its rollout was finite and "
        "the updates before it had gradient norms up to "
    )
    assert notice.endswith(
        "bound it with trainer.action_adjoint_max_norm (each env's action adjoint clipped, "
        "e.g. 0.01 on DiffRLAnt), a shorter trainer.segment_length or a critic over shorter "
        "windows (algorithm.name: shac)."
    )
