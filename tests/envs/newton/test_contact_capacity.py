"""A contact buffer too small for the robot is named once, with the setting that fixes it;
``pathgrad check-env`` fails its rollout on it."""

from __future__ import annotations

import warnings

import pytest
import torch

pytest.importorskip("newton")

from pathgrad.envs.newton import NewtonEnv  # noqa: E402
from pathgrad.testing import check_env  # noqa: E402

# A box on a vertical slider, resting on the ground: a box on a plane makes 4 contacts.
BOX = """<mujoco><worldbody>
  <body name="block" pos="0 0 0.099">
    <joint name="lift" type="slide" axis="0 0 1"/>
    <geom type="box" size="0.1 0.1 0.1" mass="1"/>
  </body>
</worldbody></mujoco>"""


class Block(NewtonEnv):
    def _reward(self, state, action, next_state):
        return -next_state["joint_q"].square().sum(-1)


@pytest.fixture
def box(tmp_path):
    path = tmp_path / "box.xml"
    path.write_text(BOX)
    return path


def test_an_overflowing_contact_buffer_is_warned_once_naming_the_setting(box):
    env = Block(2, model_file=box, contacts=True, contacts_per_shape_pair=1)
    env.reset(seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(300):  # checked after the first step, then every 256
            env.step(torch.zeros(2, env.action_dim))
    (warning,) = [w for w in caught if "contacts_per_shape_pair" in str(w.message)]
    message = str(warning.message)
    assert message.startswith("Block: contacts: a substep found 8 contacts but the buffer holds 2")
    assert "Set contacts_per_shape_pair to at least 4" in message


def test_check_env_fails_the_rollout_on_dropped_contacts_and_passes_with_room(box):
    small = check_env(Block(2, model_file=box, contacts=True, contacts_per_shape_pair=1),
                      gradients=False, max_rollout_steps=20)  # fmt: skip
    assert not small.passed
    (failure,) = small["rollout"].failures
    assert "Set contacts_per_shape_pair to at least 4" in failure
    roomy = Block(2, model_file=box, contacts=True, contacts_per_shape_pair=4)
    assert check_env(roomy, gradients=False, max_rollout_steps=20).passed
    assert roomy.simulation_problems() == []


def test_contacts_per_shape_pair_must_be_a_positive_integer(box):
    for bad in (0, -2, 1.5):
        with pytest.raises(ValueError, match="contacts_per_shape_pair must be a positive integer"):
            Block(1, model_file=box, contacts=True, contacts_per_shape_pair=bad)
