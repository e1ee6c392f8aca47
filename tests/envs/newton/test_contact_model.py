"""The robots' ``contact_model``: a misspelt or negative entry is named before any build."""

from __future__ import annotations

import pytest

pytest.importorskip("newton")

from pathgrad.envs.newton import (  # noqa: E402
    DiffRLAnt,
    DiffRLHalfCheetah,
    DiffRLHopper,
    DiffRLHumanoid,
    NewtonAnt,
)

ROBOTS = [NewtonAnt, DiffRLAnt, DiffRLHopper, DiffRLHumanoid]


@pytest.mark.parametrize("robot", ROBOTS, ids=lambda robot: robot.__name__)
def test_an_unknown_entry_is_named_with_the_entries_there_are(robot):
    with pytest.raises(
        ValueError, match=r"contact_model has no entry 'stiffness'; entries: .*contact_ke"
    ):
        robot(num_envs=2, contact_model={"stiffness": 1.0})


@pytest.mark.parametrize("robot", ROBOTS, ids=lambda robot: robot.__name__)
@pytest.mark.parametrize("value", [-1.0, float("nan")])
def test_a_negative_or_nan_entry_is_named(robot, value):
    with pytest.raises(ValueError, match=r"contact_kd cannot be negative"):
        robot(num_envs=2, contact_model={"contact_kd": value})


def test_overrides_replace_only_their_entries():
    from pathgrad.envs.newton.engine.contact_materials import contact_model_with

    defaults = {"contact_ke": 1.0, "contact_kd": 2.0}
    assert contact_model_with(defaults, {"contact_kd": 3.0}) == {
        "contact_ke": 1.0,
        "contact_kd": 3.0,
    }
    assert contact_model_with(defaults, None) == defaults


@pytest.mark.parametrize("robot", [DiffRLHopper, DiffRLHalfCheetah], ids=lambda r: r.__name__)
def test_each_planar_robot_defaults_every_contact_model_entry(robot):
    from pathgrad.envs.newton.robots.diffrl_planar import CONTACT_MODEL_KEYS

    assert sorted(robot.contact_defaults) == sorted(CONTACT_MODEL_KEYS)
