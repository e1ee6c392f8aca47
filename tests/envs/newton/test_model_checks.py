"""A robot model with a misspelt joint or geom type, or a moving body without mass, is named
at construction instead of building a wrong robot or stepping to NaN."""

from __future__ import annotations

import re
import warnings

import pytest

pytest.importorskip("newton")

from pathgrad.envs.newton.engine.model_checks import check_model_file  # noqa: E402
from pathgrad.envs.newton.robots.reacher import ASSET, NewtonReacher  # noqa: E402

ARM = ASSET.read_text()


def write(tmp_path, text: str, name: str = "arm.xml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_misspelt_mjcf_joint_type_is_named_with_the_allowed_types(tmp_path):
    path = write(tmp_path, ARM.replace('name="elbow" type="hinge"', 'name="elbow" type="hing"'))
    with pytest.raises(ValueError) as raised:
        check_model_file(path)
    assert str(raised.value) == (
        f"model_file '{path}': joint 'elbow' has type 'hing'; MJCF joint types are hinge, "
        "slide, ball, free."
    )


def test_a_misspelt_geom_type_in_a_default_class_names_the_class(tmp_path):
    text = ARM.replace(
        "<worldbody>", '<default><default class="limb"><geom type="capsul"/></default></default>'
        "<worldbody>"
    )  # fmt: skip
    with pytest.raises(ValueError, match="a geom of <default class='limb'> has type 'capsul'"):
        check_model_file(write(tmp_path, text))


def test_a_misspelt_urdf_joint_type_is_named(tmp_path):
    urdf = """<robot name="r"><link name="a"/><link name="b"/>
      <joint name="knee" type="revolut"><parent link="a"/><child link="b"/></joint></robot>"""
    with pytest.raises(ValueError, match="joint 'knee' has type 'revolut'; URDF joint types"):
        check_model_file(write(tmp_path, urdf, "robot.urdf"))


def test_a_urdf_with_xacro_substitutions_left_in_is_named(tmp_path):
    # As husky.urdf ships in PyBullet's data: Newton's importer said only "could not convert
    # string to float: '$(optenv'".
    urdf = """<robot name="r"><link name="a"/><link name="b"/>
      <joint name="knee" type="revolute"><parent link="a"/><child link="b"/>
        <origin xyz="$(optenv HUSKY_X 0) 0 0"/></joint></robot>"""
    with pytest.raises(ValueError, match=r"<origin xyz=.*\$\(optenv.* is a xacro substitution: "
                                         r"expand the file with xacro first"):  # fmt: skip
        check_model_file(write(tmp_path, urdf, "robot.urdf"))


def test_the_shipped_models_pass():
    import newton.examples

    shipped = sorted(ASSET.parent.glob("*.xml"))
    assert len(shipped) >= 3
    for path in [*shipped, newton.examples.get_asset("nv_ant.xml")]:
        check_model_file(path)  # raises on any unknown type


def arm(path):
    """A NewtonReacher on the given model file (as a user's subclass sets it)."""
    return type("MyArm", (NewtonReacher,), {"default_model_file": str(path)})(2, capture=False)


def test_a_moving_body_without_mass_is_named_with_its_joint(tmp_path):
    massless = write(tmp_path, ARM.replace('size="0.035" mass="0.5"', 'size="0.035" mass="0"'))
    with pytest.raises(ValueError) as raised:
        arm(massless)
    assert "body 'forearm' (moved by joint 'elbow') has no mass" in str(raised.value)
    assert "mass matrix is singular" in str(raised.value)


def test_a_massless_body_carrying_mass_or_with_armature_builds(tmp_path):
    carried = ARM.replace('size="0.04" mass="1.0"', 'size="0.04" mass="0"')
    env = arm(write(tmp_path, carried))
    assert env.num_envs == 2  # the upper arm weighs nothing but carries the forearm
    armature = ARM.replace('size="0.035" mass="0.5"', 'size="0.035" mass="0"').replace(
        'name="elbow" type="hinge"', 'name="elbow" type="hinge" armature="0.01"'
    )
    arm(write(tmp_path, armature, "arm2.xml"))


def test_mjcf_motor_gears_that_the_env_does_not_apply_are_warned_about(tmp_path):
    geared = ARM.replace(
        "</worldbody>",
        '</worldbody><actuator><motor joint="shoulder" gear="50"/>'
        '<motor joint="elbow" gear="30"/></actuator>',
    )
    path = write(tmp_path, geared)
    with pytest.warns(UserWarning) as caught:
        arm(path)
    (message,) = [str(w.message) for w in caught if "<motor>" in str(w.message)]
    assert message.endswith(
        "has <motor> actuators (shoulder, elbow: gear 50, 30) that NewtonEnv does not read: an "
        "action is a generalized force action x action_scale, here 1 on every actuated DOF. To "
        "use the gears, pass actuated_joints=['shoulder', 'elbow'] and action_scale=[50, 30]."
    )
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scaled actions, or gears of 1: nothing to say
        type("Scaled", (NewtonReacher,), {"default_model_file": str(path)})(
            2, capture=False, max_torque=50.0
        )
        arm(write(tmp_path, geared.replace('gear="50"', 'gear="1"').replace('gear="30"', ""),
                  "ones.xml"))  # fmt: skip


URDF = """<robot name="hopper">
  <link name="body"><inertial><mass value="1"/><inertia ixx="0.01" iyy="0.01" izz="0.01"
    ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><geometry><sphere radius="0.1"/></geometry></collision></link>
  <link name="leg"><inertial><mass value="0.5"/><inertia ixx="0.01" iyy="0.01" izz="0.01"
    ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><geometry><sphere radius="0.05"/></geometry></collision></link>
  <joint name="hip" type="revolute"><parent link="body"/><child link="leg"/>
    <origin xyz="0 0 -0.2"/><axis xyz="0 1 0"/><limit lower="-1" upper="1"/></joint>
</robot>"""


def test_a_urdf_robot_on_the_ground_with_a_fixed_root_is_warned_about(tmp_path):
    import warnings

    from pathgrad.envs.newton import NewtonEnv

    class Hopper(NewtonEnv):
        default_model_file = str(write(tmp_path, URDF, "hopper.urdf"))

        def _reward(self, state, action, next_state):
            return next_state["joint_q"].sum(-1)

    with pytest.warns(UserWarning, match="is a URDF, whose root link Newton fixes to the world"):
        Hopper(2, contacts=True, capture=False)
    import warp as wp

    lifted = {"floating": True, "xform": wp.transform((0.0, 0.0, 1.0), wp.quat_identity())}
    Free = type("Free", (Hopper,), {"model_file_options": lambda self: lifted})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Free(2, contacts=True, capture=False).coordinates == 8  # free base 7 + hip 1
        Hopper(2, contacts=False, capture=False)  # no ground: an arm, say


DRONE = """<robot name="drone">
  <link name="frame"><inertial><mass value="0.027"/><inertia ixx="1.4e-5" iyy="1.4e-5"
    izz="2.2e-5" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><geometry><cylinder radius="0.06" length="0.025"/></geometry></collision></link>
</robot>"""


def test_a_model_with_nothing_that_moves_is_refused_with_why(tmp_path):
    # A one-link URDF (PyBullet's and Genesis's cf2x.urdf drone): Newton fixes the root to
    # the world, and the env stopped on "observation_dim ... got 0", which said nothing of it.
    import warp as wp

    from pathgrad.envs.newton import NewtonEnv

    class Drone(NewtonEnv):
        default_model_file = str(write(tmp_path, DRONE, "cf2x.urdf"))

        def _reward(self, state, action, next_state):
            return next_state["joint_q"][:, 2]

    with pytest.raises(ValueError, match=r"cf2x.urdf' has no joint that moves \(0 DOFs\).*"
                                         r"return \{'floating': True\} from model_file_options"):
        Drone(1, capture=False)
    lifted = {"floating": True, "xform": wp.transform((0.0, 0.0, 1.0), wp.quat_identity())}
    Free = type("Free", (Drone,), {"model_file_options": lambda self: lifted})
    assert Free(1, capture=False).dofs == 6
    welded = write(tmp_path, '<mujoco><worldbody><body name="b"><geom size="0.1"/></body>'
                   '</worldbody></mujoco>', "welded.xml")  # fmt: skip
    with pytest.raises(ValueError, match=r"welded.xml' has no joint .* Give a body a <joint>"):
        Drone(1, model_file=str(welded), capture=False)


def test_a_urdf_with_collada_meshes_loads(tmp_path):
    # Genesis's go2.urdf (as Unitree ships it) draws and collides with .dae meshes: Newton
    # reads them through pycollada, which pathgrad[newton] installs.
    trimesh = pytest.importorskip("trimesh")
    import newton

    from pathgrad.envs.newton import NewtonEnv

    trimesh.creation.box(extents=(0.1, 0.2, 0.3)).export(tmp_path / "shin.dae")
    urdf = URDF.replace('<sphere radius="0.05"/>', '<mesh filename="shin.dae"/>')
    assert urdf != URDF
    Leg = type("Leg", (NewtonEnv,), {
        "default_model_file": str(write(tmp_path, urdf, "leg.urdf")),
        "_reward": lambda self, state, action, next_state: next_state["joint_q"].sum(-1),
    })  # fmt: skip
    model = Leg(1, capture=False).simulation.model
    mesh = model.shape_type.numpy() == int(newton.GeoType.MESH)
    assert int(mesh.sum()) == 1 and int(model.shape_body.numpy()[mesh][0]) == 1  # the leg's


def test_a_urdf_s_package_meshes_are_found_as_ros_and_pybullet_find_them(tmp_path):
    # Genesis's panda_bullet/panda.urdf names "package://meshes/collision/link0.obj", the
    # meshes folder beside the file (PyBullet's reading): Newton's importer looked for a
    # folder "meshes" above it only, and the arm loaded with no shape at all.
    trimesh = pytest.importorskip("trimesh")
    import newton

    from pathgrad.envs.newton import NewtonEnv

    def load(path):
        return type("Leg", (NewtonEnv,), {
            "default_model_file": str(path),
            "_reward": lambda self, state, action, next_state: next_state["joint_q"].sum(-1),
        })(1, capture=False).simulation.model  # fmt: skip

    def meshes(model):
        return int((model.shape_type.numpy() == int(newton.GeoType.MESH)).sum())

    beside = tmp_path / "pybullet"
    (beside / "meshes").mkdir(parents=True)
    trimesh.creation.box(extents=(0.1, 0.2, 0.3)).export(beside / "meshes" / "shin.obj")
    urdf = URDF.replace('<sphere radius="0.05"/>', '<mesh filename="package://meshes/shin.obj"/>')
    assert meshes(load(write(beside, urdf, "leg.urdf"))) == 1
    ros = tmp_path / "leg_description"  # ROS's layout: the package folder above the file
    (ros / "meshes").mkdir(parents=True)
    (ros / "urdf").mkdir()
    trimesh.creation.box(extents=(0.1, 0.2, 0.3)).export(ros / "meshes" / "shin.obj")
    urdf = URDF.replace('<sphere radius="0.05"/>',
                        '<mesh filename="package://leg_description/meshes/shin.obj"/>')  # fmt: skip
    assert meshes(load(write(ros / "urdf", urdf, "leg.urdf"))) == 1
    (ros / "meshes" / "shin.obj").unlink()
    with pytest.raises(ValueError, match=r"collision mesh 'package://leg_description/meshes/"
                                         r"shin.obj' is not found .* no collision geometry"):
        load(ros / "urdf" / "leg.urdf")


def test_a_body_whose_inertia_no_rigid_body_has_is_named(tmp_path):
    # The leg's moments 0.001, 0.002, 0.01 break a + b >= c (as a CAD export's can, PyBullet's
    # mini_cheetah.urdf's thighs): MuJoCo rejects such a file, Newton changed it silently.
    import warnings

    from pathgrad.envs.newton import NewtonEnv

    def hopper(text):
        return type("Hopper", (NewtonEnv,), {
            "default_model_file": str(write(tmp_path, text, "hopper.urdf")),
            "_reward": lambda self, state, action, next_state: next_state["joint_q"].sum(-1),
        })(1, capture=False)  # fmt: skip

    bad = URDF.replace('<mass value="0.5"/><inertia ixx="0.01" iyy="0.01"',
                       '<mass value="0.5"/><inertia ixx="0.001" iyy="0.002"')  # fmt: skip
    assert bad != URDF
    with pytest.warns(UserWarning, match=r"body 'leg' has principal moments of inertia 0.001, "
                                         r"0.002, 0.01, whose two smaller ones sum to less"):
        hopper(bad)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        hopper(URDF)  # 0.01 three times: a sphere's, said nothing


def test_the_shipped_robots_raise_none_of_the_newcomer_warnings():
    import warnings

    from pathgrad.env import build_learning_env, get_registered_learning_env_names

    names = [name for name in get_registered_learning_env_names()
             if name.startswith(("Newton", "DiffRL"))]  # fmt: skip
    assert len(names) >= 8
    for name in names:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            build_learning_env(name, num_envs=1, device="cpu")


def test_a_body_with_mass_and_a_flat_inertia_is_warned_about(tmp_path):
    flat = ARM.replace(
        '<geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.035" mass="0.5"/>',
        '<inertial pos="0 0 0" mass="0.5" diaginertia="-0.01 0.01 0.01"/>',
    )
    with pytest.warns(UserWarning, match="body 'forearm' has mass 0.5 but principal moments of "
                      "inertia 0, 0.01, 0.01"):  # fmt: skip
        arm(write(tmp_path, flat))


@pytest.mark.parametrize(
    ("compiler", "span", "expected"),
    [
        ("", "-1.57 1.57", "joint 'elbow' has a range of -0.0274 to 0.0274 rad: this MJCF file "
         "reads range in degrees"),
        ('<compiler angle="radian"/>', "-90 90", "joint 'elbow' has limits -90 to 90 rad (-5157 "
         "to 5157 degrees), beyond a turn: written in degrees?"),
    ],
)  # fmt: skip
def test_hinge_limits_in_the_other_angle_unit_are_warned_about(tmp_path, compiler, span, expected):
    text = ARM.replace('name="elbow" type="hinge"',
                       f'name="elbow" type="hinge" range="{span}" limited="true"')  # fmt: skip
    with pytest.warns(UserWarning, match=re.escape(expected)):
        arm(write(tmp_path, text.replace("<worldbody>", f"{compiler}<worldbody>")))


def test_limits_of_one_turn_as_robot_files_round_them_are_not_warned_about(tmp_path):
    # UR5e, Jaco and xArm files (robosuite's) limit continuous joints at +-6.28319 rad, 5e-6
    # above 2 pi: one turn, not degrees.
    turn = 'name="elbow" type="hinge" range="-6.28319 6.28319" limited="true"'
    text = ARM.replace('name="elbow" type="hinge"', turn)
    radian = text.replace("<worldbody>", '<compiler angle="radian"/><worldbody>')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = arm(write(tmp_path, radian))
    assert env.simulation.model.joint_limit_upper.numpy().max() > 2 * 3.14159265  # it was read
    assert not [w for w in caught if "beyond a turn" in str(w.message)]
    with pytest.warns(UserWarning, match="beyond a turn"):  # a little more is still warned
        arm(write(tmp_path, radian.replace("6.28319", "6.4")))


def test_a_missing_collision_mesh_file_is_named_with_where_it_was_looked_for(tmp_path):
    urdf = """<robot name="r"><link name="a"><visual><geometry><mesh
      filename="package://r/meshes/a.dae"/></geometry></visual><collision><geometry><mesh
      filename="meshes/a.stl"/></geometry></collision></link></robot>"""
    path = write(tmp_path, urdf, "robot.urdf")
    with pytest.raises(ValueError) as raised:
        check_model_file(path)
    assert str(raised.value) == (
        f"model_file '{path}': mesh file 'meshes/a.stl' does not exist (looked for "
        f"'{tmp_path / 'meshes' / 'a.stl'}'); without it the shape is left out and its body has "
        "no collision geometry."
    )
    (tmp_path / "meshes").mkdir()
    (tmp_path / "meshes" / "a.stl").write_text("solid a\nendsolid a\n")
    check_model_file(path)  # the package:// visual mesh is the importer's to find


def test_a_non_finite_position_in_the_file_is_named_at_construction(tmp_path):
    nan = write(tmp_path, ARM.replace('<body name="forearm" pos="0.5 0 0">',
                                      '<body name="forearm" pos="0.5 0 nan">'))  # fmt: skip
    with pytest.raises(ValueError) as raised:
        arm(nan)
    assert str(raised.value).startswith(
        "joint 'elbow' (of body 'forearm') has a non-finite frame in its parent body (the "
        "body's pos/quat): ["
    )


def test_a_non_finite_initial_state_names_the_joint_coordinate_in_training_and_check_env():
    import math

    from pathgrad.core.env_contract import EnvContractError, check_first_result
    from pathgrad.testing import check_env

    class NanStart(NewtonReacher):
        def _sample_initial_state(self, num):
            state = super()._sample_initial_state(num)
            joint_q = state["joint_q"].clone()
            joint_q[1, 1] = math.nan
            return {**state, "joint_q": joint_q}

    env = NanStart(2, capture=False)
    expected = (
        "state['joint_q']: not finite (nan) in row 1, entry 1 (coordinate of joint 'elbow'); "
        "1 of 2 rows have such entries: the initial state must be finite"
    )
    with pytest.raises(EnvContractError) as raised:
        check_first_result(env, "reset", env.reset(seed=0))
    assert str(raised.value) == f"NanStart.reset() broke the env contract: {expected}."
    results = check_env(env, gradients=False, max_rollout_steps=2)
    assert not results["contract"].passed and expected in str(results["contract"])
