"""An MJCF file's <keyframe> as where resets start (mjcf_keyframes), MuJoCo the oracle."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("newton")
mujoco = pytest.importorskip("mujoco")

from helpers import file_probe, newton_bodies  # noqa: E402

# A free body carrying a two-joint arm; "home" bends the arm and lifts the body, "moving"
# gives only velocities (its qpos is qpos0).
ARM = """<mujoco>
  <worldbody>
    <body name="base" pos="0 0 1"><freejoint name="root"/><geom type="box" size="0.1 0.1 0.1"/>
      <body name="upper" pos="0.1 0 0"><joint name="shoulder" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
        <body name="lower" pos="0.3 0 0"><joint name="elbow" type="hinge" axis="0 1 0"/>
          <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02"/></body></body></body>
  </worldbody>
  <keyframe>
    <key name="home" qpos="0.2 0 1.3 0.9238795 0 0.3826834 0 0.6 -1.1"/>
    <key name="moving" qvel="0.1 0 0 0 0 0.5 1.0 -2.0"/>
  </keyframe>
</mujoco>"""


def test_resets_start_at_the_files_key(tmp_path):
    path = tmp_path / "arm.xml"
    path.write_text(ARM)
    model = mujoco.MjModel.from_xml_path(str(path))
    data = mujoco.MjData(model)
    for key in ("home", 1):
        env = file_probe(path, num_envs=2, keyframe=key)
        env.reset(seed=0)
        state = env.state
        mujoco.mj_resetDataKeyframe(model, data, model.key(key).id)
        mujoco.mj_kinematics(model, data)
        qpos, qvel = env.mujoco_from_joint_state(state["joint_q"], state["joint_qd"])
        np.testing.assert_allclose(qpos.numpy(), np.tile(data.qpos, (2, 1)), atol=1e-6)
        np.testing.assert_allclose(qvel.numpy(), np.tile(data.qvel, (2, 1)), atol=1e-6)
        positions, _ = newton_bodies(env, state["joint_q"], state["joint_qd"])
        np.testing.assert_allclose(positions[:3], data.xpos[1:], atol=1e-5)
    unkeyed = file_probe(path)  # without a key: qpos0, the arm straight at 1 m
    unkeyed.reset(seed=0)
    assert torch.allclose(unkeyed.mujoco_from_joint_state(
        unkeyed.state["joint_q"], unkeyed.state["joint_qd"])[0][0].double(),
        torch.tensor(model.qpos0), atol=1e-6)  # fmt: skip


@pytest.mark.parametrize("key, message", [
    ("stand", r"keyframe 'stand': model_file 'arm.xml' has home, moving"),
    (5, r"keyframe 5: model_file 'arm.xml' has home, moving"),
])  # fmt: skip
def test_a_key_the_file_does_not_have_is_named_with_those_it_has(tmp_path, key, message):
    path = tmp_path / "arm.xml"
    path.write_text(ARM)
    with pytest.raises(ValueError, match=message):
        file_probe(path, keyframe=key)
