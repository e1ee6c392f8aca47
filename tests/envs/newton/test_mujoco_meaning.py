"""An MJCF file means on Newton what it means in MuJoCo (the `mujoco` package is the oracle).

For every file of Gymnasium's MuJoCo suite (loaded from the installed package) and a
file with a ball joint and ``ref`` values: the same ``qpos`` puts every body where
MuJoCo's ``mj_kinematics`` does, the same ``qvel`` gives every body MuJoCo's velocity,
and the conversions are exact both ways and differentiable.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("newton")
mujoco = pytest.importorskip("mujoco")

import newton  # noqa: E402

from helpers import newton_bodies, one_step_qacc  # noqa: E402
from pathgrad.envs.newton import NewtonEnv  # noqa: E402
from pathgrad.envs.newton.model_files.mujoco_meaning import _D6  # noqa: E402
from pathgrad.testing.mujoco_states import inside_the_ranges, random_state  # noqa: E402

GYMNASIUM_FILES = sorted(
    (Path(__import__("gymnasium").__file__).parent / "envs" / "mujoco" / "assets").glob("*.xml")
)
# A ball joint pivoting off the body origin, a hinge and a slide with ref, and a body whose
# slide precedes a hinge anchored elsewhere than the slide's pos.
BALL_AND_REFS = """<mujoco>
  <compiler angle="degree"/>
  <worldbody>
    <body name="base" pos="0 0 1">
      <joint name="swing" type="ball" pos="0 0 0.1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.05"/>
      <body name="arm" pos="0.3 0 0">
        <joint name="elbow" type="hinge" axis="0 1 0" ref="30"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.04"/>
        <body name="tip" pos="0 0 -0.3">
          <joint name="extend" type="slide" axis="0 0 1" ref="0.05"/>
          <joint name="twist" type="hinge" axis="1 0 0" pos="0.02 0 0"/>
          <geom type="sphere" size="0.05" pos="0.01 0.02 0"/>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>"""


class Probe(NewtonEnv):
    def _reward(self, state, action, next_state):
        return torch.zeros(self.num_envs)


def load(path: Path) -> tuple[Probe, object]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # floors without contacts, unread motors: not the point
        env = Probe(1, model_file=str(path), capture=False)
    return env, mujoco.MjModel.from_xml_path(str(path))


# MuJoCo 3's <frame>: bodies placed by frames (nested, turned, with a childclass).
FRAMES = """<mujoco>
  <compiler angle="radian"/>
  <default><default class="arm"><joint damping="0.1" armature="0.01" range="-2 2"/>
    <geom type="capsule" size="0.04"/></default></default>
  <worldbody>
    <frame pos="0.1 0.2 0.3" euler="0 0 0.5" childclass="arm">
      <body name="a" pos="0 0 1">
        <joint name="j1" axis="0 1 0" ref="0.2"/>
        <geom fromto="0 0 0 0.3 0 0"/>
        <frame pos="0.3 0 0" quat="0.9 0 0.1 0">
          <body name="b">
            <joint name="j2" axis="0 1 0"/>
            <geom fromto="0 0 0 0.3 0 0"/>
          </body>
        </frame>
      </body>
    </frame>
  </worldbody>
  <actuator><position joint="j1" kp="10" ctrlrange="-1 1"/><motor joint="j2" gear="2"/></actuator>
</mujoco>"""
# Two top-level <default>s (Gymnasium-Robotics' Adroit hand: one in the task's file, one,
# named "main", in an included file): MuJoCo reads both as its one top class. Newton's
# importer read only the unnamed one, and the hand's fingers lost their armature and damping.
TWO_DEFAULTS = """<mujoco>
  <default class="main"><joint damping="0.3" armature="0.02" stiffness="1"/></default>
  <default><joint damping="0.1"/><default class="tip"><joint armature="0.005"/></default>
  </default>
  <worldbody>
    <body name="base" pos="0 0 1"><joint name="a" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
      <body name="mid" pos="0.3 0 0"><joint name="b" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02"/>
        <body name="tip" pos="0.2 0 0"><joint name="c" class="tip" type="hinge" axis="0 0 1"/>
          <geom type="sphere" size="0.02" pos="0.05 0 0"/>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>"""

# A marker of 1e-6 kg and 1e-12 kg m^2 fixed to a light finger (dm_control's manipulator
# puts one on its hand): Newton's validation raised its inertia to 1e-6, ten times the
# finger's own about its knuckle, and the finger turned ten times slower than in MuJoCo.
LIGHT_MARKER = """<mujoco>
  <worldbody>
    <body name="hand" pos="0 0 1"><joint name="wrist" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.05 0 0" size="0.01"/>
      <body name="finger" pos="0.05 0 0"><joint name="knuckle" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0.02 0 0" size="0.004"/>
        <body name="marker" pos="0.03 0 0">
          <inertial pos="0 0 0" mass="1e-6" diaginertia="1e-12 1e-12 1e-12"/></body>
      </body>
    </body>
  </worldbody>
</mujoco>"""

WRITTEN = {"ball_and_refs": BALL_AND_REFS, "frames": FRAMES, "two_defaults": TWO_DEFAULTS,
           "light_marker": LIGHT_MARKER}  # fmt: skip


@pytest.fixture(params=[*GYMNASIUM_FILES, *WRITTEN], ids=lambda p: getattr(p, "name", p))
def robot_file(request, tmp_path) -> Path:
    if request.param in WRITTEN:
        path = tmp_path / f"{request.param}.xml"
        path.write_text(WRITTEN[request.param])
        return path
    return request.param


def test_the_same_qpos_and_qvel_place_and_move_every_body_as_mujoco_does(robot_file):
    env, model = load(robot_file)
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    names = [str(label).rsplit("/", 1)[-1] for label in env.body_labels]
    assert len(names) == model.nbody - 1  # both number the bodies depth-first (MuJoCo's 0: world)
    for _ in range(3):
        qpos, qvel = random_state(model, rng)
        data.qpos[:], data.qvel[:] = qpos, qvel
        mujoco.mj_forward(model, data)
        joint_q, joint_qd = env.joint_state_from_mujoco(
            torch.tensor(qpos)[None].float(), torch.tensor(qvel)[None].float()
        )
        positions, twists = newton_bodies(env, joint_q, joint_qd)
        for index, name in enumerate(names):
            body = index + 1
            assert name.startswith("body_") or model.body(body).name == name
            np.testing.assert_allclose(positions[index], data.xpos[body], atol=1e-4, err_msg=name)
            velocity = np.zeros(6)  # MuJoCo: (omega, v) at the COM, world axes
            mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_BODY, body, velocity, 0)
            np.testing.assert_allclose(twists[index], np.r_[velocity[3:], velocity[:3]],
                                       atol=1e-3, err_msg=name)  # fmt: skip
        back_q, back_qd = env.mujoco_from_joint_state(joint_q, joint_qd)
        np.testing.assert_allclose(back_q[0].numpy(), qpos, atol=1e-5)
        np.testing.assert_allclose(back_qd[0].numpy(), qvel, atol=1e-5)


def test_coordinates_are_named_and_ordered_as_the_files_joints():
    env, model = load(next(p for p in GYMNASIUM_FILES if p.name == "hopper.xml"))
    assert env.coordinate_names == ["rootx", "rootz", "rooty", "thigh_joint", "leg_joint",
                                    "foot_joint"]  # fmt: skip
    # MuJoCo's qpos0 (the torso at rootz = 1.25, its ref) is the file's pose on Newton too.
    joint_q, _ = env.joint_state_from_mujoco(
        torch.tensor(model.qpos0)[None].float(), torch.zeros(1, model.nv)
    )
    torch.testing.assert_close(joint_q[0], env.default_joint_q)
    positions, _ = newton_bodies(env, env.default_joint_q[None], env.default_joint_qd[None])
    assert positions[0][2] == pytest.approx(1.25)
    ant, _ = load(next(p for p in GYMNASIUM_FILES if p.name == "ant.xml"))
    assert ant.coordinate_names[:7] == ["root:x", "root:y", "root:z", "root:qx", "root:qy",
                                        "root:qz", "root:qw"]  # fmt: skip
    with pytest.raises(ValueError, match=r"qpos must have shape \[N, 15\], got \(1, 14\)"):
        ant.joint_state_from_mujoco(torch.zeros(1, 14), torch.zeros(1, 14))


def test_the_conversions_are_differentiable_in_float64(tmp_path):
    path = tmp_path / "ball_and_refs.xml"
    path.write_text(BALL_AND_REFS)
    env, _ = load(path)
    ant, _ = load(next(p for p in GYMNASIUM_FILES if p.name == "ant.xml"))
    for robot in (env, ant):
        mapping = robot.mujoco_coordinates
        rng = np.random.default_rng(1)
        qpos = torch.tensor(rng.standard_normal((2, mapping.nq)), dtype=torch.float64)
        qvel = torch.tensor(rng.standard_normal((2, mapping.nv)), dtype=torch.float64)
        torch.autograd.gradcheck(robot.joint_state_from_mujoco,
                                 (qpos.requires_grad_(), qvel.requires_grad_()))  # fmt: skip
        torch.autograd.gradcheck(robot.mujoco_from_joint_state,
                                 (qpos.detach().requires_grad_(),
                                  qvel.detach().requires_grad_()))  # fmt: skip


def test_humanoid_files_with_mujocos_solver_option_load():
    humanoid, model = load(next(p for p in GYMNASIUM_FILES if p.name == "humanoid.xml"))
    assert humanoid.coordinates == model.nq and humanoid.dofs == model.nv
    merged = [j for j in range(humanoid.simulation.model.joint_count)
              if int(humanoid.simulation.model.joint_type.numpy()[j]) == _D6]  # fmt: skip
    assert merged  # the hips' three hinges: one D6 of Newton's, MuJoCo's meaning kept


def test_the_diffrl_robots_keep_newtons_import():
    from pathgrad.envs.newton import DiffRLHopper

    assert DiffRLHopper.mujoco_meaning is False
    hopper = DiffRLHopper(2, seed=0)
    assert hopper.mujoco_coordinates is None
    with pytest.raises(ValueError, match="has no MuJoCo coordinates"):
        hopper.mujoco_from_joint_state(torch.zeros(2, 6), torch.zeros(2, 6))
    # Its file has no offset pivots or refs: MuJoCo's meaning would change nothing there.
    Meant = type("Meant", (DiffRLHopper,), {"mujoco_meaning": True})
    meant = Meant(2, seed=0)
    for name in ("joint_X_p", "joint_X_c"):
        assert np.array_equal(getattr(hopper.simulation.model, name).numpy(),
                              getattr(meant.simulation.model, name).numpy()), name  # fmt: skip


def test_one_step_accelerates_every_joint_as_mujoco_does_without_contacts(robot_file):
    # The file's gravity, masses (settotalmass), armature, damping and springs; no action,
    # no contact, inside the joint ranges: MuJoCo's qacc (mj_forward) within 1%.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = Probe(1, model_file=str(robot_file), dt=1e-4, actuated_joints=[], capture=False)
    model = mujoco.MjModel.from_xml_path(str(robot_file))
    if robot_file.name == "swimmer.xml":  # its thrust is MuJoCo's fluid model: named instead
        assert any("fluid forces (<option density and viscosity>)" in str(w.message)
                   for w in caught)  # fmt: skip
        return
    # actuated_joints=[]: no actuator acts (a position servo would push at ctrl 0 in MuJoCo)
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_ACTUATION
    data = mujoco.MjData(model)
    rng = np.random.default_rng(2)
    qpos, qvel = inside_the_ranges(model, rng), 0.3 * rng.standard_normal(model.nv)
    data.qpos[:], data.qvel[:] = qpos, qvel
    mujoco.mj_forward(model, data)
    env.reset(seed=0)
    joint_q, joint_qd = env.joint_state_from_mujoco(
        torch.tensor(qpos)[None].float(), torch.tensor(qvel)[None].float()
    )
    env.state = {**env.state, "joint_q": joint_q, "joint_qd": joint_qd}
    env.step(torch.zeros(1, 0))
    _, after = env.mujoco_from_joint_state(env.state["joint_q"], env.state["joint_qd"])
    qacc = (after[0].double().numpy() - qvel) / 1e-4
    scale = max(1.0, float(np.abs(data.qacc).max()))
    assert np.abs(qacc - data.qacc).max() <= 0.01 * scale, (qacc, data.qacc)


@pytest.mark.parametrize("name", ["hopper.xml", "ant.xml", "humanoid.xml"])
def test_an_action_means_what_a_gymnasium_action_means(name):
    # The file's motors drive the actions: gear x ctrl, ctrl clamped to ctrlrange.
    path = next(p for p in GYMNASIUM_FILES if p.name == name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = Probe(1, model_file=str(path), dt=1e-4, capture=False)
    model = mujoco.MjModel.from_xml_path(str(path))
    assert env.action_dim == model.nu
    np.testing.assert_allclose(env.action_scale.numpy(), model.actuator_gear[:, 0], rtol=1e-6)
    np.testing.assert_allclose(env.single_action_space.low, model.actuator_ctrlrange[:, 0])
    np.testing.assert_allclose(env.single_action_space.high, model.actuator_ctrlrange[:, 1])
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
    data = mujoco.MjData(model)
    ctrl = 1.5 * np.random.default_rng(3).uniform(-1, 1, model.nu) * model.actuator_ctrlrange[:, 1]
    data.ctrl[:] = ctrl  # some beyond the range: MuJoCo clamps them, so does the env
    data.qpos[:] = qpos = inside_the_ranges(model, np.random.default_rng(4))
    mujoco.mj_forward(model, data)
    env.reset(seed=0)
    joint_q, joint_qd = env.joint_state_from_mujoco(
        torch.tensor(qpos)[None].float(), torch.zeros(1, model.nv)
    )
    env.state = {**env.state, "joint_q": joint_q, "joint_qd": joint_qd}
    env.step(torch.tensor(ctrl)[None].float())
    _, after = env.mujoco_from_joint_state(env.state["joint_q"], env.state["joint_qd"])
    qacc = after[0].double().numpy() / 1e-4
    scale = max(1.0, float(np.abs(data.qacc).max()))
    assert np.abs(qacc - data.qacc).max() <= 0.01 * scale, (qacc, data.qacc)


def test_explicit_actuation_keeps_newtonenvs_own_meaning():
    path = next(p for p in GYMNASIUM_FILES if p.name == "hopper.xml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = Probe(1, model_file=str(path), actuated_joints=["thigh_joint"], capture=False)
    assert env.action_dim == 1 and env.control_range is None
    assert env.action_scale.tolist() == [1.0]


def test_joint_limits_are_in_qpos_units_where_ref_moved_the_zero():
    env, model = load(next(p for p in GYMNASIUM_FILES if p.name == "reacher.xml"))
    newton_model = env.simulation.model
    for joint in range(model.njnt):
        if not model.jnt_limited[joint]:
            continue
        dof = env.mujoco_coordinates.dof_names.index(model.joint(joint).name)
        limits = (
            newton_model.joint_limit_lower.numpy()[dof],
            newton_model.joint_limit_upper.numpy()[dof],
        )
        np.testing.assert_allclose(limits, model.jnt_range[joint], atol=1e-6)


def test_a_files_floor_is_the_ground_and_no_second_plane_is_added(tmp_path):
    pusher = next(p for p in GYMNASIUM_FILES if p.name == "pusher.xml")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = Probe(1, model_file=str(pusher), contacts=True, capture=False)
    plane = int(newton.GeoType.PLANE)
    shapes = env.simulation.model
    planes = [k for k, kind in enumerate(shapes.shape_type.numpy()) if int(kind) == plane]
    assert len(planes) == 1  # the table, at z = -0.325: the objects rest on it
    assert shapes.shape_transform.numpy()[planes[0]][2] == pytest.approx(-0.325)
    assert not [w for w in caught if "inside the ground" in str(w.message)]
    arm = tmp_path / "ball_and_refs.xml"  # no floor of its own: pathgrad's ground plane
    arm.write_text(BALL_AND_REFS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = Probe(1, model_file=str(arm), contacts=True, capture=False)
    kinds = env.simulation.model.shape_type.numpy()
    assert sum(int(kind) == plane for kind in kinds) == 1


def test_substeps_auto_divides_the_files_timestep_by_its_stiffest_term(tmp_path):
    cheetah = next(p for p in GYMNASIUM_FILES if p.name == "half_cheetah.xml")
    # MuJoCo's soft limit (solreflimit 0.02 s on the foot's 0.106 kg m^2) allows 2 substeps,
    # Newton's import constants (1e4 N m/rad) 4 (with Newton's contact constants: MuJoCo's
    # contact softness on the thigh's 7 kg also allows 2, and is then the stiffest term)
    for joint_limits, count in (("mujoco", 2), ("newton", 4)):
        with pytest.warns(UserWarning, match=rf"substeps auto: {count} of {0.01 / count:g} s per "
                          r"env step of 0.01 s, half the stability bound of its stiffest term "
                          r"\(joint 'ffoot' has a limit of stiffness"):  # fmt: skip
            env = Probe(1, model_file=str(cheetah), contacts=True, capture=False,
                        joint_limits=joint_limits, contact_softness="newton")  # fmt: skip
        assert env.simulation.substeps == count and env.dt == pytest.approx(0.01)  # the file's
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chosen = Probe(1, model_file=str(cheetah), substeps=2, capture=False)
        own_step = Probe(1, model_file=str(cheetah), dt=0.02, capture=False)
    assert chosen.simulation.substeps == 2 and own_step.simulation.substeps == 1
    assert not [w for w in caught if "substeps auto" in str(w.message)]
    with pytest.raises(ValueError, match="substeps must be a positive integer or 'auto', got 'a'"):
        Probe(1, model_file=str(cheetah), substeps="a", capture=False)


# Joints one Newton joint cannot hold: two hinges about different anchors (dm_control's
# humanoid's ankles), and a slide after a hinge, both with refs.
JOINTS_APART = """<mujoco>
  <worldbody>
    <body name="base" pos="0 0 1" euler="0 10 0">
      <joint name="tilt" type="hinge" axis="0 1 0" ref="0.2"/>
      <joint name="roll" type="hinge" axis="1 0 0" pos="0 0 -0.2" range="-1 1" limited="true"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.05"/>
      <body name="tip" pos="0.3 0 0">
        <joint name="bend" type="hinge" axis="0 1 0" pos="0 0 0.05"/>
        <joint name="reach" type="slide" axis="1 0 0" ref="0.03"/>
        <geom type="sphere" size="0.05" pos="0.05 0 0"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="tilt" gear="2"/><motor joint="reach" gear="5"/></actuator>
</mujoco>"""


def test_a_body_whose_joints_pivot_apart_moves_as_mujocos_does(tmp_path):
    path = tmp_path / "joints_apart.xml"
    path.write_text(JOINTS_APART)
    env, model = load(path)
    assert env.coordinate_names == ["tilt", "roll", "bend", "reach"]
    labels = [str(label).rsplit("/", 1)[-1] for label in env.body_labels]
    assert labels == ["base:tilt", "base", "tip:bend", "tip"]  # a frame body per extra joint
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    for _ in range(3):
        qpos, qvel = random_state(model, rng)
        data.qpos[:], data.qvel[:] = qpos, qvel
        mujoco.mj_forward(model, data)
        joint_q, joint_qd = env.joint_state_from_mujoco(
            torch.tensor(qpos)[None].float(), torch.tensor(qvel)[None].float()
        )
        positions, twists = newton_bodies(env, joint_q, joint_qd)
        for name in ("base", "tip"):
            index, body = labels.index(name), model.body(name).id
            np.testing.assert_allclose(positions[index], data.xpos[body], atol=1e-4, err_msg=name)
            velocity = np.zeros(6)
            mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_BODY, body, velocity, 0)
            np.testing.assert_allclose(twists[index], np.r_[velocity[3:], velocity[:3]],
                                       atol=1e-3, err_msg=name)  # fmt: skip
    # One short step with the motors pushing, contacts off, inside the ranges: MuJoCo's qacc.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stepped = Probe(1, model_file=str(path), dt=1e-4, capture=False)
    qpos, qvel = inside_the_ranges(model, rng), 0.3 * rng.standard_normal(model.nv)
    ctrl = [0.7, -0.4]
    data.qpos[:], data.qvel[:], data.ctrl[:] = qpos, qvel, ctrl
    mujoco.mj_forward(model, data)
    stepped.reset(seed=0)
    joint_q, joint_qd = stepped.joint_state_from_mujoco(
        torch.tensor(qpos)[None].float(), torch.tensor(qvel)[None].float()
    )
    stepped.state = {**stepped.state, "joint_q": joint_q, "joint_qd": joint_qd}
    stepped.step(torch.tensor(ctrl)[None].float())
    _, after = stepped.mujoco_from_joint_state(stepped.state["joint_q"], stepped.state["joint_qd"])
    qacc = (after[0].double().numpy() - qvel) / 1e-4
    assert np.abs(qacc - data.qacc).max() <= 0.01 * np.abs(data.qacc).max(), (qacc, data.qacc)


MESH_ARM = """<mujoco>
  <compiler meshdir="meshes"/>
  <asset><mesh name="link" file="link.stl"/></asset>
  <worldbody>
    <body name="base" pos="0 0 1">
      <joint name="yaw" type="hinge" axis="0 0 1"/>
      <joint name="pitch" type="hinge" axis="0 1 0" pos="0.05 0 0"/>
      <geom type="mesh" mesh="link" pos="0.15 0 0"/>
      <body name="forearm" pos="0.3 0 0">
        <joint name="elbow" type="hinge" axis="0 1 0"/>
        <geom type="mesh" mesh="link" pos="0.15 0 0"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="yaw"/><motor joint="pitch"/><motor joint="elbow"/></actuator>
</mujoco>"""


def test_a_file_with_meshes_in_its_meshdir_loads_also_when_rewritten(tmp_path):
    # The meshes lie in the file's meshdir; the base's hinges pivot apart, so the file is
    # rewritten (joint frames) and given to Newton as text: its meshes are still found.
    trimesh = pytest.importorskip("trimesh")
    (tmp_path / "meshes").mkdir()
    trimesh.creation.box(extents=(0.3, 0.05, 0.05)).export(tmp_path / "meshes" / "link.stl")
    path = tmp_path / "mesh_arm.xml"
    path.write_text(MESH_ARM)
    env, model = load(path)
    assert env.action_dim == 3
    shapes = env.simulation.model.shape_type.numpy()
    assert int((shapes == int(newton.GeoType.MESH)).sum()) == 2
    labels = [str(label).rsplit("/", 1)[-1] for label in env.body_labels]
    data = mujoco.MjData(model)
    qpos, qvel = random_state(model, np.random.default_rng(3))
    data.qpos[:], data.qvel[:] = qpos, qvel
    mujoco.mj_kinematics(model, data)
    joint_q, joint_qd = env.joint_state_from_mujoco(
        torch.tensor(qpos)[None].float(), torch.tensor(qvel)[None].float()
    )
    positions, _ = newton_bodies(env, joint_q, joint_qd)
    for name in ("base", "forearm"):
        np.testing.assert_allclose(positions[labels.index(name)], data.xpos[model.body(name).id],
                                   atol=1e-4, err_msg=name)  # fmt: skip


FREE_THEN_SPRING = """<mujoco>
  <compiler angle="radian"/>
  <option gravity="0 0 0"/>
  <worldbody>
    <body name="hull" pos="0 0 1">
      <freejoint name="root"/>
      <geom type="box" size="0.2 0.1 0.05"/>
      <body name="flap" pos="0.2 0 0">
        <joint name="hinge" type="hinge" axis="0 1 0" ref="0.1" springref="0.4" stiffness="5"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.03"/>
      </body>
    </body>
  </worldbody>
</mujoco>"""


def test_a_spring_after_a_free_joint_rests_where_the_file_says(tmp_path):
    # Newton keeps spring rests per coordinate (7 for a free joint, 6 DOFs): the hinge's
    # springref lands on the hinge's coordinate, and one step accelerates as MuJoCo's.
    path = tmp_path / "free_then_spring.xml"
    path.write_text(FREE_THEN_SPRING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = Probe(1, model_file=str(path), dt=1e-4, capture=False)
    model = mujoco.MjModel.from_xml_path(str(path))
    data = mujoco.MjData(model)
    qpos = model.qpos0.copy()
    qpos[7] = -0.2  # the hinge 0.6 from its spring's rest
    data.qpos[:] = qpos
    mujoco.mj_forward(model, data)
    env.reset(seed=0)
    joint_q, joint_qd = env.joint_state_from_mujoco(
        torch.tensor(qpos)[None].float(), torch.zeros(1, model.nv)
    )
    env.state = {**env.state, "joint_q": joint_q, "joint_qd": joint_qd}
    env.step(torch.zeros(1, env.action_dim))
    _, after = env.mujoco_from_joint_state(env.state["joint_q"], env.state["joint_qd"])
    qacc = after[0].double().numpy() / 1e-4
    assert np.abs(data.qacc).max() > 1.0
    assert np.abs(qacc - data.qacc).max() <= 0.01 * np.abs(data.qacc).max(), (qacc, data.qacc)


def test_a_scene_that_includes_the_robot_is_one_model(tmp_path):
    # A robot maker's layout: scene.xml includes robot.xml (in a subfolder) and adds the
    # floor and the timestep; the robot's joints, motors and classes are read through it.
    (tmp_path / "robot").mkdir()
    (tmp_path / "robot" / "robot.xml").write_text(FRAMES.replace("<mujoco>", '<mujoco model="r">'))
    (tmp_path / "scene.xml").write_text(
        '<mujoco><include file="robot/robot.xml"/><option timestep="0.004"/>'
        '<worldbody><geom name="floor" type="plane" size="5 5 0.1"/></worldbody></mujoco>'
    )
    env, model = load(tmp_path / "scene.xml")
    assert env.coordinate_names == ["j1", "j2"] and env.action_dim == 2
    assert env.dt == pytest.approx(0.004)
    data = mujoco.MjData(model)
    qpos, _ = random_state(model, np.random.default_rng(5))
    data.qpos[:] = qpos
    mujoco.mj_kinematics(model, data)
    joint_q, joint_qd = env.joint_state_from_mujoco(torch.tensor(qpos)[None].float(),
                                                    torch.zeros(1, model.nv))  # fmt: skip
    positions, _ = newton_bodies(env, joint_q, joint_qd)
    np.testing.assert_allclose(positions, data.xpos[1:], atol=1e-4)
    (tmp_path / "broken.xml").write_text('<mujoco><include file="missing.xml"/></mujoco>')
    with pytest.raises(ValueError, match=r"broken.xml': <include file='missing.xml'>: .* does not"):
        load(tmp_path / "broken.xml")
    (tmp_path / "a.xml").write_text('<mujoco><include file="b.xml"/></mujoco>')
    (tmp_path / "b.xml").write_text('<mujoco><include file="a.xml"/></mujoco>')
    with pytest.raises(ValueError, match="includes a file that includes it"):
        load(tmp_path / "a.xml")
    # MuJoCo 2.3.3 and later reject global coordinates; Newton read them as local
    (tmp_path / "old.xml").write_text(
        '<mujoco><compiler coordinate="global"/><worldbody><body name="a">'
        '<joint type="hinge" pos="0 0 1"/><geom size="0.1" pos="0 0 1"/></body></worldbody>'
        "</mujoco>"
    )
    with pytest.raises(ValueError, match=r'old.xml\': <compiler coordinate="global"> .*convert'):
        load(tmp_path / "old.xml")


BOX_OBJ = "\n".join(
    [f"v {x} {y} {z}" for x in (-0.05, 0.05) for y in (-0.1, 0.1) for z in (-0.15, 0.15)]
    + [f"f {a} {b} {c}" for a, b, c in ((1, 3, 4), (1, 4, 2), (5, 6, 8), (5, 8, 7), (1, 2, 6),
                                        (1, 6, 5), (3, 7, 8), (3, 8, 4), (1, 5, 7), (1, 7, 3),
                                        (2, 4, 8), (2, 8, 6))]
)  # fmt: skip


def test_meshes_are_found_where_mujoco_finds_them(tmp_path):
    # Gymnasium-Robotics' kitchen: the main file includes the robot's assets.xml, whose own
    # <compiler meshdir> is wrong from the main file's folder, and sets the right meshdir in a
    # <compiler> after the include. MuJoCo's meshdir is one value for the model (the last
    # set), read from the main file's folder; Newton's importer reads each included file's
    # own, and did not find the mesh.
    (tmp_path / "robot" / "meshes").mkdir(parents=True)
    (tmp_path / "robot" / "meshes" / "box.obj").write_text(BOX_OBJ)
    (tmp_path / "robot" / "assets.xml").write_text(
        '<mujoco><compiler meshdir="robot/meshes"/>'
        '<asset><mesh name="box" file="box.obj"/></asset></mujoco>'
    )
    (tmp_path / "scene").mkdir()
    scene = tmp_path / "scene" / "scene.xml"
    scene.write_text(
        '<mujoco><include file="../robot/assets.xml"/><compiler meshdir="../robot/meshes"/>'
        '<worldbody><body name="box"><joint name="lift" type="slide" axis="0 0 1"/>'
        '<geom type="mesh" mesh="box"/></body></worldbody></mujoco>'
    )
    env, model = load(scene)
    assert model.body_mass[1] == pytest.approx(6.0, rel=1e-3)  # 0.1 x 0.2 x 0.3 m of water
    masses = env.simulation.model.body_mass.numpy()
    assert masses[0] == pytest.approx(model.body_mass[1], rel=1e-3)
    (tmp_path / "robot" / "meshes" / "box.obj").unlink()
    with pytest.raises(ValueError, match=r"mesh file 'box.obj' does not exist \(looked for"):
        load(scene)


def test_an_included_file_s_assets_and_includes_are_found_beside_it_as_mujoco_finds_them(
    tmp_path,
):
    # franka_sim's layout (shipped in Genesis): the main file includes assets/assets.xml,
    # whose mesh paths ("../meshes/...") and own includes are written from assets/. MuJoCo
    # looks in the main file's folder first, then beside the file that names the asset.
    (tmp_path / "robot" / "meshes").mkdir(parents=True)
    (tmp_path / "robot" / "meshes" / "box.obj").write_text(BOX_OBJ)
    (tmp_path / "robot" / "assets").mkdir()
    (tmp_path / "robot" / "assets" / "assets.xml").write_text(
        '<mujoco><include file="body.xml"/>'
        '<asset><mesh name="box" file="../meshes/box.obj"/></asset></mujoco>'
    )
    (tmp_path / "robot" / "assets" / "body.xml").write_text(
        '<mujoco><worldbody><body name="box"><joint name="lift" type="slide" axis="0 0 1"/>'
        '<geom type="mesh" mesh="box"/></body></worldbody></mujoco>'
    )
    scene = tmp_path / "robot" / "scene.xml"
    scene.write_text('<mujoco><include file="assets/assets.xml"/></mujoco>')
    env, model = load(scene)
    assert model.body_mass[1] == pytest.approx(6.0, rel=1e-3)  # the mesh beside assets.xml
    assert env.simulation.model.body_mass.numpy()[0] == pytest.approx(6.0, rel=1e-3)
    (tmp_path / "meshes").mkdir()  # the same path from the main file's folder comes first
    (tmp_path / "meshes" / "box.obj").write_text(BOX_OBJ.replace("0.15", "0.3"))
    env, model = load(scene)
    assert model.body_mass[1] == pytest.approx(12.0, rel=1e-3)
    assert env.simulation.model.body_mass.numpy()[0] == pytest.approx(12.0, rel=1e-3)
    (tmp_path / "robot" / "assets" / "body.xml").unlink()
    with pytest.raises(ValueError, match=r"<include file='body.xml'>: neither .* nor .* exists"):
        load(scene)


FOUR_BAR = """<mujoco>
  <option gravity="0 0 -9.81" timestep="0.002"/>
  <worldbody>
    <body name="ground_link" pos="0 0 2" euler="20 20 20">
      <geom type="capsule" fromto="0 0 0 0 0 0.4" size="0.02"/>
      <body name="crank" pos="0.05 0 0">
        <joint name="hinge_1" axis="1 0 0"/>
        <geom type="capsule" fromto="0 0 0 0 0.4 0" size="0.02"/>
        <body name="coupler" pos="-0.05 0.4 0">
          <joint name="hinge_2" axis="1 0 0"/>
          <geom type="capsule" fromto="0 0 0 0 0 0.4" size="0.02"/>
          <body name="rocker" pos="0.05 0 0.4">
            <joint name="hinge_3" axis="1 0 0"/>
            <geom type="capsule" fromto="0 0 0 0 -0.4 0" size="0.02"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <equality>CLOSURE</equality>
  <actuator><motor joint="hinge_1"/></actuator>
</mujoco>"""


@pytest.mark.parametrize("closure", [
    '<connect name="closure" body1="ground_link" body2="rocker" anchor="0 0 0.4"/>',
    '<weld name="closure" body1="ground_link" body2="rocker"/>',
])  # fmt: skip
def test_a_loop_closing_equality_leaves_the_tree_s_joints_as_mujoco_s(tmp_path, closure):
    # Genesis's four-bar linkages: Newton's importer turns the connect (weld) into a ball
    # (fixed) joint to the rocker, which already hangs from hinge_3; Featherstone then posed
    # the rocker by it, and the MuJoCo coordinates took it for hinge_3 (the weld's file did
    # not load). The equality is named and left out, as every equality is.
    path = tmp_path / "four_bar.xml"
    path.write_text(FOUR_BAR.replace("CLOSURE", closure))
    with pytest.warns(UserWarning, match=r"equality constraints \((connect|weld) 'closure'"):
        env = Probe(1, model_file=str(path), dt=1e-4, capture=False)  # one_step_qacc's dt
    model = mujoco.MjModel.from_xml_path(str(path))
    assert env.coordinate_names == ["hinge_1", "hinge_2", "hinge_3"]
    assert int(env.simulation.model.joint_count) == 4  # the tree's: fixed base, three hinges
    rng = np.random.default_rng(1)
    qpos, qvel = rng.uniform(-1.0, 1.0, 3), rng.uniform(-1.0, 1.0, 3)
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    mujoco.mj_kinematics(model, data)
    joint_q, joint_qd = env.joint_state_from_mujoco(torch.tensor(qpos)[None].float(),
                                                    torch.zeros(1, 3))  # fmt: skip
    positions, _ = newton_bodies(env, joint_q, joint_qd)
    np.testing.assert_allclose(positions, data.xpos[1:], atol=1e-5)
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_EQUALITY  # what pathgrad leaves out
    ours, theirs = one_step_qacc(env, model, qpos, qvel, ctrl=[0.3])
    assert np.abs(ours - theirs).max() <= 0.01 * np.abs(theirs).max(), (ours, theirs)
