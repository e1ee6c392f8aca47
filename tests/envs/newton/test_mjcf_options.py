"""What an MJCF file asks that Featherstone does not do is named, joint by joint, with the
``<default>`` classes applied (read_mjcf_options; no Newton model is built)."""

from __future__ import annotations

import pytest

pytest.importorskip("newton")

from pathgrad.envs.newton.model_files.mjcf_options import read_mjcf_options  # noqa: E402

HAND = """<mujoco>
  <default><joint frictionloss="0.001" damping="0.05"/>
    <default class="free"><joint frictionloss="0" damping="0"/></default>
  </default>
  <worldbody>
    <body name="palm"><joint name="wrist" type="hinge"/><geom size="0.05"/>
      <body name="finger" pos="0.1 0 0"><joint type="hinge"/><geom size="0.02"/></body>
    </body>
    <body name="cube" pos="0.3 0 0"><joint name="cube:joint" type="free" damping="0.01"/>
      <geom type="box" size="0.02 0.02 0.02"/></body>
    <body name="target" pos="0.6 0 0"><joint class="free" name="target:joint" type="free"/>
      <geom type="box" size="0.02 0.02 0.02"/></body>
    <body name="hand_target" mocap="true"/>
  </worldbody>
  <equality><weld body1="target"/><weld name="grip" body1="hand_target" body2="palm"/>
    <joint joint1="wrist" joint2="cube:joint"/></equality>
</mujoco>"""


def test_friction_loss_is_named_with_its_classes(tmp_path):
    # The friction loss comes from the top class (the fingers' joint has no name; the cube's
    # free joint too, whose friction loss is left out), not the target's class.
    path = tmp_path / "hand.xml"
    path.write_text(HAND)
    notes = read_mjcf_options(path).not_applied
    assert notes == [
        "equality constraints (weld ('target' to the world), weld 'grip' (mocap body "
        "'hand_target' to 'palm'), joint ('wrist' to 'cube:joint')): left out, nothing holds "
        "what they tie (a weld to a mocap body does not move its body)",
        "joint friction loss (wrist, the unnamed joint of body 'finger'): a damper that "
        "saturates at it (MuJoCo's constraint also holds a joint still against a load below "
        "it; this one lets it creep)",
        "the friction loss of ball and free joints (cube:joint): left out",
    ]


def test_elements_that_would_build_bodies_are_named(tmp_path):
    # A rope from <composite> and a cloth from <flexcomp>: Newton's importer builds neither.
    path = tmp_path / "rope.xml"
    path.write_text("""<mujoco><worldbody>
      <body name="a"><joint type="hinge"/><geom size="0.1"/></body>
      <composite type="cable" count="5 1 1" curve="s" size="1"><geom size="0.01"/></composite>
      <flexcomp name="cloth" type="grid" count="3 3 1" spacing="0.1 0.1 0.1" dim="2"/>
    </worldbody></mujoco>""")
    notes = read_mjcf_options(path).not_applied
    assert "<composite>, <flexcomp>: not built (Newton's importer reads no such element), " \
        "what it makes is missing" in notes


@pytest.mark.parametrize("compiler, limited, named", [
    ("", "", True), ('<compiler autolimits="false"/>', 'limited="true"', True),
    ("", 'limited="false"', False),
])  # fmt: skip
def test_a_ball_joints_limit_is_named(tmp_path, compiler, limited, named):
    path = tmp_path / "shoulder.xml"
    path.write_text(f"""<mujoco>{compiler}<worldbody><body name="arm">
      <joint name="shoulder" type="ball" range="0 45" {limited}/><geom size="0.1"/>
    </body></worldbody></mujoco>""")
    notes = read_mjcf_options(path).not_applied
    note = "the limits of ball joints (shoulder): left out (Featherstone has no cone limit)"
    assert (note in notes) == named, notes
