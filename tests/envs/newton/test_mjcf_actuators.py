"""A file's position, velocity and general actuators push as MuJoCo's do (``mujoco`` is the
oracle): gain, bias, gear, ctrl and force ranges, recomputed at every file timestep; a
hinge's actuator named by ``jointinparent`` (Safety-Gymnasium's point) as by ``joint``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("newton")
mujoco = pytest.importorskip("mujoco")

from pathgrad.envs.newton import NewtonEnv  # noqa: E402
from pathgrad.envs.newton.model_files.mjcf_actuators import read_mjcf_motors  # noqa: E402

ARM = """<mujoco>
  <option timestep="{timestep}" gravity="0 0 -9.81"/>
  <default><position kp="30"/></default>
  <worldbody>
    <body name="upper" pos="0 0 1">
      <joint name="shoulder" type="hinge" axis="0 1 0" damping="0.5"/>
      <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.04" mass="1"/>
      <body name="lower" pos="0.4 0 0">
        <joint name="elbow" type="hinge" axis="0 1 0" armature="0.01"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="0.5"/>
        <body name="tip" pos="0.3 0 0">
          <joint name="slide" type="slide" axis="1 0 0"/>
          <geom type="sphere" size="0.04" mass="0.2"/>
          <body name="wrist" pos="0.05 0 0">
            <joint name="wrist" type="hinge" axis="0 0 1"/>
            <geom type="box" size="0.02 0.02 0.02" mass="0.1"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <position joint="shoulder" kv="2" gear="2" ctrlrange="-1 1"/>
    <velocity jointinparent="elbow" kv="0.8"/>
    <general joint="slide" gainprm="5" biastype="affine" biasprm="0.3 -20 -1"
             forcerange="-2 2"/>
    <motor joint="wrist" gear="0.5"/>
  </actuator>
</mujoco>"""


class Arm(NewtonEnv):
    observation_dim = 8

    def _reward(self, state, action, next_state):
        return torch.zeros(self.num_envs)


def files(tmp_path, timestep: float):
    path = tmp_path / "arm.xml"
    path.write_text(ARM.format(timestep=timestep))
    model = mujoco.MjModel.from_xml_path(str(path))
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
    return path, model


def test_the_actuators_are_read_with_their_gains_and_biases(tmp_path):
    path, model = files(tmp_path, 0.001)
    motors, skipped = read_mjcf_motors(path)
    assert skipped == []
    assert [m.kind for m in motors] == ["position", "velocity", "general", "motor"]
    np.testing.assert_allclose([m.gain for m in motors], model.actuator_gainprm[:, 0])
    np.testing.assert_allclose([m.bias for m in motors], model.actuator_biasprm[:, :3])
    assert motors[2].forcerange == (-2.0, 2.0) and motors[0].ctrlrange == (-1.0, 1.0)
    assert [m.state_dependent for m in motors] == [True, True, True, False]


def test_one_step_accelerates_as_mujocos_actuators_do(tmp_path):
    path, model = files(tmp_path, 1e-4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = Arm(1, model_file=str(path), capture=False)
    assert env.action_dim == 4 and env.actuator_steps == 1
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    for _ in range(3):  # ctrl beyond the shoulder's range; the slide's force clamped
        qpos, qvel = rng.uniform(-0.5, 0.5, model.nq), rng.uniform(-1, 1, model.nv)
        ctrl = rng.uniform(-1.5, 1.5, model.nu)
        data.qpos[:], data.qvel[:], data.ctrl[:] = qpos, qvel, ctrl
        mujoco.mj_forward(model, data)
        joint_q, joint_qd = env.joint_state_from_mujoco(
            torch.tensor(qpos)[None].float(), torch.tensor(qvel)[None].float()
        )
        env.reset(seed=0)
        env.state = {**env.state, "joint_q": joint_q, "joint_qd": joint_qd}
        env.step(torch.tensor(ctrl)[None].float())
        _, after = env.mujoco_from_joint_state(env.state["joint_q"], env.state["joint_qd"])
        qacc = (after[0].double().numpy() - qvel) / 1e-4
        scale = max(1.0, float(np.abs(data.qacc).max()))
        assert np.abs(qacc - data.qacc).max() <= 0.01 * scale, (qacc, data.qacc)


def test_an_env_step_recomputes_the_forces_at_every_file_timestep(tmp_path):
    # 10 file timesteps per env step: the position servo tracks as MuJoCo's does over a second
    path, model = files(tmp_path, 0.002)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = Arm(1, model_file=str(path), dt=0.02, capture=False)
    assert env.actuator_steps == 10
    data = mujoco.MjData(model)
    env.reset(seed=0)
    ctrl = np.array([0.6, 0.0, 0.5, 0.0])
    for _ in range(50):
        env.step(torch.tensor(ctrl)[None].float())
        data.ctrl[:] = ctrl
        mujoco.mj_step(model, data, nstep=10)
    qpos, _ = env.mujoco_from_joint_state(env.state["joint_q"], env.state["joint_qd"])
    np.testing.assert_allclose(qpos[0].double().numpy(), data.qpos, atol=0.02)
    assert abs(data.qpos[0] - 0.6 / 2) < 0.1  # the shoulder near its target ctrl / gear


def test_the_actuator_force_is_differentiable_in_float64():
    from types import SimpleNamespace

    from pathgrad.envs.newton.model_files.mjcf_actuators import FileActuation, MjcfMotor

    motors = [MjcfMotor("a", 2.0, None, "position", 3.0, (0.0, -3.0, -0.5), (-1.0, 1.0)),
              MjcfMotor("b", 1.0, None, "general", 2.0, (0.1, -1.0, -0.2), None),
              MjcfMotor("a", 1.5, None, "motor", tendon=(("a", 0.5), ("b", -1.0)))]  # fmt: skip
    places = {"a": SimpleNamespace(q=0, qd=0), "b": SimpleNamespace(q=1, qd=1)}
    actuation = FileActuation(motors, places, 2, 2, torch.device("cpu"))
    for name in ("moment_q", "moment_qd", "gain", "force_low", "force_high"):
        setattr(actuation, name, getattr(actuation, name).double())
    actuation.bias = [b.double() for b in actuation.bias]
    joint_q, joint_qd = torch.tensor([[0.2, -0.1]]), torch.tensor([[0.3, 0.4]])
    ctrl = torch.tensor([[0.5, -0.2, 0.8]])
    pushed = actuation.joint_forces(joint_q.double(), joint_qd.double(), ctrl.double())
    force_a = max(-1.0, min(1.0, 3.0 * 0.5 - 3.0 * 2.0 * 0.2 - 0.5 * 2.0 * 0.3))
    force_b = 2.0 * -0.2 + 0.1 - 1.0 * -0.1 - 0.2 * 0.4
    expected = [2.0 * force_a + 1.5 * 0.5 * 0.8, force_b - 1.5 * 0.8]  # gear x coef x force
    torch.testing.assert_close(pushed[0], torch.tensor(expected, dtype=torch.float64))
    inputs = [torch.randn(3, n, dtype=torch.float64) * 0.1 for n in (2, 2, 3)]
    inputs = [x.requires_grad_() for x in inputs]
    assert torch.autograd.gradcheck(actuation.joint_forces, inputs)


def test_without_the_files_actuators_no_drive_is_left_behind(tmp_path):
    # Newton's importer makes <position kp>/<velocity kv> PD drives toward 0; pathgrad clears
    # them: with actuated_joints=[] the joints move as MuJoCo's with actuation disabled
    path, model = files(tmp_path, 1e-4)
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_ACTUATION
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = Arm(1, model_file=str(path), actuated_joints=[], capture=False)
    data = mujoco.MjData(model)
    data.qpos[:] = qpos = np.array([0.3, -0.4, 0.1, 0.2])
    mujoco.mj_forward(model, data)
    joint_q, joint_qd = env.joint_state_from_mujoco(torch.tensor(qpos)[None].float(),
                                                    torch.zeros(1, 4))  # fmt: skip
    env.reset(seed=0)
    env.state = {**env.state, "joint_q": joint_q, "joint_qd": joint_qd}
    env.step(torch.zeros(1, 0))
    _, after = env.mujoco_from_joint_state(env.state["joint_q"], env.state["joint_qd"])
    np.testing.assert_allclose(after[0].double().numpy() / 1e-4, data.qacc, rtol=0.01, atol=0.1)
