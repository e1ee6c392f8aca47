"""The reference's construction API: build_algo and its registry, utils' builders, messages."""

from __future__ import annotations

import pytest
import torch

from pathgrad.algo import (
    APG,
    SHAC,
    APGCfg,
    BaseAlgorithm,
    RolloutKind,
    build_algo,
    get_registered_algo_names,
    register_algo,
)
from pathgrad.algo.registry import _ROLLOUT_KINDS, ALGORITHMS, get_algorithm
from pathgrad.envs import PointMass
from pathgrad.policies import GaussianMLPPolicy
from pathgrad.utils import (
    LRSchedulerCfg,
    OptimizerCfg,
    bind_scheduler_horizon,
    build_lr_scheduler,
    build_optimizer,
    coerce_lr_scheduler_cfg,
    coerce_optimizer_cfg,
    get_registered_lr_scheduler_names,
    get_registered_optimizer_names,
    scheduler_needs_horizon,
)

BUILT_IN_ALGORITHMS = ["apg", "shac", "ahac", "sapo", "sapo_ensemble", "ahac_stiffness"]


def test_registered_names_and_build_by_name():
    assert get_registered_algo_names() == BUILT_IN_ALGORITHMS
    policy = GaussianMLPPolicy(6, 2)
    algorithm = build_algo(
        "APG",
        {"gamma": 0.9, "optimizer": {"name": "sgd", "learning_rate": 0.5}},
        policy,
        torch.device("cpu"),
    )
    assert type(algorithm) is APG
    assert algorithm.rollout_kind.value == "differentiable"
    assert algorithm.cfg.device == "cpu" and algorithm.cfg.gamma == 0.9
    assert type(algorithm.optimizer) is torch.optim.SGD
    assert algorithm.policy is policy
    # A config instance is used as it is.
    cfg = APGCfg(ent_coef=0.1)
    assert build_algo("apg", cfg, GaussianMLPPolicy(6, 2)).cfg is cfg


def test_unknown_name_lists_the_registered_ones():
    with pytest.raises(
        ValueError,
        match=r"^Algorithm 'ppo' not found\. Available: \['apg', 'shac', 'ahac', 'sapo', "
        r"'sapo_ensemble', 'ahac_stiffness'\]$",
    ):
        build_algo("ppo", {}, GaussianMLPPolicy(6, 2), "cpu")
    # The config/CLI lookup keeps its own message.
    listed = "Available: ahac, ahac_stiffness, apg, sapo, sapo_ensemble, shac"
    with pytest.raises(ValueError, match=f"Unknown algorithm 'ppo'. {listed}"):
        get_algorithm("ppo")


def test_device_and_distributed_errors():
    policy = GaussianMLPPolicy(6, 2)
    with pytest.raises(ValueError, match="Differentiable algorithms do not support distributed"):
        build_algo("apg", {}, policy, "cpu", distributed=True)
    with pytest.raises(ValueError, match="cfg.device is 'meta' but device='cpu' was passed"):
        build_algo("apg", {"device": "meta"}, policy, "cpu")
    with pytest.raises(ValueError, match="cfg must be a APGCfg or a mapping"):
        build_algo("apg", [1], policy)


def test_shac_is_built_from_the_env():
    env = PointMass(2, max_episode_steps=5, seed=0)
    algorithm = build_algo("shac", {}, GaussianMLPPolicy(6, 2), "cpu", env=env)
    assert type(algorithm) is SHAC
    with pytest.raises(ValueError, match="'shac' needs env="):
        build_algo("shac", {}, GaussianMLPPolicy(6, 2), "cpu")


class _StandardAlgorithm(BaseAlgorithm):
    """The smallest algorithm of the contract: every phase, no learning."""

    def __init__(self, cfg, policy):
        self.cfg, self.policy = cfg, policy

    def begin_update(self):
        pass

    def accumulate_segment(self, rollout):
        pass

    def accumulate_complete_rollout(self, rollout, **kwargs):
        pass

    def accumulate_complete_returns(self, returns, entropy_returns, **kwargs):
        pass

    def finish_update(self):
        return {}

    def cancel_update(self):
        pass


def test_register_algo_builds_and_guards_names_and_distributed():
    try:
        register_algo("Mine", APGCfg, _StandardAlgorithm)
        assert get_registered_algo_names()[-1] == "mine"
        assert _ROLLOUT_KINDS["mine"] is RolloutKind.STANDARD
        algorithm = build_algo("mine", {"gamma": 0.5}, GaussianMLPPolicy(6, 2), "cpu")
        assert type(algorithm) is _StandardAlgorithm and algorithm.cfg.gamma == 0.5
        with pytest.raises(ValueError, match="'mine' is already registered"):
            register_algo("mine", APGCfg, _StandardAlgorithm)
        register_algo("mine", APGCfg, _StandardAlgorithm, replace=True)
        if not torch.distributed.is_initialized():
            with pytest.raises(RuntimeError, match="torch.distributed to be initialized"):
                build_algo("mine", {}, GaussianMLPPolicy(6, 2), "cpu", distributed=True)
    finally:
        ALGORITHMS.pop("mine", None)
        _ROLLOUT_KINDS.pop("mine", None)
    assert get_registered_algo_names() == BUILT_IN_ALGORITHMS


def test_utils_builders_take_configs_or_mappings_as_the_reference_does():
    model = torch.nn.Linear(2, 1)
    adamw = build_optimizer(
        model.parameters(),
        OptimizerCfg(name="adamw", learning_rate=1e-3, kwargs={"weight_decay": 0.01}),
    )
    assert type(adamw) is torch.optim.AdamW and adamw.defaults["weight_decay"] == 0.01
    sgd = build_optimizer(model.parameters(), {"name": "sgd", "learning_rate": 0.05})
    scheduler = build_lr_scheduler(
        sgd, LRSchedulerCfg(name="linear", kwargs={"total_iters": 4, "end_factor": 0.0})
    )
    assert isinstance(scheduler, torch.optim.lr_scheduler.LRScheduler)
    for _ in range(4):
        sgd.step()
        scheduler.step()
    assert sgd.param_groups[0]["lr"] == pytest.approx(0.0)
    assert coerce_optimizer_cfg({"name": "sgd"}) == OptimizerCfg(name="sgd")
    assert coerce_lr_scheduler_cfg(None) == LRSchedulerCfg()
    assert get_registered_optimizer_names() == ["adam", "adamw", "rmsprop", "sgd"]
    assert "cosine" in get_registered_lr_scheduler_names()


def test_scheduler_horizon_helpers():
    assert scheduler_needs_horizon(LRSchedulerCfg(name="linear"))
    assert not scheduler_needs_horizon(LRSchedulerCfg(name=None))
    bound = bind_scheduler_horizon({"name": "cosine", "warmup_updates": 2}, 10)
    assert bound.kwargs == {"T_max": 8} and not scheduler_needs_horizon(bound)
    explicit = LRSchedulerCfg(name="linear", kwargs={"total_iters": 3})
    assert bind_scheduler_horizon(explicit, 10) is explicit
    with pytest.raises(ValueError, match="total_updates must be positive"):
        bind_scheduler_horizon(explicit, 0)


def test_error_messages_carry_the_reference_wording():
    with pytest.raises(ValueError, match="Unsupported optimizer 'not-an-optimizer'"):
        OptimizerCfg(name="not-an-optimizer")
    with pytest.raises(ValueError, match="OptimizerCfg.learning_rate"):
        OptimizerCfg(kwargs={"lr": 1e-2})
    with pytest.raises(ValueError, match=r"T_max"):
        build_lr_scheduler(
            torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=1.0), {"name": "cosine"}
        )


# Every import of the reference's trainer and APG (../shared/seeds), as pathgrad.X, plus the
# modules of its layout (../shared/DESIGN.md, "Module map"); wherever the real home now is.
REFERENCE_MODULE_MAP = {
    "pathgrad.algo": ("APG", "BaseAlgorithm", "RolloutKind"),
    "pathgrad.collector": ("DifferentiableCollector", "DifferentiableRollout"),
    "pathgrad.env": (
        "DifferentiableRolloutSpec",
        "DifferentiableVecEnv",
        "ScheduledDifferentiableVecEnv",
        "register_learning_env",
        "build_learning_env",
    ),
    "pathgrad.evaluation": ("evaluate_episodes",),
    "pathgrad.policies": ("Policy", "GaussianMLPPolicy"),
    "pathgrad.normalization": ("RunningObservationNormalizer",),
    "pathgrad.checkpoint": ("_load", "_save"),
    "pathgrad.utils": ("scheduler_needs_horizon", "configclass", "AlgorithmCfg"),
    "pathgrad.gradients": ("BatchedGradientNormStats",),
    "pathgrad.differentiable_trainer": ("DifferentiableTrainer", "DifferentiableTrainerCfg"),
    "pathgrad.cli": ("main",),
    "pathgrad.envs": ("PointMass",),
}


@pytest.mark.parametrize("module", sorted(REFERENCE_MODULE_MAP))
def test_the_reference_module_map_stays_importable(module):
    import importlib

    loaded = importlib.import_module(module)
    missing = [name for name in REFERENCE_MODULE_MAP[module] if not hasattr(loaded, name)]
    assert missing == [], f"{module} lacks {missing}"
