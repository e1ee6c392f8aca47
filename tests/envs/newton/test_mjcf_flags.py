"""An MJCF file's disabled flags (mjcf_flags) as MuJoCo applies them, MuJoCo the oracle."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("newton")
mujoco = pytest.importorskip("mujoco")

from helpers import file_probe, one_step_qacc  # noqa: E402
from pathgrad.envs.newton.model_files.mjcf_options import read_mjcf_options  # noqa: E402

# Two hinges with springs, dampers and a limit, a tendon with a spring and a damper.
ARM = """<mujoco>
  <compiler angle="radian"/>
  <option><flag {flags}/></option>
  <default><joint damping="0.5"/></default>
  <worldbody>
    <body name="a" pos="0 0 1"><joint name="j" type="hinge" axis="0 1 0" stiffness="10"
        range="-0.2 0.2"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
      <body name="b" pos="0.3 0 0"><joint name="k" type="hinge" axis="0 1 0" damping="1"
          springref="0.5" stiffness="3"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/></body></body>
  </worldbody>
  <tendon><fixed name="t" stiffness="2" damping="0.3"><joint joint="j" coef="1"/>
    <joint joint="k" coef="-1"/></fixed></tendon>
</mujoco>"""


def qacc_pair(tmp_path, flags, first):
    path = tmp_path / "arm.xml"
    path.write_text(ARM.format(flags=flags))
    # mj_forward's qacc is the explicit acceleration: no implicit damping in the step
    env = file_probe(path, dt=1e-4, implicit_damping=False)
    model = mujoco.MjModel.from_xml_path(str(path))
    return one_step_qacc(env, model, np.array([first, -0.4]), np.array([1.5, -2.0]))


@pytest.mark.parametrize("flags, first", [
    ('spring="disable"', 0.1), ('damper="disable"', 0.1),
    ('limit="disable"', 0.35), ('constraint="disable"', 0.35),  # j past its upper limit
    ('spring="disable" damper="disable" limit="disable"', 0.35),
])  # fmt: skip
def test_disabled_flags_act_as_in_mujoco(tmp_path, flags, first):
    # One step's qacc within 1% of MuJoCo's, where MuJoCo's with the flag enabled is more
    # than 5% away from it (each flag matters in this state).
    ours, theirs = qacc_pair(tmp_path, flags, first)
    _, enabled = qacc_pair(tmp_path, flags.replace("disable", "enable"), first)
    scale = np.abs(theirs).max()
    assert np.abs(enabled - theirs).max() > 0.05 * scale, (enabled, theirs)
    assert np.abs(ours - theirs).max() <= 0.01 * scale, (ours, theirs)


def test_flags_that_are_not_applied_are_named(tmp_path):
    path = tmp_path / "arm.xml"
    path.write_text(ARM.format(flags='actuation="disable" contact="disable"'))
    notes = read_mjcf_options(path).not_applied
    assert '<flag actuation="disable">: the actions still drive the actuators' in notes
    assert "<flag contact=\"disable\">: contacts follow the env's contacts option" in notes
