"""MuJoCo's <replicate> expanded as MuJoCo compiles it (mjcf_replicate), MuJoCo the oracle:
copies placed by powers of the offset and turn, names suffixed (names with '-', which
Newton's importer writes with '_'), the actuators and tendons that name a joint inside
copied once per copy, at the end of their sections; qpos in MuJoCo's order although Newton
imports sibling frames last to first (joint_q is in Newton's: the conversions map them)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("newton")
mujoco = pytest.importorskip("mujoco")

from helpers import file_probe, newton_bodies, one_step_qacc  # noqa: E402
from pathgrad.envs.newton.engine.kinematics import newton_label  # noqa: E402
from pathgrad.testing.mujoco_states import inside_the_ranges, random_state  # noqa: E402

# Three legs turned by 120 degrees about z (eulerseq zyx, radians), each with two toes
# (a replicate inside a replicate); a motor and a tendon name joints inside; the root's
# motor comes after them in the file but before their copies in MuJoCo's model.
LEGS = """<mujoco>
  <compiler angle="radian" eulerseq="zyx"/>
  <option gravity="0 0 -9.81"/>
  <worldbody>
    <body name="base" pos="0 0 1"><joint name="spin" type="hinge" axis="0 0 1"/>
      <geom type="sphere" size="0.05"/>
      <replicate count="3" offset="0.05 0 0" euler="2.0943951 0.1 0" sep="-">
        <body name="leg" pos="0.2 0 0"><joint name="hip" type="hinge" axis="0 1 0" damping="0.1"/>
          <geom type="capsule" fromto="0 0 0 0.2 0 -0.1" size="0.02"/>
          <replicate count="2" offset="0 0.04 0">
            <body name="toe" pos="0.2 0 -0.1"><joint name="curl" type="hinge" axis="1 0 0"/>
              <geom type="sphere" size="0.015"/></body>
          </replicate>
        </body>
      </replicate>
    </body>
  </worldbody>
  <tendon><fixed name="grip"><joint joint="curl" coef="1"/></fixed></tendon>
  <actuator>
    <motor name="drive" joint="hip" gear="2" ctrlrange="-1 1"/>
    <motor name="turn" joint="spin" gear="1" ctrlrange="-1 1"/>
  </actuator>
</mujoco>"""


def build(tmp_path, text=LEGS):
    path = tmp_path / "legs.xml"
    path.write_text(text)
    return file_probe(path, dt=1e-4), mujoco.MjModel.from_xml_path(str(path))


def test_copies_are_placed_named_and_ordered_as_mujocos(tmp_path):
    env, model = build(tmp_path)
    assert model.nbody == 11 and model.nu == 4  # the oracle did replicate
    assert sorted(env.coordinate_names) == sorted(model.joint(j).name for j in range(model.njnt))
    assert env.action_dim == model.nu
    labels = [str(label).rsplit("/", 1)[-1] for label in env.body_labels]
    data, rng = mujoco.MjData(model), np.random.default_rng(0)
    for _ in range(3):
        qpos, _ = random_state(model, rng)
        data.qpos[:] = qpos
        mujoco.mj_kinematics(model, data)
        positions, _ = newton_bodies(env, *env.joint_state_from_mujoco(
            torch.tensor(qpos)[None].float(), torch.zeros(1, model.nv)))  # fmt: skip
        for body in range(1, model.nbody):
            index = labels.index(newton_label(model.body(body).name))
            np.testing.assert_allclose(positions[index], data.xpos[body], atol=1e-5,
                                       err_msg=model.body(body).name)  # fmt: skip


def test_one_step_with_the_copied_actuators_accelerates_as_mujocos(tmp_path):
    env, model = build(tmp_path)
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
    rng = np.random.default_rng(1)
    qpos, qvel = inside_the_ranges(model, rng), 0.3 * rng.standard_normal(model.nv)
    qacc, theirs = one_step_qacc(env, model, qpos, qvel, rng.uniform(-0.8, 0.8, model.nu))
    assert np.abs(qacc - theirs).max() <= 0.01 * np.abs(theirs).max(), (qacc, theirs)


@pytest.mark.parametrize("attributes, problem", [
    ('count="0"', "count must be a positive integer"),
    ('count="2" offset="1 2"', "offset must be three numbers"),
])  # fmt: skip
def test_a_bad_replicate_is_named(tmp_path, attributes, problem):
    text = LEGS.replace('count="3" offset="0.05 0 0" euler="2.0943951 0.1 0"', attributes)
    with pytest.raises(ValueError, match=f"<replicate .*{problem}"):
        build(tmp_path, text)
