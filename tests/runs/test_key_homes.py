"""A key given in the wrong section is named with the section it belongs to."""

from __future__ import annotations

import pytest

from helpers import ROOT
from pathgrad.runs import key_homes
from pathgrad.runs.config import ConfigError, load_config

PENDULUM = ROOT / "configs" / "pendulum.yaml"


@pytest.mark.parametrize(
    "override, message",
    [
        ("env.max_episode_steps=100", "env.max_episode_steps: unknown key (did you mean "
         "'env.cfg.max_episode_steps'?)"),
        ("algorithm.gamma=0.9", "algorithm.gamma: unknown key (did you mean "
         "'algorithm.cfg.gamma'?)"),
        ("trainer.gamma=0.9", "trainer.gamma: unknown key (did you mean 'algorithm.cfg.gamma'?)"),
        ("env.cfg.gamma=0.9", "env.cfg.gamma: unknown key (did you mean 'algorithm.cfg.gamma'?)"),
        ("algorithm.cfg.num_envs=3", "algorithm.cfg.num_envs: unknown key (did you mean "
         "'env.num_envs'?)"),
        ("algorithm.cfg.segment_length=3", "algorithm.cfg.segment_length: unknown key (did you "
         "mean 'trainer.segment_length'?)"),
        ("env.seed=3", "env.seed: unknown key (did you mean 'trainer.seed'?)"),
        ("trainer.hidden_sizes=[3]", "trainer.hidden_sizes: unknown key (did you mean "
         "'policy.hidden_sizes'?)"),
        ("eval.num_env=3", "eval.num_env: unknown key (did you mean 'num_envs'?)"),  # a typo
        ("env.wobble=3", "env.wobble: unknown key"),  # nowhere: no hint
        ("trainer.run_dir=/tmp/x", "trainer.run_dir: unknown key (run_dir is an option of the "
         "command, not a config key: --run-dir DIR)"),
        ("eval.nproc=2", "eval.nproc: unknown key (nproc is an option of the command, not a "
         "config key: --nproc N)"),
    ],
)  # fmt: skip
def test_a_key_in_the_wrong_section_names_its_section(override, message):
    with pytest.raises(ConfigError) as caught:
        load_config(PENDULUM, [override])
    assert str(caught.value) == message


def test_an_env_constructor_argument_is_looked_up_on_the_configured_env():
    """``substeps`` is DiffRLAnt's argument (Newton), not Pendulum's."""
    pytest.importorskip("newton")
    with pytest.raises(ConfigError, match=r"env.substeps: unknown key \(did you mean "
                       r"'env.cfg.substeps'\?\)"):  # fmt: skip
        load_config(ROOT / "configs" / "diffrl_ant_shac.yaml", ["env.substeps=8"])
    with pytest.raises(ConfigError) as caught:
        load_config(PENDULUM, ["env.substeps=8"])
    assert str(caught.value) == "env.substeps: unknown key"


def test_an_env_that_cannot_be_resolved_gives_the_error_without_a_hint():
    with pytest.raises(ConfigError) as caught:
        load_config(PENDULUM, ["env.module=no_such_module_here", "env.max_episode_steps=5"])
    assert str(caught.value) == "env.max_episode_steps: unknown key"


def test_a_failing_lookup_leaves_the_error_as_it_was(monkeypatch):
    def broken(data):
        raise TypeError("a bug in the lookup")

    monkeypatch.setattr(key_homes, "_homes", broken)
    with pytest.raises(ConfigError) as caught:
        load_config(PENDULUM, ["algorithm.gamma=0.9"])
    assert str(caught.value) == "algorithm.gamma: unknown key"
