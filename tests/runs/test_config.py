"""Run configs: merging files, defaults and overrides; derived names; value checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers import ROOT
from pathgrad.runs.config import ConfigError, default_experiment_name, dump_config, load_config


def test_an_override_without_a_file_merges_into_the_default_task():
    config = load_config(None, ["algorithm.cfg.gamma=0.95"])
    default = load_config(None)
    assert config.algorithm.cfg == {**default.algorithm.cfg, "gamma": 0.95}
    assert config.algorithm.cfg["optimizer"]["learning_rate"] == 3e-3
    assert config.algorithm.cfg["lr_scheduler"] == {"name": "linear", "kwargs": {"end_factor": 0.1}}
    nested = load_config(None, ["algorithm.cfg.optimizer.kwargs.betas=[0.9,0.99]"])
    assert nested.algorithm.cfg["optimizer"] == {
        "name": "adam",
        "learning_rate": 3e-3,
        "kwargs": {"betas": [0.9, 0.99]},
    }


def test_an_override_with_a_mapping_value_replaces_the_mapping_at_its_key():
    # the default schedule's kwargs (end_factor) would be unknown to 'constant' if merged
    config = load_config(None, ["algorithm.cfg.lr_scheduler={name: constant}"])
    assert config.algorithm.cfg["lr_scheduler"] == {"name": "constant"}
    with pytest.raises(ConfigError, match="end_factor"):  # a scalar override still merges
        load_config(None, ["algorithm.cfg.lr_scheduler.name=constant"])
    later = load_config(  # replaced, then changed one value at a time again
        None, ["algorithm.cfg.optimizer={name: sgd}", "algorithm.cfg.optimizer.learning_rate=0.1"]
    )
    assert later.algorithm.cfg["optimizer"] == {"name": "sgd", "learning_rate": 0.1}
    assert later.algorithm.cfg["gamma"] == load_config(None).algorithm.cfg["gamma"]
    fresh = load_config(None, ["env.cfg={obstacles: []}"])  # a new key takes the mapping too
    assert fresh.env.cfg == {"obstacles": []}


@pytest.mark.parametrize("override", ["policy.hidden_sizes.x=1", "policy.hidden_sizes.x={a: 1}"])
def test_an_override_under_a_list_is_a_config_error_naming_the_key(override):
    with pytest.raises(ConfigError, match=r"^policy\.hidden_sizes\.x: cannot apply the override"):
        load_config(None, [override])


def test_overrides_merge_into_a_file_exactly_as_into_the_default_task(tmp_path):
    path = tmp_path / "task.yaml"
    path.write_text((ROOT / "configs" / "point_mass.yaml").read_text())
    for overrides in (
        ["algorithm.cfg.gamma=0.95"],
        ["algorithm.cfg.optimizer.learning_rate=1e-3", "policy.hidden_sizes=[32]"],
        ["env.name=Pendulum", "trainer.total_timesteps=1000"],
    ):
        assert load_config(path, overrides) == load_config(None, overrides), overrides
    sparse = tmp_path / "sparse.yaml"  # a file without algorithm.cfg gets the default one
    sparse.write_text("trainer:\n  seed: 3\n")
    merged = load_config(sparse, ["algorithm.cfg.gamma=0.9"])
    assert merged.algorithm.cfg["optimizer"]["learning_rate"] == 3e-3
    assert merged.trainer.seed == 3 and merged.algorithm.cfg["gamma"] == 0.9


def test_a_section_value_given_by_a_file_is_taken_whole(tmp_path):
    path = tmp_path / "task.yaml"
    path.write_text("algorithm:\n  cfg:\n    gamma: 0.9\n")
    assert load_config(path).algorithm.cfg == {"gamma": 0.9}  # the APGCfg defaults apply


def test_yaml_merge_keys_may_repeat_what_they_merge(tmp_path):
    path = tmp_path / "merged.yaml"
    path.write_text(
        "env:\n  name: PointMass\n  cfg: &point\n    mass: 2.0\n    dt: 0.05\n"
        "  train_cfg:\n    <<: *point\n    mass: 3.0\n"
    )
    config = load_config(path, [])
    assert config.env.cfg == {"mass": 2.0, "dt": 0.05}
    assert config.env.train_cfg == {"mass": 3.0, "dt": 0.05}


def test_the_last_budget_given_wins(tmp_path):
    config = load_config(None, ["trainer.total_timesteps=5000"])
    assert (config.trainer.total_timesteps, config.trainer.total_updates) == (5000, None)
    path = tmp_path / "steps.yaml"
    path.write_text("trainer:\n  total_timesteps: 1000\n")
    assert load_config(path).trainer.total_updates is None
    back = load_config(path, ["trainer.total_updates=7"])
    assert (back.trainer.total_timesteps, back.trainer.total_updates) == (None, 7)
    last = load_config(None, ["trainer.total_updates=3", "trainer.total_timesteps=4"])
    assert (last.trainer.total_timesteps, last.trainer.total_updates) == (4, None)
    path.write_text("trainer:\n  total_timesteps: 1000\n  total_updates: 5\n")
    with pytest.raises(ConfigError, match="give exactly one of total_timesteps"):
        load_config(path)


def test_experiment_names_follow_the_env_and_algorithm(tmp_path):
    assert load_config(None).trainer.experiment_name == "point_mass"
    assert load_config(None, ["env.name=Pendulum"]).trainer.experiment_name == "pendulum"
    shac = load_config(ROOT / "configs" / "reacher_shac.yaml")
    assert shac.trainer.experiment_name == "reacher_shac"
    swing = load_config(ROOT / "configs" / "cartpole_swingup.yaml", ["env.name=Reacher"])
    assert swing.trainer.experiment_name == "reacher"
    named = load_config(None, ["trainer.experiment_name=mine", "env.name=Pendulum"])
    assert named.trainer.experiment_name == "mine"
    assert default_experiment_name("MountainCarContinuous", "APG") == "mountain_car_continuous"
    assert default_experiment_name("my-env v2", "shac") == "my_env_v2_shac"
    assert default_experiment_name("DiffRLAnt", "shac") == "diff_rl_ant_shac"
    assert default_experiment_name("NewtonCartPoleSwingUp", "apg") == "newton_cart_pole_swing_up"
    assert default_experiment_name("MyPDController", "apg") == "my_pd_controller"
    path = tmp_path / "config.yaml"  # the resolved name is written and read back
    path.write_text(dump_config(load_config(None, ["env.name=Pendulum"])))
    assert load_config(path, ["env.name=Reacher"]).trainer.experiment_name == "pendulum"


def test_interpolations_and_override_errors():
    config = load_config(None, ["trainer.experiment_name=${env.name}-run"])
    assert config.trainer.experiment_name == "PointMass-run"
    with pytest.raises(ConfigError, match="cannot resolve an interpolation"):
        load_config(None, ["trainer.experiment_name=${nowhere}"])
    with pytest.raises(ConfigError, match="policy.hidden_sizes: cannot parse the value"):
        load_config(None, ["policy.hidden_sizes=[64"])
    with pytest.raises(ConfigError, match="must look like section.key=value"):
        load_config(None, ["trainer.=3"])
    with pytest.raises(ConfigError, match="trainer.seed: input should be a valid integer"):
        load_config(None, ["trainer.seed.x=1"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_unavailable_devices_are_config_errors():
    with pytest.raises(ConfigError, match="env.device: 'cuda' is not available"):
        load_config(None, ["env.device=cuda"])
    with pytest.raises(ConfigError, match="env.device: 'tpu' is not a torch device"):
        load_config(None, ["env.device=tpu"])


def test_seeds_must_fit_torch():
    with pytest.raises(ConfigError, match="trainer.seed: input should be less than"):
        load_config(None, [f"trainer.seed={2**64}"])
    with pytest.raises(ConfigError, match="eval.seed: input should be greater than"):
        load_config(None, ["eval.seed=-3"])
    assert load_config(None, ["eval.seed=null"]).eval.seed is None


def test_the_default_policy_respects_the_action_space():
    from pathgrad.runs.run import build_run

    for name in ("point_mass", "reacher", "reacher_shac", "pendulum", "quadrotor"):
        config = load_config(ROOT / "configs" / f"{name}.yaml", ["env.num_envs=4"])
        assert config.policy.squash, name
    objects = build_run(load_config(None, ["env.num_envs=8"]), Path("unused"))
    space = objects.env.single_action_space
    observation, _ = objects.env.reset(seed=0)
    with torch.no_grad():
        for layer in objects.policy.mean_net:
            if isinstance(layer, torch.nn.Linear):
                layer.weight.normal_(0.0, 5.0)  # a policy whose mean is far outside
        action = objects.policy.get_action(observation * 100, deterministic=False)
    assert bool((action >= torch.as_tensor(space.low)).all())
    assert bool((action <= torch.as_tensor(space.high)).all())


def test_layer_norm_switches_reach_the_policy_and_the_critic():
    from pathgrad.runs.run import build_run

    def norms(network: torch.nn.Module) -> list[tuple[int, ...]]:
        return [m.normalized_shape for m in network.modules() if isinstance(m, torch.nn.LayerNorm)]

    plain = build_run(load_config(ROOT / "configs" / "pendulum_shac.yaml"), Path("unused"))
    assert norms(plain.policy) == [] and norms(plain.algorithm.critic) == []
    overrides = ["policy.layer_norm=true", "algorithm.cfg.critic_layer_norm=true"]
    for name in ("pendulum_shac", "pendulum_sapo"):
        config = load_config(ROOT / "configs" / f"{name}.yaml", overrides)
        objects = build_run(config, Path("unused"))
        hidden = [(width,) for width in config.policy.hidden_sizes]
        critic_hidden = [(width,) for width in config.algorithm.cfg["critic_hidden_sizes"]]
        members = getattr(objects.algorithm.critic, "members", [objects.algorithm.critic])
        assert norms(objects.policy) == hidden, name
        assert all(norms(member) == critic_hidden for member in members), name
    with pytest.raises(ConfigError, match="policy.layer_norm: input should be a valid boolean"):
        load_config(None, ["policy.layer_norm=maybe"])


def test_train_cfg_reaches_the_training_envs_only(tmp_path):
    from pathgrad.runs.run import build_run

    config = load_config(
        None,
        ["env.name=CartPoleSwingUp", "env.num_envs=256", "eval.num_envs=256",
         "env.cfg.control_cost=0.02", "env.train_cfg.initial_angle_spread=3.0"],
    )  # fmt: skip
    objects = build_run(config, tmp_path)
    train, evaluation = objects.env, objects.eval_env
    assert train.initial_angle_spread == 3.0 and evaluation.initial_angle_spread == 0.1
    assert train.control_cost == evaluation.control_cost == 0.02  # cfg reaches both
    train.reset(seed=0)
    evaluation.reset(seed=0)
    assert float((train.state["angle"] - torch.pi).abs().max()) > 2.5
    assert float((evaluation.state["angle"] - torch.pi).abs().max()) <= 0.1
    for override, message in [
        ("env.train_cfg.initial_angle_sprea=1", "env.train_cfg.initial_angle_sprea: unknown key"),
        ("env.train_cfg.initial_angle_spread=wide", "env.train_cfg.initial_angle_spread"),
        ("env.train_cfg.seed=1", "env.train_cfg.seed: set by the env section or trainer.seed"),
    ]:
        with pytest.raises(ConfigError, match=message):
            load_config(None, ["env.name=CartPoleSwingUp", override])
    with pytest.raises(ConfigError, match=r"initial_angle_spread must be in \[0, pi\], got 4.0"):
        build_run(load_config(None, [
            "env.name=CartPoleSwingUp", "env.train_cfg.initial_angle_spread=4.0"
        ]), tmp_path)  # fmt: skip


@pytest.mark.parametrize("later", [[], ["trainer.num_threads=1"]])
def test_an_override_that_sets_a_section_to_a_value_is_refused(later):
    """Also when a later override (``--num-threads``) would make it a mapping again."""
    with pytest.raises(ConfigError) as caught:
        load_config(None, ["trainer=3", *later])
    assert (
        str(caught.value) == "trainer: a section takes keys (trainer.KEY=VALUE), not the value '3'."
    )


def test_a_flow_mapping_without_a_space_after_the_colon_is_named(tmp_path):
    """YAML reads ``{name:Pendulum}`` as the key 'name:Pendulum' with no value."""
    with pytest.raises(ConfigError) as caught:
        load_config(None, ["env.cfg={dt:0.1}"])
    assert str(caught.value) == (
        "env.cfg.dt:0.1: YAML reads 'dt:0.1' in the override 'env.cfg={dt:0.1}' as one key "
        "without a value; write 'dt: 0.1' (a space after the colon)."
    )
    path = tmp_path / "joined.yaml"
    path.write_text("env: {name:Pendulum}\n")
    expected = r"^env.name:Pendulum: YAML reads 'name:Pendulum' in the config file as one key"
    with pytest.raises(ConfigError, match=expected + r" without a value; write 'name: Pendulum'"):
        load_config(path, [])
    assert load_config(None, ["env.cfg={dt: 0.1}"]).env.cfg == {"dt": 0.1}
    assert load_config(None, ["logging.wandb_project=a:b"]).logging.wandb_project == "a:b"


@pytest.mark.parametrize(
    "text, key",
    [("a: &a [*a]\n", "a"), ("trainer:\n  x: &x [1, {y: *x}]\n", "trainer.x")],
)
def test_a_yaml_value_that_contains_itself_is_one_line(tmp_path, text, key):
    path = tmp_path / "loop.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (
        f"YAML error in '{path}': the value of '{key}' contains itself (an anchor '&' used by "
        "an alias '*' inside its own value)."
    )


def test_an_alias_used_twice_is_no_loop(tmp_path):
    path = tmp_path / "shared.yaml"
    path.write_text("env: {num_envs: &n 8}\neval: {num_envs: *n}\n")
    assert load_config(path).eval.num_envs == 8


def test_a_validated_config_carries_its_resolution_and_a_changed_env_is_resolved_again():
    from pathgrad.envs import Pendulum, PointMass
    from pathgrad.runs.config import resolution
    from pathgrad.runs.run import build_env

    config = load_config(None, [])
    resolved = resolution(config)
    assert resolved.env_factory is PointMass and "seed" in resolved.env_arguments
    assert load_config(None, []) == config  # the resolution is not part of the value
    config.env.name = "Pendulum"  # edited after validation: built as what it now names
    assert isinstance(build_env(config, 2, 0), Pendulum)
