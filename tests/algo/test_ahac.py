"""AHAC (the authors' definition): actor gradient, critics, config, checkpoints, build."""

from __future__ import annotations

import pytest
import torch

from helpers import (
    ROOT,
    LinearPolicy,
    build_point_mass_trainer,
    contact_point_mass,
    float64_windows,
    window_gradient_error,
)
from pathgrad.algo import AHAC, AHACCfg, build_algo
from pathgrad.algo.twin_critic import TwinCritic, fit_to_convergence


def small_cfg(**fields) -> AHACCfg:
    return AHACCfg(critic_hidden_sizes=[8], **fields)


def test_actor_gradient_matches_finite_differences_across_a_truncation():
    policy, normalizer, rollout = float64_windows(contacts=True)
    ahac = AHAC(small_cfg(gamma=0.9, critic_activation="tanh", reward_scale=0.5), policy, 6)
    with torch.no_grad():  # LayerNorm's affine terms away from their 1/0 start
        for module in ahac.critic.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
    ahac.observation_transform = normalizer.normalize
    assert window_gradient_error(ahac, lambda: rollout(5)) < 1e-6
    ahac.begin_update()  # the bootstrap leaves the critics' weights without gradient
    ahac.accumulate_segment(rollout(5))
    assert all(p.grad is None for p in ahac.critic.parameters())
    assert ahac._contacts[0].shape == (5,)
    ahac.cancel_update()


def test_two_independent_critics_no_target_and_the_min_bootstraps():
    ahac = AHAC(small_cfg(), LinearPolicy(), 1)
    assert ahac.target_critic is None and "target_critic" not in ahac.state_dict()
    first, second = (list(head.parameters()) for head in ahac.critic.heads)
    assert all(a.data_ptr() != b.data_ptr() for a, b in zip(first, second, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    norms = [m for m in ahac.critic.heads[0] if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) == 1  # Linear -> ELU -> LayerNorm per hidden layer
    x = torch.randn(5, 1, dtype=torch.float64)  # LinearPolicy is float64
    both = ahac.critic.predict(x)
    assert torch.equal(ahac.critic(x).squeeze(-1), both.min(dim=-1).values)
    linear = ahac.critic.heads[0][0]
    assert torch.equal(linear.bias, torch.zeros_like(linear.bias))


def critic_and_data(rate: float):
    torch.manual_seed(0)
    critic = TwinCritic(3, [8], "elu").double()
    optimizer = torch.optim.SGD(critic.parameters(), lr=rate)
    inputs = torch.randn(40, 3, dtype=torch.float64)
    return critic, optimizer, inputs, inputs.sum(-1)


def test_critic_stops_after_pass_6_on_a_flat_loss_and_runs_to_the_limit_otherwise():
    critic, optimizer, inputs, targets = critic_and_data(0.0)  # lr 0: the loss stays flat
    passes, loss = fit_to_convergence(
        critic, optimizer, inputs, targets, minibatches=4, max_passes=64, tolerance=0.2
    )
    assert passes == 6 and loss > 0.0
    critic, optimizer, inputs, targets = critic_and_data(1e-3)
    passes, _ = fit_to_convergence(
        critic, optimizer, inputs, targets, minibatches=4, max_passes=64, tolerance=0.0
    )
    assert passes == 64
    seen = []  # 4 unshuffled minibatches of 10 rows, then a remainder of 3 with 43 rows
    critic, optimizer, inputs, targets = critic_and_data(0.0)
    rows = torch.cat([inputs, inputs[:3]])
    critic.predict = lambda x, f=critic.predict: seen.append(x.shape[0]) or f(x)
    fit_to_convergence(critic, optimizer, rows, rows.sum(-1), minibatches=4, max_passes=1,
                       tolerance=0.2)  # fmt: skip
    assert seen == [10, 10, 10, 10, 3]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"min_horizon": 0}, "min_horizon must be a positive integer, got 0"),
        ({"max_horizon": 2.5}, "max_horizon must be a positive integer"),
        ({"min_horizon": 8, "max_horizon": 4}, r"max_horizon must be at least min_horizon \(8\)"),
        ({"contact_threshold": -1.0}, "contact_threshold must be a finite number >= 0"),
        ({"horizon_lr": float("nan")}, "horizon_lr must be a finite number >= 0"),
        ({"horizon_lr_scheduler": {"name": "warp"}}, "horizon_lr_scheduler: lr_scheduler.name"),
        ({"critic_max_grad_norm": -1.0}, "critic_max_grad_norm must be >= 0"),
    ],
)
def test_config_validation_names_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        AHACCfg(**fields)


def test_target_critic_alpha_is_not_a_field_and_its_error_says_so():
    assert "target_critic_alpha" not in AHACCfg.__dataclass_fields__
    for value in (0.2, 0.5):  # even SHAC's default: AHAC has no target critic
        with pytest.raises(ValueError, match="^target_critic_alpha: AHAC has no target critic"):
            build_algo("ahac", {"target_critic_alpha": value}, LinearPolicy(), "cpu")


def test_envs_without_contacts_are_refused_at_build_time():
    from pathgrad.envs import PointMass

    with pytest.raises(ValueError, match=r"PointMass reports none\. Use 'ahac_stiffness'"):
        build_algo("ahac", {}, LinearPolicy(), "cpu", env=PointMass(2))
    assert isinstance(
        build_algo("ahac", {}, LinearPolicy(), "cpu", env=contact_point_mass(2)), AHAC
    )


def test_checkpoints_of_other_algorithms_are_refused_by_name(tmp_path):
    stiffness = build_point_mass_trainer(tmp_path / "s", algorithm="ahac_stiffness")
    trainer = build_point_mass_trainer(tmp_path / "a", algorithm="ahac", contacts=True)
    with pytest.raises(ValueError, match="is an 'ahac_stiffness' state"):
        trainer.load_checkpoint(stiffness.save_checkpoint())
    state = trainer.algorithm.state_dict()
    for change, message in [
        ({"horizon": 99.0}, r"algorithm.adaptive_horizon.horizon 99.0 is outside \[8, 64\]"),
        ({"duals": [0.0] * 3}, "algorithm.adaptive_horizon.duals has 3 values, expected"),
        ({"duals": [float("nan")] * 8}, "algorithm.adaptive_horizon.duals must be a list of"),
    ]:
        bad = {**state, "adaptive_horizon": {**state["adaptive_horizon"], **change}}
        with pytest.raises(ValueError, match=message):
            trainer.algorithm.validate_state_dict(bad)
    del state["adaptive_horizon"]
    with pytest.raises(ValueError, match="has no 'adaptive_horizon'"):
        trainer.algorithm.validate_state_dict(state)


def test_a_run_config_of_the_former_ahac_gets_one_line_naming_ahac_stiffness():
    from pathgrad.runs.config import ConfigError, load_config
    from pathgrad.runs.run import build_run

    config = load_config("src/pathgrad/configs/pendulum_ahac.yaml")  # now ahac_stiffness
    assert config.algorithm.name == "ahac_stiffness"
    with pytest.raises(ConfigError, match=r"^algorithm.cfg.stiffness_threshold: .*"
                       r"set algorithm.name: ahac_stiffness") as error:  # fmt: skip
        load_config("src/pathgrad/configs/pendulum_ahac.yaml", ["algorithm.name=ahac"])
    assert "\n" not in str(error.value)
    config = load_config("src/pathgrad/configs/point_mass.yaml", ["algorithm.name=ahac"])
    with pytest.raises(ConfigError, match=r"PointMass reports none\. Use 'ahac_stiffness'"):
        build_run(config, ROOT / "unused")
