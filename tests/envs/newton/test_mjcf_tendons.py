"""An MJCF file's fixed tendons act as in MuJoCo: their springs and dampers, and actuators
through them (the `mujoco` package is the oracle)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("newton")
mujoco = pytest.importorskip("mujoco")

from helpers import one_step_qacc  # noqa: E402
from pathgrad.envs.newton import NewtonEnv  # noqa: E402
from pathgrad.testing import check_env_gradients  # noqa: E402

# A two-link arm on a slide: a tendon coupling the hinges with a spring (its rest length from
# springref) and a damper, one with a deadband spring, a motor and a position servo through
# tendons, and a motor on a joint.
TENDON_ARM = """<mujoco>
  <option timestep="0.01" gravity="0 0 -9.81"/>
  <default><tendon damping="0.3"/></default>
  <worldbody>
    <body name="cart" pos="0 0 1">
      <joint name="slide" type="slide" axis="1 0 0"/>
      <geom type="box" size="0.1 0.1 0.05" mass="2"/>
      <body name="upper">
        <joint name="shoulder" type="hinge" axis="0 1 0" springref="0.2"/>
        <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.04"/>
        <body name="lower" pos="0.4 0 0">
          <joint name="elbow" type="hinge" axis="0 1 0" springref="-0.1"/>
          <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
        </body>
      </body>
    </body>
  </worldbody>
  <tendon>
    <fixed name="couple" stiffness="4"><joint joint="shoulder" coef="1"/>
      <joint joint="elbow" coef="-0.5"/></fixed>
    <fixed name="band" stiffness="2" springlength="-0.1 0.1" damping="0">
      <joint joint="slide" coef="1"/><joint joint="elbow" coef="0.3"/></fixed>
    <fixed name="pull" damping="0"><joint joint="shoulder" coef="0.5"/>
      <joint joint="elbow" coef="1"/></fixed>
  </tendon>
  <actuator>
    <motor tendon="pull" gear="3" ctrlrange="-1 1"/>
    <position tendon="couple" kp="5" kv="0.5"/>
    <motor joint="slide" gear="10"/>
  </actuator>
</mujoco>"""


class Probe(NewtonEnv):
    def _reward(self, state, action, next_state):
        return next_state["joint_q"].square().sum(-1)


def arm(tmp_path, **kwargs) -> tuple[Probe, object]:
    path = tmp_path / "tendon_arm.xml"
    path.write_text(TENDON_ARM)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the floorless file, the substeps chosen
        env = Probe(1, model_file=str(path), capture=False, **kwargs)
    return env, mujoco.MjModel.from_xml_path(str(path))


@pytest.mark.parametrize("seed", [0, 1])
def test_tendon_forces_equal_mujocos(tmp_path, seed):
    env, model = arm(tmp_path)
    assert env.action_dim == 3 and env.actuator_steps == 1 and env.tendon_forces is not None
    data = mujoco.MjData(model)
    rng = np.random.default_rng(seed)
    qpos, qvel = 0.6 * rng.standard_normal(3), rng.standard_normal(3)
    ctrl = np.array([0.7, -0.3, 0.2])
    data.qpos[:], data.qvel[:], data.ctrl[:] = qpos, qvel, ctrl
    mujoco.mj_forward(model, data)
    joint_q, joint_qd = env.joint_state_from_mujoco(
        torch.tensor(qpos)[None].float(), torch.tensor(qvel)[None].float()
    )
    passive = env.tendon_forces.joint_forces(joint_q, joint_qd)
    np.testing.assert_allclose(passive[0].numpy(), data.qfrc_passive, rtol=1e-5, atol=1e-5)
    pushed = env.file_actuation.joint_forces(joint_q, joint_qd, torch.tensor(ctrl)[None].float())
    np.testing.assert_allclose(pushed[0].numpy(), data.qfrc_actuator, rtol=1e-5, atol=1e-5)


def test_one_step_accelerates_as_mujoco_does(tmp_path):
    env, model = arm(tmp_path, dt=1e-4)
    rng = np.random.default_rng(2)
    qpos, qvel, ctrl = 0.4 * rng.standard_normal(3), rng.standard_normal(3), [1.5, 0.4, -0.6]
    qacc, theirs = one_step_qacc(env, model, qpos, qvel, ctrl)  # 1.5: clamped to 1 by both
    assert np.abs(qacc - theirs).max() <= 0.01 * np.abs(theirs).max(), (qacc, theirs)


def test_the_tendons_gradients_agree_with_central_differences(tmp_path):
    env, _ = arm(tmp_path)
    assert check_env_gradients(env, 3, reset_at_step=None)
