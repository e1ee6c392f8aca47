"""``contact_ke``/``contact_kd``/``contact_kf`` of a NewtonEnv: every shape and the ground
get them, the substeps chosen follow, and a bad value is named before anything is built."""

from __future__ import annotations

import warnings

import pytest
import torch

pytest.importorskip("newton", reason="the Newton backend needs pathgrad[newton]")

from pathgrad.envs.newton import NewtonEnv  # noqa: E402

BALL = """<mujoco><option timestep="0.01"/><worldbody>
 <body name="ball" pos="0 0 0.1"><joint name="z" type="slide" axis="0 0 1"/>
  <geom type="sphere" size="0.1" mass="1"/></body>
</worldbody></mujoco>"""


class Ball(NewtonEnv):
    observation_dim = 2

    def _reward(self, state, action, next_state):
        return next_state["joint_q"][:, 0]


def ball(tmp_path, **kwargs) -> Ball:
    path = tmp_path / "ball.xml"
    path.write_text(BALL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the substeps chosen; no actuator
        return Ball(1, model_file=str(path), contacts=True, **kwargs)


def test_every_shape_and_the_added_ground_get_the_constants(tmp_path):
    env = ball(tmp_path, contact_ke=300.0, contact_kd=7.0, contact_kf=40.0)
    model = env.simulation.model
    assert model.shape_count == 2  # the ball, and the ground plane pathgrad added
    assert model.shape_material_ke.numpy().tolist() == [300.0, 300.0]
    assert model.shape_material_kd.numpy().tolist() == [7.0, 7.0]
    assert model.shape_material_kf.numpy().tolist() == [40.0, 40.0]


def test_one_constant_given_keeps_the_other(tmp_path):
    stiff = ball(tmp_path).simulation.model
    env = ball(tmp_path, contact_kd=7.0)
    model = env.simulation.model
    assert model.shape_material_ke.numpy().tolist() == stiff.shape_material_ke.numpy().tolist()
    assert model.shape_material_kd.numpy().tolist() == [7.0, 7.0]


def test_a_softer_contact_lets_auto_take_fewer_substeps_and_sinks_deeper(tmp_path):
    stiff = ball(tmp_path, substeps="auto")
    soft = ball(tmp_path, substeps="auto", contact_ke=200.0, contact_kd=5.0)
    assert soft.simulation_options["substeps"] < stiff.simulation_options["substeps"]
    heights = []
    for env in (stiff, soft):
        env.reset(seed=0)
        for _ in range(100):  # a second: both settle on the ground under gravity
            env.step(torch.zeros(1, env.action_dim))
        heights.append(float(env.state["joint_q"][0, 0]))  # the slide's displacement
    # At rest the spring carries the weight: 9.81 N / ke of penetration
    assert heights[1] == pytest.approx(-9.81 / 200.0, abs=2e-3)
    assert heights[0] > heights[1] + 0.02


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [("contact_ke", 0.0, "positive"), ("contact_ke", float("inf"), "positive"),
     ("contact_kd", -1.0, "non-negative"), ("contact_kd", float("nan"), "non-negative"),
     ("contact_ke", "stiff", "a positive number"), ("contact_kf", -5.0, "non-negative"),
     ("contact_kf", True, "a non-negative number")],  # fmt: skip
)
def test_a_bad_constant_is_named(tmp_path, field, value, expected):
    with pytest.raises(ValueError, match=rf"{field} must be {expected}"):
        ball(tmp_path, **{field: value})
