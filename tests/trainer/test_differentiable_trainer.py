"""DifferentiableTrainer: validation, budgets, statistics, evaluation, logging, resume."""

from __future__ import annotations

import math
import sys

import pytest
import torch

import warm_processes
from helpers import (
    TESTS,
    LinearPolicy,
    ScalarEnv,
    ScheduledScalarEnv,
    build_point_mass_trainer,
    learning_state,
)
from pathgrad.algo import APG, APGCfg
from pathgrad.checkpoint import read_index
from pathgrad.differentiable_trainer import DifferentiableTrainer, DifferentiableTrainerCfg
from resume_run import MODE_SETTINGS


def scalar_trainer(cfg=None, env=None, algorithm_cfg=None, **kwargs) -> DifferentiableTrainer:
    env = env or ScalarEnv([1.0, -1.0], episode_steps=3)
    policy = LinearPolicy(0.1)
    algorithm = APG(
        algorithm_cfg or APGCfg(optimizer={"name": "sgd", "learning_rate": 0.01}), policy
    )
    return DifferentiableTrainer(
        cfg or DifferentiableTrainerCfg(), env, policy, algorithm, **kwargs
    )


CFG_ERRORS = [
    ({"segment_length": 0}, "segment_length must be positive."),
    ({"rollout_mode": "tbptt"}, "rollout_mode must be 'segmented' or 'complete'."),
    ({"segment_length": 8, "update_horizon": 4}, "update_horizon must be at least segment_length."),
    (
        {"segment_length": 4, "update_horizon": 6},
        "update_horizon must be divisible by segment_length.",
    ),
    ({"rollout_mode": "complete", "update_horizon": 0}, "update_horizon must be positive."),
    ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps must be positive."),
    ({"action_adjoint_max_norm": -1.0}, "action_adjoint_max_norm cannot be negative."),
    ({"save_frequency_updates": -1}, "save_frequency_updates cannot be negative."),
    ({"eval_frequency_steps": -1}, "eval_frequency_steps cannot be negative."),
    ({"best_eval_mode": "best"}, "best_eval_mode must be 'min' or 'max'."),
    ({"num_eval_episodes": 0}, "num_eval_episodes must be positive."),
    ({"experiment_name": ""}, "experiment_name must not be empty."),
    ({"state_gradient_decay": 0.0}, "state_gradient_decay must be in (0, 1]."),
]


@pytest.mark.parametrize(("changes", "message"), CFG_ERRORS)
def test_config_errors_on_construction_and_in_the_trainer(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        DifferentiableTrainerCfg(**changes)
    cfg = DifferentiableTrainerCfg()
    for key, value in changes.items():  # fields mutated after construction
        setattr(cfg, key, value)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        scalar_trainer(cfg)


def test_stabilizer_settings_reach_the_env_and_the_metrics(tmp_path):
    trainer = build_point_mass_trainer(
        tmp_path,
        action_adjoint_max_norm=0.0,
        record_gradient_health=True,
        state_gradient_decay=0.5,
    )
    assert trainer.env.state_gradient_decay == 0.5
    metrics = trainer.train(total_updates=1)["last_train_metrics"]
    assert metrics["train/action_adjoint_preclip_max_norm"] > 0
    assert metrics["train/action_adjoint_clipped_fraction"] == 0.0  # recorded, not clipped
    assert metrics["train/action_adjoint_nonfinite_fraction"] == 0.0
    with pytest.raises(ValueError, match="state_gradient_decay needs an env"):
        scalar_trainer(DifferentiableTrainerCfg(state_gradient_decay=0.5))


def test_trainer_requires_the_same_policy_and_device():
    env = ScalarEnv([1.0])
    policy = LinearPolicy()
    algorithm = APG(APGCfg(), LinearPolicy())
    with pytest.raises(
        ValueError, match="Trainer and APG must reference the same policy instance."
    ):
        DifferentiableTrainer(DifferentiableTrainerCfg(), env, policy, algorithm)
    algorithm = APG(APGCfg(device="meta"), policy)
    with pytest.raises(ValueError, match="Environment and APG must use the same device."):
        DifferentiableTrainer(DifferentiableTrainerCfg(), env, policy, algorithm)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "Provide total_timesteps or total_updates."),
        ({"total_timesteps": 1, "total_updates": 1}, "Provide only one training budget."),
        ({"total_timesteps": -1}, "total_timesteps cannot be negative."),
        ({"total_updates": -1}, "total_updates cannot be negative."),
    ],
)
def test_budget_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        scalar_trainer().train(**kwargs)


def test_timestep_budget_shortens_the_last_segmented_update():
    trainer = scalar_trainer(DifferentiableTrainerCfg(segment_length=4, update_horizon=8))
    summary = trainer.train(total_timesteps=20)  # 2 envs: 8 + 2 vector steps
    assert summary["global_step"] == 20 and summary["num_updates"] == 2
    assert trainer.train(total_timesteps=20)["num_updates"] == 2  # budgets are absolute


def test_update_budget_binds_an_implicit_lr_horizon():
    algorithm_cfg = APGCfg(
        optimizer={"name": "sgd", "learning_rate": 0.01}, lr_scheduler={"name": "linear"}
    )
    trainer = scalar_trainer(algorithm_cfg=algorithm_cfg)
    summary = trainer.train(total_updates=4)
    rates = [entry["train/learning_rate"] for entry in summary["train_history"]]
    assert rates == pytest.approx([0.0075, 0.005, 0.0025, 0.0])


def test_episode_statistics_match_a_hand_computation():
    # a = w x, x' = (1 + w) x, r = -x'^2; episodes of 3 steps (one update) restart at x0.
    trainer = scalar_trainer(DifferentiableTrainerCfg(segment_length=3))
    weights = [trainer.policy.w.item()]
    trainer.train(total_updates=1)
    weights.append(trainer.policy.w.item())
    trainer.train(total_updates=2)
    expected = [
        -sum((x * (1 + w) ** k) ** 2 for k in (1, 2, 3)) for w in weights for x in (1.0, -1.0)
    ]
    assert list(trainer.ret_window) == pytest.approx(expected, rel=1e-6)
    assert list(trainer.len_window) == [3.0] * 4
    entry = trainer.train_history[-1]
    assert entry["charts/episode_length_avg_100"] == 3.0
    assert {"global_step", "num_updates", "charts/SPS", "train/loss"} <= set(entry)


def test_complete_mode_with_a_scheduled_env_logs_rollout_metadata():
    cfg = DifferentiableTrainerCfg(rollout_mode="complete", gradient_accumulation_steps=2)
    trainer = scalar_trainer(cfg, env=ScheduledScalarEnv([1.0, 2.0], episode_steps=100))
    summary = trainer.train(total_updates=2)  # horizons 2, 3 then 4, 5
    assert summary["global_step"] == (2 + 3 + 4 + 5) * 2
    means = [entry["train/rollout_horizon_mean"] for entry in summary["train_history"]]
    assert means == [2.5, 4.5]


def test_variable_horizons_need_an_update_budget_or_an_explicit_lr_horizon():
    cfg = DifferentiableTrainerCfg(rollout_mode="complete")
    linear = APGCfg(lr_scheduler={"name": "linear"})
    trainer = scalar_trainer(cfg, env=ScheduledScalarEnv([1.0]), algorithm_cfg=linear)
    with pytest.raises(
        ValueError, match="Variable-horizon APG requires total_updates or an explicit"
    ):
        trainer.train(total_timesteps=10)
    trainer.train(total_updates=1)
    explicit = APGCfg(lr_scheduler={"name": "linear", "kwargs": {"total_iters": 2}})
    trainer = scalar_trainer(cfg, env=ScheduledScalarEnv([1.0]), algorithm_cfg=explicit)
    with pytest.raises(RuntimeError, match="ends after 2 updates, 2 are taken and 1 more"):
        trainer.train(total_timesteps=100)  # rollouts of 2 and 3 steps, then the check fails
    assert trainer.num_updates == 2 and trainer.global_step == 5
    with pytest.raises(ValueError, match="ends after 2 updates, 2 are taken"):
        trainer.train(total_timesteps=100)  # checked up front when the run starts


class FakeWriter:
    def __init__(self) -> None:
        self.scalars: list[tuple[str, float, int]] = []
        self.flushed = 0  # how many scalars have reached the file

    def add_scalar(self, key, value, step):
        self.scalars.append((key, value, step))

    def flush(self):
        self.flushed = len(self.scalars)


def test_evaluation_best_and_periodic_checkpoints_and_writer(tmp_path):
    trainer = build_point_mass_trainer(tmp_path, save_frequency_updates=1)
    trainer.writer = FakeWriter()
    summary = trainer.train(total_updates=4)  # 32 env steps per update, eval every 64
    assert [entry["global_step"] for entry in summary["eval_history"]] == [64.0, 128.0]
    index = read_index(tmp_path)
    kinds = {entry["file"]: entry["kind"] for entry in index}
    assert kinds["test_step_32.pt"] == "periodic" and kinds["test_step_96.pt"] == "periodic"
    assert kinds["test_best_step_64.pt"] == "best"
    assert "test_step_64.pt" not in kinds  # a best save replaces the periodic one
    assert (
        summary["best_checkpoint_path"] == str(tmp_path / "test_best_step_64.pt")
        or kinds.get("test_best_step_128.pt") == "best"
    )
    keys = {key for key, _, _ in trainer.writer.scalars}
    assert {"train/loss", "train/grad_norm", "charts/SPS", "eval/avg_reward"} <= keys
    assert "train/action_adjoint_preclip_max_norm" in keys
    assert index[-1]["eval"]["global_step"] == 128.0


def test_every_scalar_reaches_the_writer_file_before_a_checkpoint(tmp_path, monkeypatch):
    # a resume keeps the events up to its checkpoint: after a kill -9 they must be on disk
    import pathgrad.trainer.save_restore as checkpoints

    trainer = build_point_mass_trainer(tmp_path, save_frequency_updates=1)
    trainer.writer = FakeWriter()
    save, unflushed = checkpoints._save, []

    def watched_save(owner, *args, **kwargs):
        unflushed.append(len(owner.writer.scalars) - owner.writer.flushed)
        return save(owner, *args, **kwargs)

    monkeypatch.setattr(checkpoints, "_save", watched_save)
    trainer.train(total_updates=3)
    assert len(unflushed) >= 3 and set(unflushed) == {0}


def test_best_checkpoint_follows_best_eval_mode(tmp_path):
    trainer = build_point_mass_trainer(
        tmp_path, best_eval_metric="eval/avg_length", best_eval_mode="min"
    )
    trainer.train(total_updates=4)  # lengths are always 10: only the first eval is a best
    assert trainer.best_checkpoint_path == str(tmp_path / "test_best_step_64.pt")
    assert trainer.best_eval_value == 10.0


def test_wandb_missing_is_a_clear_error_and_present_wandb_gets_the_metrics(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(RuntimeError, match=r"use_wandb=True needs the 'wandb' package"):
        scalar_trainer(DifferentiableTrainerCfg(use_wandb=True))

    class FakeWandb:
        logged: list = []

        @classmethod
        def log(cls, values, step):
            cls.logged.append((values, step))

    monkeypatch.setitem(sys.modules, "wandb", FakeWandb)
    scalar_trainer(DifferentiableTrainerCfg(use_wandb=True)).train(total_updates=1)
    values, step = FakeWandb.logged[0]
    assert step == 32 and "train/loss" in values and "charts/SPS" in values


@pytest.mark.parametrize("mode", ["segmented", "complete"])
def test_an_interrupted_update_leaves_no_trace(tmp_path, mode):
    settings = MODE_SETTINGS[mode]
    reference = build_point_mass_trainer(tmp_path / "a", **settings)
    reference.train(total_updates=4)

    trainer = build_point_mass_trainer(tmp_path / "b", **settings)
    trainer.train(total_updates=2)
    original_step = trainer.env.step
    calls = {"count": 0}

    def interrupted_step(action):
        calls["count"] += 1
        if calls["count"] == 5:  # in the middle of the third update
            raise KeyboardInterrupt
        return original_step(action)

    trainer.env.step = interrupted_step
    with pytest.raises(KeyboardInterrupt):
        trainer.train(total_updates=4)
    assert trainer.num_updates == 2 and not trainer.algorithm._update_active
    trainer.env.step = original_step
    trainer.train(total_updates=4)
    for name, value in learning_state(reference).items():
        assert torch.equal(value, learning_state(trainer)[name]), name
    assert list(trainer.ret_window) == list(reference.ret_window)


def test_an_interrupt_during_the_optimizer_step_waits_for_the_step_to_be_recorded(tmp_path):
    reference = build_point_mass_trainer(tmp_path / "a")
    reference.train(total_updates=3)
    trainer = build_point_mass_trainer(tmp_path / "b")
    finish = trainer.algorithm.finish_update

    def finish_with_a_signal():
        trainer.request_interrupt(KeyboardInterrupt)  # as the CLI's signal handler does
        return finish()

    trainer.algorithm.finish_update = finish_with_a_signal
    with pytest.raises(KeyboardInterrupt):
        trainer.train(total_updates=3)
    assert trainer.num_updates == 1 and trainer.global_step == 32  # the step was recorded
    trainer.algorithm.finish_update = finish
    trainer.train(total_updates=3)
    for name, value in learning_state(reference).items():
        assert torch.equal(value, learning_state(trainer)[name]), name
    with pytest.raises(KeyboardInterrupt):
        trainer.request_interrupt(KeyboardInterrupt)  # outside a step: at once


@pytest.mark.parametrize("mode", ["segmented", "complete", "shac"])
def test_resume_in_a_fresh_process_equals_uninterrupted_training(tmp_path, mode):
    def run(phase, directory, updates):
        command = [sys.executable, str(TESTS / "resume_run.py"), mode, phase, str(directory)]
        result = warm_processes.run([*command, str(updates)], cwd=TESTS)  # a process of its own
        assert result.returncode == 0, result.stderr

    run("full", tmp_path / "a", 12)
    run("first", tmp_path / "b", 6)
    run("second", tmp_path / "b", 12)
    full = torch.load(tmp_path / "a" / "full.pt", weights_only=True)
    resumed = torch.load(tmp_path / "b" / "second.pt", weights_only=True)
    assert full["global_step"] == resumed["global_step"]
    assert full["state"].keys() == resumed["state"].keys()
    for name, value in full["state"].items():
        assert torch.equal(value, resumed["state"][name]), name
    assert full["ret_window"] == resumed["ret_window"]
    assert full["eval"] == resumed["eval"]
    assert full["learning_rate"] == resumed["learning_rate"]


@pytest.mark.slow
def test_point_mass_trains_to_a_small_final_distance(tmp_path):
    trainer = build_point_mass_trainer(
        tmp_path,
        num_envs=64,
        segment_length=32,
        update_horizon=32,
        eval_frequency_steps=64 * 32 * 100,
        num_eval_episodes=64,
        algorithm_cfg=APGCfg(optimizer={"learning_rate": 3e-3, "kwargs": {"betas": (0.7, 0.95)}}),
    )
    trainer.env.max_episode_steps = trainer.eval_env.max_episode_steps = 100
    summary = trainer.train(total_updates=200)
    metrics = summary["last_eval_metrics"]
    assert metrics["eval/final_distance"] < 0.05
    assert metrics["eval/success_rate"] > 0.95


def test_float64_end_to_end_with_every_option(tmp_path):
    trainer = build_point_mass_trainer(tmp_path, dtype="float64", clip_actions_to_space=True)
    summary = trainer.train(total_updates=3)
    assert summary["last_train_metrics"]["train/skipped_update"] == 0.0
    assert trainer.collector.observation.dtype == torch.float64
    assert summary["last_eval_metrics"]["eval/avg_length"] == 10.0
    assert trainer.policy.log_std.dtype == torch.float64


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"algorithm": "shac", "update_horizon": 4},
        {"rollout_mode": "complete", "update_horizon": 6},
        {"rollout_mode": "complete", "update_horizon": 6, "gradient_checkpointing": True},
    ],
)
def test_policy_entropy_is_the_mean_entropy_per_sampled_action(tmp_path, settings):
    trainer = build_point_mass_trainer(tmp_path, eval_frequency_steps=0, **settings)
    log_std = trainer.policy.log_std.detach().clone()  # the entropy the first update samples
    metrics = trainer.train(total_updates=1)["last_train_metrics"]
    expected = float((0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum())
    assert metrics["train/policy_entropy"] == pytest.approx(expected, rel=1e-6)
    # train/entropy is the (reference's) discounted entropy return of the window.
    assert metrics["train/entropy"] != pytest.approx(expected)


def test_histories_keep_the_most_recent_entries(tmp_path):
    trainer = build_point_mass_trainer(
        tmp_path, eval_frequency_steps=8, history_length=3, save_frequency_updates=0
    )
    summary = trainer.train(total_updates=5)
    assert [entry["num_updates"] for entry in summary["train_history"]] == [3.0, 4.0, 5.0]
    assert len(summary["eval_history"]) == 3
    assert summary["last_train_metrics"]["num_updates"] == 5.0
    with pytest.raises(ValueError, match="history_length must be positive"):
        DifferentiableTrainerCfg(history_length=0)


def test_non_finite_observations_never_poison_the_normalizer(tmp_path):
    trainer = build_point_mass_trainer(
        tmp_path, eval_frequency_steps=0, max_consecutive_skipped_updates=0
    )  # both updates are skipped: no divergence stop
    step = trainer.env.step
    calls = {"count": 0}

    def step_with_a_nan_row(action):
        observation, *rest = step(action)
        calls["count"] += 1
        if calls["count"] == 3:
            observation = observation.clone()
            observation[1] = float("nan")
        return (observation, *rest)

    trainer.env.step = step_with_a_nan_row
    history = trainer.train(total_updates=2)["train_history"]
    normalizer = trainer.observation_normalizer
    assert bool(torch.isfinite(normalizer.mean).all() and torch.isfinite(normalizer.var).all())
    # Row 1 stays NaN from step 3 (its NaN action makes its state NaN) until its
    # episode resets at step 10: observations 4-8 of update 1, 9-10 of update 2.
    assert [entry["train/observation_rows_skipped"] for entry in history] == [5.0, 2.0]
    assert [entry["train/skipped_update"] for entry in history] == [1.0, 1.0]
