"""The reference's calls, as a porting user makes them: transitions, lr_scheduler, evaluation.

The trainer, SHAC, evaluation and export take a policy of either calling
convention (tensors, or the reference's TensorDicts).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from helpers import ScalarEnv
from pathgrad.algo import APG, SHAC, APGCfg, SHACCfg
from pathgrad.collector import DifferentiableRollout, DifferentiableTransition
from pathgrad.differentiable_trainer import DifferentiableTrainer, DifferentiableTrainerCfg
from pathgrad.envs import PointMass
from pathgrad.evaluation import PATHGRAD_EVALUATION, evaluate_episodes
from pathgrad.models import ActorOnly, Policy, build_mlp_from_cfg
from pathgrad.utils import LRSchedulerCfg, OptimizerCfg


def transition(reward: float, terminated: bool, truncated: bool = False, output=None):
    """A transition built with the reference's fields (no ``done``)."""
    observation = torch.zeros(1, 1)
    return DifferentiableTransition(
        observation=observation,
        policy_output=output if output is not None else {"action": torch.zeros(1, 1)},
        reward=torch.tensor([reward]),
        terminated=torch.tensor([terminated]),
        truncated=torch.tensor([truncated]),
        next_observation=observation,
        info={},
    )


def test_transitions_derive_done_as_the_reference_does():
    assert transition(1.0, True).done.tolist() == [True]
    assert transition(1.0, False, True).done.tolist() == [True]
    assert transition(1.0, False).done.tolist() == [False]
    zero = torch.zeros(1, 1)
    flags = torch.tensor([False]), torch.tensor([True])
    positional = DifferentiableTransition(zero, {"action": zero}, torch.ones(1), *flags, zero, {})
    assert positional.done.tolist() == [True] and positional.info == {}  # the reference's order
    given = DifferentiableTransition(zero, {}, torch.ones(1), *flags, zero, {}, done=flags[0])
    assert given.done.tolist() == [False]  # an explicit done is kept
    assert DifferentiableTransition.from_step(zero, {}, torch.ones(1), *flags, zero, {}).done


def test_apg_reads_entropies_of_tensordict_outputs_with_restarting_discounts():
    tensordict = pytest.importorskip("tensordict")
    policy = ActorOnly(1, 1, "cpu", nn.Linear(1, 1))
    steps = []
    for entropy, terminated in ((3.0, False), (1.0, True), (2.0, False)):
        output = tensordict.TensorDict(
            {"action": torch.zeros(1, 1), "entropy": torch.tensor([entropy]) + policy.log_std},
            batch_size=[1],
        )
        steps.append(transition(0.0, terminated, output=output))
    steps[0] = DifferentiableTransition(**{**vars(steps[0]), "reward": policy.log_std * 0})
    rollout = DifferentiableRollout(torch.zeros(1, 1), tuple(steps))
    metrics = APG(APGCfg(gamma=0.5, ent_coef=0.1), policy).update(rollout)
    assert metrics["entropy"] == pytest.approx(3.0 + 0.5 * 1.0 + 2.0)  # restarts after done


def linear_apg(schedule: LRSchedulerCfg | None = None) -> APG:
    policy = ActorOnly(1, 1, "cpu", nn.Linear(1, 1, bias=False))
    cfg = APGCfg(optimizer=OptimizerCfg(learning_rate=0.1), max_grad_norm=10.0)
    if schedule is not None:
        cfg.lr_scheduler = schedule
    return APG(cfg, policy)


def test_lr_scheduler_is_the_schedule_seen_as_a_torch_scheduler():
    assert linear_apg().lr_scheduler is None  # no schedule configured, as in the reference
    algorithm = linear_apg(LRSchedulerCfg(name="linear", kwargs={"end_factor": 0.5}))
    algorithm.bind_schedule(total_updates=4)
    scheduler = algorithm.lr_scheduler
    assert scheduler.last_epoch == 0 and scheduler.get_last_lr() == [pytest.approx(0.1)]
    scheduler.step()  # the algorithm's own curve moves
    assert algorithm.lr_schedule.step_count == 1 == algorithm.lr_scheduler.last_epoch
    assert algorithm.current_learning_rate() == pytest.approx(0.1 * (1 - 0.5 / 4))
    state = scheduler.state_dict()
    assert state["last_epoch"] == 1 and state["base_lrs"] == [pytest.approx(0.1)]
    other = linear_apg(LRSchedulerCfg(name="linear", kwargs={"end_factor": 0.5}))
    other.lr_scheduler.load_state_dict(state)
    assert other.lr_schedule.step_count == 1
    assert other.current_learning_rate() == pytest.approx(algorithm.current_learning_rate())
    warmup_only = linear_apg(LRSchedulerCfg(warmup_updates=2))
    assert warmup_only.lr_scheduler is not None


def scalar_trainer(policy: nn.Module, tmp_path, **cfg) -> DifferentiableTrainer:
    env = ScalarEnv([1.0, -1.0], episode_steps=4)  # float64, as its spaces
    schedule = LRSchedulerCfg(name="linear")
    algorithm = APG(
        APGCfg(optimizer=OptimizerCfg(learning_rate=0.05), lr_scheduler=schedule), policy
    )
    settings = {"segment_length": 2, "checkpoint_dir": str(tmp_path), **cfg}
    return DifferentiableTrainer(DifferentiableTrainerCfg(**settings), env, policy, algorithm)


class TensorDictOnly(Policy):
    """A TensorDict-convention policy of the reference's base only (it delegates)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = ActorOnly(1, 1, "cpu", nn.Linear(1, 1), initial_log_std=-1.0)

    def forward(self, tensordict, deterministic: bool = False):
        return self.inner.forward(tensordict, deterministic)

    def get_differentiable_action(self, tensordict, deterministic: bool = False):
        return self.inner.get_differentiable_action(tensordict, deterministic)

    def get_value(self, tensordict):
        return self.inner.get_value(tensordict)

    def evaluate_actions(self, tensordict):
        return self.inner.evaluate_actions(tensordict)


@pytest.mark.parametrize("convention", ["both", "tensordict"])
def test_trainer_trains_checkpoints_and_restores_the_lr_scheduler(tmp_path, convention):
    if convention == "tensordict":
        pytest.importorskip("tensordict")

    def make():
        torch.manual_seed(0)
        policy = (
            ActorOnly(1, 1, "cpu", nn.Linear(1, 1)) if convention == "both" else TensorDictOnly()
        )
        return policy.double()

    trainer = scalar_trainer(make(), tmp_path)
    summary = trainer.train(total_updates=3)
    assert summary["num_updates"] == 3
    scheduler = trainer.algorithm.lr_scheduler
    assert scheduler.last_epoch == 3
    path = trainer.save_checkpoint(tmp_path / "port.pt")
    restored = scalar_trainer(make(), tmp_path)
    restored.load_checkpoint(path)
    assert restored.algorithm.lr_scheduler.state_dict() == scheduler.state_dict()
    assert restored.algorithm.current_learning_rate() == trainer.algorithm.current_learning_rate()
    for mine, theirs in zip(restored.policy.parameters(), trainer.policy.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    restored.load_checkpoint(path, resume_scheduler="restart")
    assert restored.algorithm.lr_scheduler.last_epoch == 0


def test_shac_trains_a_tensordict_policy_and_export_takes_it(tmp_path):
    pytest.importorskip("tensordict")
    from pathgrad.export import export_policy

    torch.manual_seed(0)
    env = PointMass(4, max_episode_steps=8, seed=0)
    inner = ActorOnly(6, 2, "cpu", build_mlp_from_cfg(
        {"type": "mlp", "network_cfg": {"hidden_sizes": [8], "last_activation": "tanh"}}, 6, 2
    ))  # fmt: skip

    class Wrapped(TensorDictOnly):
        def __init__(self) -> None:
            Policy.__init__(self)
            self.inner = inner

    policy = Wrapped()
    shac = SHAC(SHACCfg(critic_hidden_sizes=[8], critic_epochs=1), policy, observation_dim=6)
    cfg = DifferentiableTrainerCfg(segment_length=4, checkpoint_dir=str(tmp_path))
    summary = DifferentiableTrainer(cfg, env, policy, shac).train(total_updates=2)
    assert summary["num_updates"] == 2 and math.isfinite(
        summary["last_train_metrics"]["train/loss"]
    )
    program = torch.export.load(
        str(export_policy(policy, None, torch.zeros(3, 6), tmp_path / "policy.pt2"))
    ).module()
    observation = torch.randn(5, 6)
    torch.testing.assert_close(program(observation), inner.get_action(observation))


class Staggered:
    """Env i ends its episodes after i + 1 steps; short episodes succeed (as reaching a goal)."""

    num_envs = 3
    device = torch.device("cpu")

    def __init__(self) -> None:
        self.steps = torch.zeros(3, dtype=torch.long)

    def reset(self, *, seed=None, options=None):
        self.steps.zero_()
        return self.steps[:, None].float(), {}

    def step(self, action):
        self.steps += 1
        done = self.steps >= torch.tensor([1, 2, 3])
        length = self.steps.double()
        info = {
            "success": (done & (length < 3)).clone(),
            "metrics": {"length": length, "corner": torch.stack((length, -length), dim=-1)},
        }
        self.steps[done] = 0
        return self.steps[:, None].float(), torch.ones(3), done, torch.zeros(3, dtype=bool), info


class ZeroAction(nn.Module):
    """The reference's test policies: a plain module taking TensorDicts."""

    def get_action(self, tensordict, deterministic: bool = False):
        assert deterministic
        tensordict["action"] = torch.zeros(tensordict.batch_size[0], 1)
        return tensordict


def test_evaluation_defaults_are_the_reference_and_pathgrad_passes_its_own():
    pytest.importorskip("tensordict")
    # Called as the reference calls it: the first 6 episodes to end, reference keys.
    metrics = evaluate_episodes(policy=ZeroAction(), env=Staggered(), num_episodes=6, device="cpu")
    # Env 0 ends at steps 1, 2, 3 and 4, env 1 at 2, env 2 (the failing one) at 3 only.
    assert metrics["eval/avg_length"] == pytest.approx((4 * 1 + 2 + 3) / 6)
    assert metrics["eval/success_rate"] == pytest.approx(5 / 6)
    assert set(metrics) == {
        "eval/avg_reward", "eval/avg_length", "eval/success_rate", "eval/metrics/length"
    }  # fmt: skip  # [N, 2] metrics dropped
    own = evaluate_episodes(ZeroAction(), Staggered(), 6, "cpu", **PATHGRAD_EVALUATION)
    # Two episodes of every env: lengths 1, 2 and 3 equally, the long ones failures.
    assert own["eval/avg_length"] == pytest.approx(2.0)
    assert own["eval/success_rate"] == pytest.approx(2 / 3)
    assert own["eval/corner/1"] == pytest.approx(-2.0) and "eval/length" in own


def test_the_trainer_evaluates_with_pathgrad_s_options(tmp_path, monkeypatch):
    import pathgrad.trainer.evaluation_schedule as trainer_evaluation

    calls = []

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return evaluate_episodes(*args, **kwargs)

    monkeypatch.setattr(trainer_evaluation, "evaluate_episodes", recording)
    env = ScalarEnv([1.0], episode_steps=2)
    trainer = scalar_trainer(ActorOnly(1, 1, "cpu", nn.Linear(1, 1)).double(), tmp_path,
                             eval_frequency_steps=2, num_eval_episodes=2)  # fmt: skip
    trainer.eval_env = env
    trainer.train(total_updates=1)
    assert calls and all(PATHGRAD_EVALUATION.items() <= call.items() for call in calls)
    assert "eval/position" in trainer.last_eval_metrics
