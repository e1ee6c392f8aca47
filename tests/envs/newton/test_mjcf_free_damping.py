"""A free joint's damping as MuJoCo applies it (mjcf_free_damping), MuJoCo the oracle."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("newton")
mujoco = pytest.importorskip("mujoco")

from helpers import file_probe, one_step_qacc, place_mujoco_state  # noqa: E402

# A pen as the Shadow hand's files hold it: a thin capsule on a damped free joint, its centre
# of mass off the body's origin (the geom is offset), no gravity, no contact.
PEN = """<mujoco>
  <option timestep="0.002" gravity="0 0 0"/>
  <worldbody>
    <body name="pen" pos="0 0 0.5" quat="0.9 0.1 0.3 0.2">
      <joint name="pen:joint" type="free" damping="{damping}"/>
      <geom type="capsule" size="0.006 0.07" pos="0.02 -0.01 0.03" density="900"/>
    </body>
  </worldbody>
</mujoco>"""


def build(tmp_path, damping, **options):
    path = tmp_path / "pen.xml"
    path.write_text(PEN.format(damping=damping))
    return file_probe(path, **options), mujoco.MjModel.from_xml_path(str(path))


def test_one_step_of_a_damped_free_body_accelerates_as_mujocos(tmp_path):
    # Explicit (a 1e-5 s step): MuJoCo's qacc (mj_forward) within 1%; Featherstone alone
    # does not damp a free joint, which left it 100% off.
    env, model = build(tmp_path, 0.003, dt=1e-5, implicit_damping=False)
    qvel = np.array([0.3, -0.2, 0.5, 2.0, -1.0, 3.0])
    qacc, theirs = one_step_qacc(env, model, model.qpos0, qvel, dt=1e-5)
    assert np.abs(theirs).max() > 10.0
    assert np.abs(qacc - theirs).max() <= 0.01 * np.abs(theirs).max(), (qacc, theirs)


def test_a_light_damped_free_body_steps_implicitly_as_mujocos_euler(tmp_path):
    # At the file's 2 ms the pen's damping is stiff (explicit Euler would diverge: the spin
    # about its axis has d h / I far above 2); implicit, as MuJoCo's Euler, it follows
    # mj_step: 100 steps, qvel within 2% of the largest.
    env, model = build(tmp_path, 0.01, dt=0.002)
    assert env.implicit_damping
    data = mujoco.MjData(model)
    mujoco.mj_setConst(model, data)
    smallest = model.body_inertia[1].min()
    assert 0.01 * 0.002 / smallest > 2.0, smallest
    qvel = np.array([0.3, -0.2, 0.5, 2.0, -1.0, 3.0])
    data.qpos[:], data.qvel[:] = model.qpos0, qvel
    place_mujoco_state(env, model.qpos0, qvel)
    for _ in range(100):
        mujoco.mj_step(model, data)
        env.step(torch.zeros(1, env.action_dim))
    qpos, ours = env.mujoco_from_joint_state(env.state["joint_q"], env.state["joint_qd"])
    assert torch.isfinite(qpos).all()
    assert np.abs(ours[0].double().numpy() - data.qvel).max() <= 0.02 * np.abs(qvel).max(), (
        ours, data.qvel)


def test_the_damping_force_differentiates_as_central_differences_say():
    # The torch force (a free joint's damping in Newton's coordinates) in float64: its
    # gradient with respect to the pose and the velocities against central differences.
    from pathgrad.envs.newton.model_files.mjcf_free_damping import FreeJointDamping

    damping = FreeJointDamping(8, [(0, 2, 0.05, (0.02, -0.01, 0.03))], "cpu")
    damping.centres = damping.centres.double()
    draw = torch.Generator().manual_seed(0)
    turn = torch.nn.functional.normalize(torch.randn(2, 4, generator=draw, dtype=torch.float64))
    joint_q = torch.cat([torch.randn(2, 3, generator=draw, dtype=torch.float64), turn], -1)
    joint_qd = torch.randn(2, 8, generator=draw, dtype=torch.float64)
    inputs = (joint_q.requires_grad_(), joint_qd.requires_grad_())
    assert torch.autograd.gradcheck(damping.joint_forces, inputs)
    forces = damping.joint_forces(joint_q, joint_qd)
    assert forces[:, :2].abs().max() == 0 and forces[:, 2:].abs().max() > 0  # its six DOFs only


def test_the_damping_matrix_is_the_forces_jacobian():
    # D of explicit_damping_bound is -d(force)/d(joint_qd) of the torch force (a body's pose
    # at rest: the rotation does not change the eigenvalues, both turn together).
    from pathgrad.envs.newton.model_files.mjcf_free_damping import (
        FreeJointDamping,
        damping_matrix,
    )

    centre = (0.02, -0.01, 0.03)
    damping = FreeJointDamping(6, [(0, 0, 0.05, centre)], "cpu")
    damping.centres = damping.centres.double()
    rest = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    jacobian = torch.autograd.functional.jacobian(
        lambda qd: damping.joint_forces(rest, qd)[0], torch.zeros(1, 6, dtype=torch.float64)
    )[:, 0, :]
    matrix = damping_matrix(0.05, centre)
    assert np.allclose(-jacobian.numpy(), matrix, atol=1e-12)
    assert np.allclose(matrix, matrix.T) and np.linalg.eigvalsh(matrix).min() >= -1e-12


def test_explicit_damping_that_diverges_is_warned_with_its_bound(tmp_path):
    # Explicit at the file's 2 ms, the pen's damping diverges (its spin grows step by step),
    # and construction says so with the bound, which is tight: 10% above it the spin
    # diverges too, 10% below nothing is said and it decays.
    with pytest.warns(UserWarning, match=r"diverges on body 'pen' .*stable below ") as caught:
        env, model = build(tmp_path, 0.01, dt=0.002, implicit_damping=False, quiet=False)
    text = next(str(w.message) for w in caught if "diverges on" in str(w.message))
    bound = float(text.split("stable below ")[1].split(" s")[0])
    assert bound < 0.002 and "implicit_damping=True" in text
    spin = np.array([0.0, 0.0, 0.0, 2.0, -1.0, 3.0])
    for dt, grows in ((0.002, True), (1.1 * bound, True), (0.9 * bound, False)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            env, model = build(tmp_path, 0.01, dt=dt, implicit_damping=False, quiet=False)
        assert any("diverges on" in str(w.message) for w in caught) == grows
        place_mujoco_state(env, model.qpos0, spin)
        for _ in range(300):
            env.step(torch.zeros(1, env.action_dim))
        _, qvel = env.mujoco_from_joint_state(env.state["joint_q"], env.state["joint_qd"])
        speed = np.abs(qvel[0].double().numpy())
        assert (not np.isfinite(speed).all() or speed.max() > 10 * 3.0) == grows, qvel
