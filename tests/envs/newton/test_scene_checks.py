"""Where a user's robot starts and what it stands on: a start inside the ground, a floor
that nothing collides with, a free joint's rotation that is no quaternion, a free joint
among the actuated ones, and a joint-limit spring too stiff for the substep."""

from __future__ import annotations

import warnings

import pytest
import torch

pytest.importorskip("newton")

from pathgrad.core.env_contract import EnvContractError  # noqa: E402
from pathgrad.envs.newton import NewtonEnv  # noqa: E402

TORSO = """<mujoco><worldbody>{floor}
  <body name="torso" pos="0 0 {height}"><freejoint name="root"/>
    <geom type="box" size="0.2 0.1 0.05" mass="2"/>
    <body name="leg" pos="0.2 0 0"><joint name="hip" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.2" size="0.03" mass="0.3"/></body>
  </body></worldbody></mujoco>"""


class Walker(NewtonEnv):
    def _reward(self, state, action, next_state):
        return next_state["joint_q"][:, 2]


def walker(tmp_path, *, height=0.3, floor="", **kwargs):
    path = tmp_path / f"walker_{height}_{bool(floor)}.xml"
    path.write_text(TORSO.format(height=height, floor=floor))
    return Walker(2, model_file=path, capture=False, armature=0.05, **kwargs)


def messages(caught) -> list[str]:
    return [str(w.message) for w in caught if str(w.message).startswith("Walker: ")
            and "substeps auto" not in str(w.message)]  # fmt: skip


def test_a_robot_that_starts_inside_the_ground_is_named_with_its_deepest_shape(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = walker(tmp_path, height=0.0, contacts=True)
    (message,) = messages(caught)
    assert message.startswith(
        "Walker: body 'leg' starts 0.23 m inside the ground (its capsule's lowest point at z = "
        "-0.23 m, at the model's pose)"
    )
    assert "Start it higher" in message
    assert "starts 0.23 m inside the ground" in env.instability_hint()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        walker(tmp_path, height=0.3, contacts=True)  # its lowest point at 0.07 m
    assert messages(caught) == []


def test_a_floor_in_the_file_with_contacts_off_is_named(tmp_path):
    floor = '<geom name="floor" type="plane" size="10 10 0.1"/>'
    with pytest.warns(UserWarning, match="the model has a plane .* but contacts=False"):
        walker(tmp_path, floor=floor)


def test_a_free_joint_rotation_that_is_no_unit_quaternion_is_named(tmp_path):
    class Unrotated(Walker):
        def _sample_initial_state(self, num):
            joint_q = torch.zeros(num, 8)
            joint_q[:, 2] = 0.3  # the quaternion forgotten: zeros
            return {"joint_q": joint_q, "joint_qd": torch.zeros(num, 7)}

    path = tmp_path / "walker.xml"
    path.write_text(TORSO.format(height=0.3, floor=""))
    with pytest.raises(EnvContractError) as raised:
        Unrotated(2, model_file=path, capture=False)
    assert str(raised.value) == (
        "Unrotated._sample_initial_state: free joint 'root' has a rotation (joint_q[3:7], x y "
        "z w) of norm 0 in row 0; it must be a unit quaternion (identity: 0, 0, 0, 1; note "
        "Newton's order x y z w, not MuJoCo's w x y z)."
    )


def test_mujoco_s_identity_quaternion_is_warned_about_as_upside_down(tmp_path):
    class MujocoOrder(Walker):
        def __init__(self, *args, turn: float = 1.0, **kwargs):
            self.turn = turn
            super().__init__(*args, **kwargs)

        def _sample_initial_state(self, num):
            joint_q = torch.zeros(num, 8)
            joint_q[:, 2] = 0.3
            joint_q[:, 3] = self.turn  # w x y z's identity, read as x y z w
            if self.turn != 1.0:
                joint_q[:, 6] = (1 - self.turn**2) ** 0.5
            return {"joint_q": joint_q, "joint_qd": torch.zeros(num, 7)}

    path = tmp_path / "walker.xml"
    path.write_text(TORSO.format(height=0.3, floor=""))
    with pytest.warns(UserWarning) as caught:
        MujocoOrder(2, model_file=path, capture=False)
    (message,) = [str(w.message) for w in caught if "half a turn" in str(w.message)]
    assert message == (
        "MujocoOrder._sample_initial_state: free joint 'root' starts turned half a turn about x "
        "in every row (joint_q[3:7] = 1, 0, 0, 0, x y z w): upside down. If that is MuJoCo's "
        "identity (w x y z), Newton's is 0, 0, 0, 1."
    )
    with warnings.catch_warnings(record=True) as caught:  # a unit quaternion with w: quiet
        warnings.simplefilter("always")
        MujocoOrder(2, model_file=path, capture=False, turn=0.6)
    assert not [w for w in caught if "half a turn" in str(w.message)]


def test_a_free_joint_among_the_actuated_ones_is_warned_about(tmp_path):
    with pytest.warns(UserWarning, match="actuated joint 'root' is a free joint: its 6 actions"):
        env = walker(tmp_path, actuated_joints=["root", "hip"])
    assert env.action_dim == 7


def test_the_instability_hint_names_a_limit_spring_too_stiff_for_the_substep(tmp_path):
    arm = tmp_path / "arm.urdf"
    arm.write_text(
        '<robot name="arm"><link name="base"/><link name="link"><inertial><origin '
        'xyz="0.25 0 0"/><mass value="0.5"/><inertia ixx="0.001" iyy="0.01" izz="0.01" '
        'ixy="0" ixz="0" iyz="0"/></inertial></link><joint name="yaw" type="revolute">'
        '<parent link="base"/><child link="link"/><axis xyz="0 0 1"/><limit lower="-1.57" '
        'upper="1.57" effort="5" velocity="10"/></joint></robot>'
    )
    env = Walker(1, model_file=arm, substeps=4, capture=False)
    assert (
        "joint 'yaw' has a limit of stiffness 10000 and damping 10 (limit_ke, limit_kd; inertia "
        "0.0412 with armature at the model's pose), stable only while substep < 0.00318 s "
        "(0.00417 s is above it)"
    ) in env.instability_hint()  # a hit limit grows
    calm = Walker(1, model_file=arm, substeps=8, capture=False)
    assert "stable only while substep < 0.00318 s (0.00208 s is below it)" in (
        calm.instability_hint()
    )


@pytest.mark.parametrize(
    ("stiffness", "damping", "mass"), [(1e4, 10.0, 0.0138), (1e4, 0.0, 0.05), (0.0, 100.0, 0.2)]
)
def test_the_stable_substep_of_a_spring_damper_is_that_of_semi_implicit_euler(
    stiffness, damping, mass
):
    """Velocities then positions, as Featherstone: bounded just below the bound, growing
    just above it (the spring and damper each within their own bound in the first case)."""
    from pathgrad.envs.newton.engine.stability import _stable_substep

    bound = _stable_substep(stiffness, damping, mass)

    def largest(dt: float) -> float:
        x, v, peak = 1.0, 1.0, 0.0
        for _ in range(2000):
            v += dt * (-stiffness * x - damping * v) / mass
            x += dt * v
            peak = max(peak, abs(x), abs(v) * dt)
        return peak

    assert largest(0.98 * bound) < 100.0
    assert largest(1.02 * bound) > 1e6


def test_the_instability_hint_names_the_ground_contact_with_its_effective_mass(tmp_path):
    env = walker(tmp_path, height=0.3, contacts=True, substeps=2, contact_softness="newton")
    hint = env.instability_hint()
    assert "ground contact stiffness 2500 and damping 100 (ke, kd of the shapes of body " in hint
    assert "kg along the normal at its centre at the model's pose) are stable only while" in hint


def test_a_free_body_away_from_the_origin_meets_its_own_mass(tmp_path):
    """The stiff terms read the mass matrix in ``joint_qd``'s coordinates (centre-of-mass
    velocity), not Featherstone's spatial ones: a 1 kg box 0.7 m off the origin's axis
    meets 1 kg along the ground's normal (read against the spatial matrix it met 3 g)."""
    from pathgrad.envs.newton.engine.stability import (
        _mass_matrix_at_rest,
        _velocity_jacobians,
        stiff_terms,
    )

    box = tmp_path / "box.xml"
    box.write_text('<mujoco><worldbody><body name="box" pos="0.5 0.5 1"><freejoint/>'
                   '<geom type="box" size="0.05 0.05 0.05" mass="1"/></body></worldbody>'
                   "</mujoco>")  # fmt: skip
    env = Walker(1, model_file=box, contacts=True, capture=False, contact_softness="newton")
    matrix = _mass_matrix_at_rest(env, _velocity_jacobians(env))
    inertia = 1.0 * (0.1**2 + 0.1**2) / 12.0
    assert matrix == pytest.approx(torch.diag(torch.tensor([1.0] * 3 + [inertia] * 3)).numpy(),
                                   abs=1e-6)  # fmt: skip
    contact = [text for _, text in stiff_terms(env) if "ground contact" in text]
    assert contact and "effective mass 1 kg along the normal" in contact[0]
    # MuJoCo's softness scales ke, kd with that 1 kg, so the bound is read where a contact
    # meets least: 0.0866 m out (the half diagonal), 1 / (1 + r^2 / I) = 0.182 kg
    soft = Walker(1, model_file=box, contacts=True, capture=False, contact_softness="mujoco")
    contact = [text for _, text in stiff_terms(soft) if "ground contact" in text]
    assert "effective mass 0.182 kg along the normal at the shape's lightest edge" in contact[0]
