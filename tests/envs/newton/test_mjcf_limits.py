"""A file's joint limits are as soft as MuJoCo makes them (``joint_limits="mujoco"``, the
default for a file): ``solreflimit`` on each joint's effective mass; ``mujoco`` is the oracle."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("newton")

from pathgrad.envs.newton import NewtonEnv  # noqa: E402
from pathgrad.envs.newton.model_files.mjcf_limits import LimitReference  # noqa: E402

# A rod on a hinge and a light fingertip on a slide, no gravity: only the limits act.
FILE = """<mujoco>
  <compiler angle="radian"/>
  <option timestep="{timestep}" gravity="0 0 0"/>
  <default><default class="soft"><joint solreflimit="{solref}"/></default></default>
  <worldbody>
    <body name="rod" pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 1 0" range="-0.5 0.5"/>
      <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.02" mass="1"/>{tip}
    </body>
  </worldbody>
</mujoco>"""
TIP = """
      <body name="tip" pos="0.5 0 0" childclass="soft">
        <joint name="slide" type="slide" axis="1 0 0" range="-0.01 0.01"/>
        <geom type="sphere" size="0.005" mass="0.001"/>
      </body>"""


class Rod(NewtonEnv):
    observation_dim = 4

    def _reward(self, state, action, next_state):
        return torch.zeros(self.num_envs)


def rod(tmp_path, joint_limits=None, timestep=0.002, solref="0.02 1", tip=TIP, **kwargs):
    path = tmp_path / "rod.xml"
    path.write_text(FILE.format(timestep=timestep, solref=solref, tip=tip))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = Rod(1, model_file=str(path), joint_limits=joint_limits, capture=False, **kwargs)
    return path, env


def limit_constants(env):
    model = env.simulation.model
    return model.joint_limit_ke.numpy()[: env.dofs], model.joint_limit_kd.numpy()[: env.dofs]


def test_the_reference_reads_time_constants_direct_values_and_refsafe():
    assert LimitReference.parse(None, "j").per_unit_mass(0.002) == pytest.approx((2500.0, 100.0))
    # tc 0.05, ratio 0.5: k = 1 / (tc ratio)^2, b = 2 / tc
    assert LimitReference.parse("0.05 0.5", "j").per_unit_mass(0.002) == pytest.approx(
        (1600.0, 40.0)
    )
    assert LimitReference.parse("-300 -7", "j").per_unit_mass(0.01) == (300.0, 7.0)
    # refsafe: the time constant at least two timesteps (0.02 -> 0.04 at 0.02 s)
    assert LimitReference.parse(None, "j").per_unit_mass(0.02) == pytest.approx((625.0, 50.0))
    assert LimitReference.parse(None, "j").per_unit_mass(0.02, refsafe=False) == pytest.approx(
        (2500.0, 100.0)
    )
    with pytest.raises(ValueError, match="joint 'knee': solreflimit='0.02' is not two numbers"):
        LimitReference.parse("0.02", "knee")


def test_each_limit_is_its_solreflimit_on_its_effective_mass_as_mujoco_weighs_it(tmp_path):
    mujoco = pytest.importorskip("mujoco")
    path, env = rod(tmp_path, solref="0.05 0.5")
    assert env.joint_limits == "mujoco"
    masses = 1.0 / mujoco.MjModel.from_xml_path(str(path)).dof_invweight0  # MuJoCo's weights
    stiffness, damping = limit_constants(env)
    per_unit = [(2500.0, 100.0), (1600.0, 40.0)]  # the hinge's default, the slide's class
    for dof in range(2):
        assert stiffness[dof] == pytest.approx(per_unit[dof][0] * masses[dof], rel=1e-3)
        assert damping[dof] == pytest.approx(per_unit[dof][1] * masses[dof], rel=1e-3)
    # "newton" keeps the model's (Newton's import) constants
    _, kept = rod(tmp_path, joint_limits="newton")
    assert kept.joint_limits == "newton"
    np.testing.assert_allclose(limit_constants(kept)[0], [1e4, 1e4])


@pytest.mark.parametrize("joint_limits", ["mujoco", "newton"])
def test_a_joint_past_its_limit_is_pushed_back_as_in_mujoco(tmp_path, joint_limits):
    mujoco = pytest.importorskip("mujoco")
    path, env = rod(tmp_path, joint_limits=joint_limits, substeps=1, tip="")
    model = mujoco.MjModel.from_xml_path(str(path))
    data = mujoco.MjData(model)
    data.qpos[:] = [0.6]  # 0.1 rad past the hinge's limit, at rest
    env.reset(seed=0)
    joint_q, joint_qd = env.joint_state_from_mujoco(torch.tensor([[0.6]]), torch.zeros(1, 1))
    env.state = {**env.state, "joint_q": joint_q, "joint_qd": joint_qd}
    ours, theirs = [], []
    while True:  # while MuJoCo's limit pushes (it only pushes: then the rod leaves freely)
        mujoco.mj_step(model, data)
        if not (data.nefc and data.efc_force[0] > 0.0):
            break
        env.step(torch.zeros(1, env.action_dim))  # no motors: the joint, pushed by 0
        theirs.append(data.qpos[0] - 0.5)
        qpos, _ = env.mujoco_from_joint_state(env.state["joint_q"], env.state["joint_qd"])
        ours.append(float(qpos[0, 0]) - 0.5)
    assert len(theirs) >= 6 and theirs[-1] < 0.08  # 12+ ms, a quarter of the way out
    difference = np.abs(np.array(ours) - np.array(theirs)).max()
    if joint_limits == "mujoco":
        assert difference < 1e-3, (ours, theirs)  # of the 0.1 rad penetration
    else:  # Newton's stiff, lightly damped spring throws the rod out of the limit at once
        assert difference > 0.05 and min(ours) < 0.0, (ours, theirs)


def test_a_light_joint_does_not_need_tiny_substeps(tmp_path):
    # the 1 g fingertip against Newton's 1e4 N/m limit asked for hundreds of substeps
    _, soft = rod(tmp_path, timestep=0.01, substeps="auto")
    _, stiff = rod(tmp_path, joint_limits="newton", timestep=0.01, substeps="auto")
    assert soft.simulation_options["substeps"] <= 2  # the default limit's damper at 0.01 s
    assert stiff.simulation_options["substeps"] > 100
    assert math.isclose(soft.dt, 0.01)


def test_joint_limits_names_what_it_takes(tmp_path):
    with pytest.raises(ValueError, match="joint_limits must be 'mujoco' or 'newton', got 'soft'"):
        rod(tmp_path, joint_limits="soft")


class Hinge(NewtonEnv):
    """One limited hinge built in code, no file."""

    observation_dim = 2

    def build_world(self, builder):
        import warp as wp

        link = builder.add_link(mass=1.0, inertia=wp.mat33(np.eye(3) * 0.1), label="link")
        joint = builder.add_joint_revolute(-1, link, axis=(0.0, 1.0, 0.0), label="hinge",
                                           limit_lower=-0.5, limit_upper=0.5)  # fmt: skip
        builder.add_articulation([joint], label="hinge")

    def _reward(self, state, action, next_state):
        return torch.zeros(self.num_envs)


def test_a_world_built_in_code_keeps_its_limits_and_refuses_mujoco_s():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kept = Hinge(1)
        assert kept.joint_limits == "newton"
        import newton

        assert limit_constants(kept)[0][0] == newton.ModelBuilder().default_joint_cfg.limit_ke
        with pytest.raises(ValueError, match="joint_limits='mujoco' needs an MJCF model_file"):
            Hinge(1, joint_limits="mujoco")


# A light damped hinge: at the file's 10 ms step its explicit damping (h D / I = 10) diverges
DAMPED = """<mujoco>
  <option timestep="0.01" gravity="0 0 0" {integrator}/>
  <worldbody>
    <body name="arm" pos="0 0 1">
      <joint name="hinge" type="hinge" axis="0 0 1" damping="1"/>
      <geom type="sphere" pos="0.1 0 0" size="0.01" mass="0.1"/>
    </body>
  </worldbody>
</mujoco>"""


def damped(tmp_path, integrator="", **kwargs):
    path = tmp_path / "damped.xml"
    path.write_text(DAMPED.format(integrator=integrator))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return path, Rod(1, model_file=str(path), capture=False, **kwargs)


@pytest.mark.parametrize("implicit_damping", [None, False])
def test_joint_damping_is_integrated_as_mujoco_s_euler_does(tmp_path, implicit_damping):
    mujoco = pytest.importorskip("mujoco")
    path, env = damped(tmp_path, implicit_damping=implicit_damping, substeps=1)
    assert env.implicit_damping is (implicit_damping is None)  # Euler: implicit, as MuJoCo's
    model = mujoco.MjModel.from_xml_path(str(path))
    data = mujoco.MjData(model)
    data.qvel[:] = 5.0
    env.reset(seed=0)
    env.state = {**env.state, "joint_q": torch.zeros(1, 1), "joint_qd": torch.full((1, 1), 5.0)}
    ours, theirs = [], []
    for _ in range(8):
        mujoco.mj_step(model, data)
        env.step(torch.zeros(1, env.action_dim))
        theirs.append(data.qvel[0])
        ours.append(float(env.state["joint_qd"][0, 0]))
    if implicit_damping is None:
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6)
        assert theirs[-1] < 1e-3  # damped away
    else:  # explicit: each step multiplies the velocity by 1 - h D / I = -9
        assert abs(ours[-1]) > 1e6


def test_rk4_damps_explicitly_and_auto_substeps_see_it(tmp_path):
    _, euler = damped(tmp_path, substeps="auto")
    _, rk4 = damped(tmp_path, integrator='integrator="RK4"', substeps="auto")
    assert euler.implicit_damping and not rk4.implicit_damping
    assert euler.simulation_options["substeps"] == 1
    # the implicit step's armature: substep x damping (0.01 s x 1) on the file's 0
    assert euler.simulation.model.joint_armature.numpy()[0] == pytest.approx(0.01)
    assert rk4.simulation_options["substeps"] >= 10  # h D / I under 1 at half the bound
    assert rk4.simulation.model.joint_armature.numpy()[0] == 0.0
    with pytest.raises(ValueError, match="implicit_damping=True needs an MJCF model_file"):
        Hinge(1, implicit_damping=True)


def test_limits_without_effective_masses_keep_the_model_s_and_say_so(tmp_path, monkeypatch):
    import pathgrad.envs.newton.model_files.model_file as model_file

    monkeypatch.setattr(model_file, "mass_matrix_at_rest", lambda env: None)
    path = tmp_path / "rod.xml"
    path.write_text(FILE.format(timestep=0.002, solref="0.02 1", tip=TIP))
    with pytest.warns(UserWarning, match="effective masses could not be computed"):
        env = Rod(1, model_file=str(path), capture=False, substeps=1)
    np.testing.assert_allclose(limit_constants(env)[0], [1e4, 1e4])


def test_maximal_coordinates_damp_explicitly(tmp_path):
    # semi_implicit has no joint-space armature to carry the implicit step: explicit, said
    _, maximal = damped(tmp_path, solver="semi_implicit", substeps=4)
    assert not maximal.implicit_damping
    with pytest.raises(ValueError, match="and the featherstone solver"):
        damped(tmp_path, solver="semi_implicit", substeps=4, implicit_damping=True)


def test_gradients_through_mujoco_s_limit_and_implicit_damping_match_differences(tmp_path):
    from pathgrad.testing.gradients import check_env_gradients

    class Reaching(Rod):  # a reward with a path to the state: the joints' squared positions
        def _reward(self, state, action, next_state):
            return -next_state["joint_q"].square().sum(-1)

    # the hinge 0.05 rad into its soft limit for the whole chain, both joints damped implicitly
    path, _ = rod(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = Reaching(1, model_file=str(path), capture=False, substeps=2, joint_damping=0.5,
                       max_episode_steps=50)  # fmt: skip
    assert env.joint_limits == "mujoco" and env.implicit_damping
    joint_q, joint_qd = env.joint_state_from_mujoco(torch.tensor([[0.55, 0.0]]), torch.zeros(1, 2))
    start = {"joint_q": joint_q, "joint_qd": joint_qd}
    assert check_env_gradients(env, 3, initial_state=start, reset_at_step=None, action_scale=0.1)
