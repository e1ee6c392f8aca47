"""ANYmal C's model file (``robots/assets/anymal_c.xml``, pathgrad's own, from published
facts) means what MuJoCo reads in it, with legged_gym's joint conventions."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("newton", reason="the Newton backend needs pathgrad[newton]")

import pathgrad.envs.newton.robots as robots  # noqa: E402
from pathgrad.envs.newton import NewtonEnv  # noqa: E402

FILE = Path(robots.__file__).parent / "assets" / "anymal_c.xml"
LEGS = ("LF", "RF", "LH", "RH")
STANCE = [0.0, 0.4, -0.8, 0.0, 0.4, -0.8, 0.0, -0.4, 0.8, 0.0, -0.4, 0.8]  # legged_gym's


class Standing(NewtonEnv):
    def _reward(self, state, action, next_state):
        return next_state["joint_q"][:, 2]


@pytest.fixture(scope="module")
def env() -> Standing:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Standing(2, model_file=str(FILE), contacts=True, substeps=4)


def test_forward_kinematics_and_masses_are_mujocos(env):
    mujoco = pytest.importorskip("mujoco")
    model = mujoco.MjModel.from_xml_path(str(FILE))
    data = mujoco.MjData(model)
    generator = torch.Generator().manual_seed(0)
    quat = torch.nn.functional.normalize(torch.randn(2, 4, generator=generator), dim=-1)
    joints = 2.0 * torch.rand(2, 12, generator=generator) - 1.0
    qpos = torch.cat([torch.tensor([[0.1, -0.2, 0.6]] * 2), quat, joints], -1)
    joint_q, joint_qd = env.joint_state_from_mujoco(qpos, torch.zeros(2, 18))
    positions = env.body_poses({"joint_q": joint_q, "joint_qd": joint_qd})[0]
    names = [model.body(i).name for i in range(1, model.nbody)]
    for row in range(2):
        data.qpos[:] = qpos[row].double().numpy()
        mujoco.mj_kinematics(model, data)
        expected = np.stack([data.body(name).xpos for name in names])
        got = positions[row, [env.body_index(name) for name in names]].numpy()
        np.testing.assert_allclose(got, expected, atol=1e-4)
    assert float(model.body_mass.sum()) == pytest.approx(44.965, abs=1e-3)


def test_the_legs_follow_legged_gyms_convention(env):
    """At zero angles the feet are 0.6 m below the base, at (+-0.448, +-0.301); in
    legged_gym's default stance the front knees point back and the hind knees forward,
    and a positive HAA turns every foot toward +y."""
    mujoco = pytest.importorskip("mujoco")
    model = mujoco.MjModel.from_xml_path(str(FILE))
    data = mujoco.MjData(model)
    mujoco.mj_kinematics(model, data)
    base = data.body("base").xpos.copy()
    for leg, (sx, sy) in zip(LEGS, ((1, 1), (1, -1), (-1, 1), (-1, -1)), strict=True):
        np.testing.assert_allclose(data.geom(f"{leg}_FOOT").xpos - base,
                                   [0.4477 * sx, 0.3012 * sy, -0.6005], atol=2e-4)  # fmt: skip
    data.qpos[7:] = STANCE
    mujoco.mj_kinematics(model, data)
    for leg in LEGS:
        hip = data.body(f"{leg}_THIGH").xpos[0]
        knee = data.body(f"{leg}_SHANK").xpos[0]
        assert (knee - hip) * (1 if leg.endswith("F") else -1) < -0.1  # knees point inward
    data.qpos[7:] = 0.0
    mujoco.mj_kinematics(model, data)
    straight = {leg: data.geom(f"{leg}_FOOT").xpos[1] for leg in LEGS}
    data.qpos[7::3] = 0.3  # every HAA
    mujoco.mj_kinematics(model, data)
    for leg in LEGS:
        assert data.geom(f"{leg}_FOOT").xpos[1] - straight[leg] > 0.1
