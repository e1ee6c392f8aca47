"""Config classes: defaults, per-instance copies, validation messages."""

from __future__ import annotations

import pytest

from pathgrad.utils import (
    AlgorithmCfg,
    LRSchedulerCfg,
    OptimizerCfg,
    configclass,
    scheduler_needs_horizon,
)


def test_configclass_copies_mutable_defaults_per_instance():
    @configclass
    class Cfg:
        values: dict = {"a": 1}
        items: list = [1, 2]

    first, second = Cfg(), Cfg()
    first.values["a"] = 2
    first.items.append(3)
    assert second.values == {"a": 1}
    assert second.items == [1, 2]
    assert first.to_dict() == {"values": {"a": 2}, "items": [1, 2, 3]}


def test_configclass_runs_validate_on_construction_and_replace():
    @configclass
    class Cfg:
        size: int = 1

        def validate(self) -> None:
            if self.size <= 0:
                raise ValueError("size must be positive.")

    with pytest.raises(ValueError, match="size must be positive"):
        Cfg(size=0)
    with pytest.raises(ValueError, match="size must be positive"):
        Cfg().replace(size=-1)
    assert Cfg().replace(size=3).size == 3


def test_algorithm_cfg_coerces_mappings_into_nested_configs():
    cfg = AlgorithmCfg(
        optimizer={"name": "sgd", "learning_rate": 0.1}, lr_scheduler={"name": "cosine"}
    )
    assert isinstance(cfg.optimizer, OptimizerCfg) and cfg.optimizer.name == "sgd"
    assert isinstance(cfg.lr_scheduler, LRSchedulerCfg) and cfg.lr_scheduler.name == "cosine"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gamma": 1.5}, "gamma must be in"),
        ({"max_grad_norm": 0.0}, "max_grad_norm must be positive"),
        ({"optimizer": {"nme": "adam"}}, r"optimizer has unknown keys \['nme'\]"),
        ({"optimizer": 3}, "optimizer must be a OptimizerCfg or a mapping"),
        ({"optimizer": {"name": "adagrad"}}, "optimizer.name must be one of"),
        ({"optimizer": {"learning_rate": 0.0}}, "optimizer.learning_rate must be positive"),
        ({"optimizer": {"kwargs": {"lr": 1.0}}}, "optimizer.learning_rate, not optimizer.kwargs"),
        ({"lr_scheduler": {"name": "plateau"}}, "lr_scheduler.name must be one of"),
        ({"lr_scheduler": {"name": "linear", "kwargs": {"T_max": 3}}}, r"unknown keys \['T_max'\]"),
        ({"lr_scheduler": {"name": "exponential"}}, r"kwargs\['gamma'\] is required"),
        ({"lr_scheduler": {"name": "step"}}, r"kwargs\['step_size'\] is required"),
        ({"lr_scheduler": {"name": "cosine", "kwargs": {"T_max": 0}}}, "must be positive"),
        ({"lr_scheduler": {"name": "linear", "kwargs": {"end_factor": -1}}}, "cannot be negative"),
        ({"lr_scheduler": {"warmup_updates": -1}}, "warmup_updates cannot be negative"),
        ({"lr_scheduler": {"warmup_start_factor": 2.0}}, "warmup_start_factor must be in"),
    ],
)
def test_algorithm_cfg_rejects_bad_values_naming_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AlgorithmCfg(**kwargs)


def test_scheduler_needs_horizon_only_for_unbound_linear_and_cosine():
    assert scheduler_needs_horizon({"name": "linear"})
    assert scheduler_needs_horizon(LRSchedulerCfg(name="Cosine"))
    assert not scheduler_needs_horizon({"name": "linear", "kwargs": {"total_iters": 5}})
    assert not scheduler_needs_horizon({"name": "cosine", "kwargs": {"T_max": 5}})
    assert not scheduler_needs_horizon({"name": "exponential", "kwargs": {"gamma": 0.9}})
    assert not scheduler_needs_horizon(None)
    assert not scheduler_needs_horizon({"name": "constant"})
