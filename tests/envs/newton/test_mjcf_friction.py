"""An MJCF file's joint friction loss (mjcf_friction): MuJoCo the oracle while a joint slips,
the damping as MuJoCo's soft constraint gives it, and its gradient in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("newton")
mujoco = pytest.importorskip("mujoco")

from helpers import file_probe, place_mujoco_state  # noqa: E402
from pathgrad.envs.newton.model_files.mjcf_friction import (  # noqa: E402
    FrictionLoss,
    friction_damping,
)

ARM = """<mujoco>
  <option timestep="0.002"/>
  <default><joint frictionloss="0.4" damping="0.05"/></default>
  <worldbody>
    <body name="upper" pos="0 0 1"><joint name="shoulder" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.04"/>
      <body name="lower" pos="0.4 0 0">
        <joint name="elbow" type="hinge" axis="0 1 0" solreffriction="0.05 1"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
        <body name="slider" pos="0.3 0 0">
          <joint name="reach" type="slide" axis="1 0 0" frictionloss="2"/>
          <geom type="box" size="0.05 0.05 0.05"/>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>"""


def build(tmp_path, dt):
    path = tmp_path / "arm.xml"
    path.write_text(ARM)
    env = file_probe(path, dt=dt, implicit_damping=False)
    return env, mujoco.MjModel.from_xml_path(str(path))


def test_a_slipping_joint_accelerates_as_mujocos_does(tmp_path):
    # Each joint slips fast enough that MuJoCo's constraint is at its bound (the friction
    # loss against the velocity) and so is the damper here: one short step's qacc within 1%.
    env, model = build(tmp_path, 1e-4)
    data = mujoco.MjData(model)
    qpos, qvel = np.array([0.3, -0.5, 0.02]), np.array([1.5, -2.0, 0.8])
    data.qpos[:], data.qvel[:] = qpos, qvel
    mujoco.mj_forward(model, data)
    np.testing.assert_allclose(data.qfrc_constraint, -model.dof_frictionloss * np.sign(qvel))
    place_mujoco_state(env, qpos, qvel)
    env.step(torch.zeros(1, env.action_dim))
    _, after = env.mujoco_from_joint_state(env.state["joint_q"], env.state["joint_qd"])
    qacc = (after[0].double().numpy() - qvel) / 1e-4
    assert np.abs(qacc - data.qacc).max() <= 0.01 * np.abs(data.qacc).max(), (qacc, data.qacc)
    # without the friction loss the same step is off by what it contributes
    env.friction_loss = None
    place_mujoco_state(env, qpos, qvel)
    env.step(torch.zeros(1, env.action_dim))
    _, after = env.mujoco_from_joint_state(env.state["joint_q"], env.state["joint_qd"])
    unrubbed = (after[0].double().numpy() - qvel) / 1e-4
    assert np.abs(unrubbed - data.qacc).max() > 0.1 * np.abs(data.qacc).max()


def test_the_damping_is_mujocos_soft_constraint_on_the_effective_mass(tmp_path):
    # d m b: the default solimp (0.9, 0.95), b = 2 / (dmax tc), tc the joint's solreffriction
    # (the elbow's 0.05 s; MuJoCo's 0.02 s elsewhere), m = 1 / dof_invweight0.
    env, model = build(tmp_path, 0.002)
    data = mujoco.MjData(model)
    mujoco.mj_setConst(model, data)
    masses = 1.0 / model.dof_invweight0
    expected = 0.9 * masses * 2.0 / (0.95 * np.array([0.02, 0.05, 0.02]))
    friction = env.friction_loss
    assert friction.columns.tolist() == [0, 1, 2]
    np.testing.assert_allclose(friction.limits.numpy(), [0.4, 0.4, 2.0])
    np.testing.assert_allclose(friction.damping.numpy(), expected, rtol=1e-3)


def test_friction_damping_reads_direct_references_and_rejects_bad_impedances():
    assert friction_damping("-100 -7", None, 2.0, 0.002, True, "j") == pytest.approx(
        0.9 * 2.0 * 7 / 0.95
    )
    assert friction_damping("0.001 1", "0.5 0.8", 1.0, 0.002, True, "j") == pytest.approx(
        0.5 * 2.0 / (0.8 * 0.004)  # refsafe: the time constant at least two timesteps
    )
    with pytest.raises(ValueError, match="joint 'j': solimpfriction='1.5 0.9' must start"):
        friction_damping(None, "1.5 0.9", 1.0, 0.002, True, "j")
    with pytest.raises(ValueError, match="joint 'j': solreffriction='fast' is not two numbers"):
        friction_damping("fast", None, 1.0, 0.002, True, "j")


def test_the_friction_force_differentiates_as_central_differences_say():
    friction = FrictionLoss(4, [0, 2, 3], [0.4, 0.4, 2.0], [3.0, 5.0, 20.0], "cpu")
    friction.limits, friction.damping = friction.limits.double(), friction.damping.double()
    velocity = torch.tensor([[0.05, 9.0, -0.03, 0.2], [-0.5, 1.0, 0.01, -0.01]],
                            dtype=torch.float64, requires_grad=True)  # fmt: skip
    assert torch.autograd.gradcheck(friction.joint_forces, (velocity,))
    force = friction.joint_forces(velocity)
    assert force[0].tolist() == pytest.approx([-0.15, 0.0, 0.15, -2.0])  # damped, bound


def test_an_arm_falling_against_its_friction_follows_mujocos_rollout(tmp_path):
    # Released from rest at the file's timestep (its joints accelerate, slip and slow down),
    # 250 steps against mj_step: within 0.03 (rad, m) of MuJoCo's qpos with the friction loss,
    # 0.55 apart without it.
    env, model = build(tmp_path, 0.002)
    data = mujoco.MjData(model)
    qpos = np.array([0.3, -0.5, 0.02])
    apart = {}
    for rubbing in (True, False):
        env.friction_loss = env.friction_loss if rubbing else None
        place_mujoco_state(env, qpos, np.zeros(3))
        mujoco.mj_resetData(model, data)
        data.qpos[:] = qpos
        for _ in range(250):
            mujoco.mj_step(model, data)
            env.step(torch.zeros(1, env.action_dim))
        ours, _ = env.mujoco_from_joint_state(env.state["joint_q"], env.state["joint_qd"])
        apart[rubbing] = float(np.abs(ours[0].double().numpy() - data.qpos).max())
    assert apart[True] < 0.03 and apart[False] > 0.3, apart
