"""A file's contacts as soft as MuJoCo makes them (``contact_softness="mujoco"``, the default
for a file): each body's geom ``solref`` on its effective mass; ``mujoco`` is the oracle."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("newton")

from pathgrad.envs.newton import NewtonEnv  # noqa: E402

# A ball over a floor, no gravity: only the contact acts.
FILE = """<mujoco>
  <option timestep="0.002" gravity="0 0 0"/>
  <default><default class="soft"><geom solref="{solref}"/></default></default>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="ball" pos="0 0 0.3" childclass="soft">
      <freejoint name="free"/>
      <geom type="sphere" size="0.05" mass="{mass}"/>
    </body>
  </worldbody>
</mujoco>"""


class Ball(NewtonEnv):
    observation_dim = 13

    def _reward(self, state, action, next_state):
        return torch.zeros(self.num_envs)


def ball(tmp_path, solref="0.02 1", mass=2.0, **kwargs):
    path = tmp_path / "ball.xml"
    path.write_text(FILE.format(solref=solref, mass=mass))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = Ball(1, model_file=str(path), contacts=True, capture=False, **kwargs)
    return path, env


def shape_constants(env):
    model = env.simulation.model
    bodies = model.shape_body.numpy()
    ke, kd = model.shape_material_ke.numpy(), model.shape_material_kd.numpy()
    return ke[bodies >= 0], kd[bodies >= 0], ke[bodies < 0], kd[bodies < 0]


def test_each_body_s_contact_is_its_solref_on_its_effective_mass(tmp_path):
    _, env = ball(tmp_path, solref="0.05 0.5", mass=2.0)  # a file's default
    assert env.contact_softness == "mujoco"
    ke, kd, static_ke, static_kd = shape_constants(env)
    # tc 0.05, ratio 0.5: 1600 /s^2 and 40 /s on 2 kg; twice on the ball, 0 on the floor, so
    # that Newton's average of the two shapes is the ball's own
    np.testing.assert_allclose(ke, [2 * 1600.0 * 2.0], rtol=1e-4)
    np.testing.assert_allclose(kd, [2 * 40.0 * 2.0], rtol=1e-4)
    assert np.all(static_ke == 0.0) and np.all(static_kd == 0.0)
    # Newton's constants, and constants the user gives, stay
    _, kept = ball(tmp_path, contact_softness="newton")
    assert kept.contact_softness == "newton"
    assert shape_constants(kept)[0][0] == pytest.approx(2500.0)
    _, given = ball(tmp_path, contact_softness="mujoco", contact_ke=1234.0)
    assert shape_constants(given)[0][0] == pytest.approx(1234.0)
    assert shape_constants(given)[1][0] == pytest.approx(2 * 100.0 * 2.0, rel=1e-4)


@pytest.mark.parametrize("contact_softness", ["mujoco", "newton"])
def test_a_ball_landing_on_the_floor_sinks_as_in_mujoco(tmp_path, contact_softness):
    mujoco = pytest.importorskip("mujoco")
    path, env = ball(tmp_path, contact_softness=contact_softness, substeps=1)
    model = mujoco.MjModel.from_xml_path(str(path))
    data = mujoco.MjData(model)
    data.qpos[:3], data.qvel[:3] = [0.0, 0.0, 0.05], [0.0, 0.0, -0.2]  # touching, falling
    env.reset(seed=0)
    qpos = torch.tensor([[0.0, 0.0, 0.05, 1.0, 0.0, 0.0, 0.0]])
    qvel = torch.tensor([[0.0, 0.0, -0.2, 0.0, 0.0, 0.0]])
    joint_q, joint_qd = env.joint_state_from_mujoco(qpos, qvel)
    env.state = {**env.state, "joint_q": joint_q, "joint_qd": joint_qd}
    ours, theirs = [], []
    while True:  # until MuJoCo's ball stops sinking (Newton's contact damps approach only:
        mujoco.mj_step(model, data)  # its spring then returns what it stored, MuJoCo's not)
        if data.qvel[2] >= 0.0:
            break
        env.step(torch.zeros(1, env.action_dim))
        theirs.append(data.qpos[2] - 0.05)
        mine, _ = env.mujoco_from_joint_state(env.state["joint_q"], env.state["joint_qd"])
        ours.append(float(mine[0, 2]) - 0.05)
    deepest = -min(theirs)
    assert len(theirs) >= 8 and deepest > 1e-3  # 16+ ms, over a millimetre
    difference = np.abs(np.array(ours) - np.array(theirs)).max()
    if contact_softness == "mujoco":
        assert difference < 0.03 * deepest, (ours, theirs)  # 1% measured
    else:  # Newton's constants (2500 N/m, 100 N s/m on 2 kg) stop it sooner
        assert difference > 0.3 * deepest, (ours, theirs)  # 51% measured


def test_softer_contacts_allow_longer_substeps(tmp_path):
    # Newton's kd 100 on a 20 g ball asks for 0.4 ms; MuJoCo's meaning for 10 ms at any mass
    path = tmp_path / "light.xml"
    path.write_text(FILE.format(solref="0.02 1", mass=0.02).replace("0.002", "0.01"))
    counts = {}
    for softness in ("mujoco", "newton"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = Ball(1, model_file=str(path), contacts=True, capture=False,
                       contact_softness=softness, substeps="auto")  # fmt: skip
        counts[softness] = env.simulation_options["substeps"]
    assert counts["mujoco"] <= 2 < 10 < counts["newton"], counts


def test_contact_softness_names_what_it_takes(tmp_path):
    with pytest.raises(ValueError, match="contact_softness must be 'mujoco' or 'newton'"):
        ball(tmp_path, contact_softness="soft")
    path = tmp_path / "bad.xml"
    path.write_text(FILE.format(solref="0.02", mass=1.0))
    with pytest.raises(ValueError, match="body 'ball': solref='0.02' is not two numbers"):
        Ball(1, model_file=str(path), contacts=True, capture=False, contact_softness="mujoco")


def test_without_a_file_s_meaning_mujoco_s_softness_is_refused(tmp_path):
    path = tmp_path / "ball.xml"
    path.write_text(FILE.format(solref="0.02 1", mass=1.0))

    class Imported(Ball):
        mujoco_meaning = False

    with pytest.raises(ValueError, match="contact_softness='mujoco' needs an MJCF model_file"):
        Imported(1, model_file=str(path), contacts=True, capture=False,
                 contact_softness="mujoco")  # fmt: skip


def test_gradients_through_mujoco_s_contact_softness_match_differences(tmp_path):
    from pathgrad.testing.gradients import check_env_gradients

    class Landing(Ball):  # a reward with a path to the state: the ball's height
        def _reward(self, state, action, next_state):
            return next_state["joint_q"][:, 2]

    # the ball 2 mm into the floor and sinking for the whole chain: the contact acts throughout
    path, _ = ball(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = Landing(1, model_file=str(path), contacts=True, capture=False, substeps=2,
                      contact_softness="mujoco", max_episode_steps=50)  # fmt: skip
    qpos = torch.tensor([[0.0, 0.0, 0.048, 1.0, 0.0, 0.0, 0.0]])
    qvel = torch.tensor([[0.0, 0.0, -0.3, 0.0, 0.0, 0.0]])
    joint_q, joint_qd = env.joint_state_from_mujoco(qpos, qvel)
    start = {"joint_q": joint_q, "joint_qd": joint_qd}
    assert check_env_gradients(env, 3, initial_state=start, reset_at_step=None)


def test_of_two_bodies_that_can_touch_the_heavier_takes_half_their_reduced_mass(tmp_path):
    # a 4 kg box and a 1 kg ball, both free: their relative motion's mass is 0.8 kg, so the
    # box's shapes carry 0.4 kg (the pair: 1.4 kg, not 5) and the ball keeps its own 1 kg
    path = tmp_path / "pair.xml"
    path.write_text(FILE.format(solref="0.02 1", mass=1.0).replace(
        "  </worldbody>",
        '    <body name="box" pos="0.5 0 0.3"><freejoint/>'
        '<geom type="box" size="0.1 0.1 0.1" mass="4"/></body>\n  </worldbody>',
    ))  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = Ball(1, model_file=str(path), contacts=True, capture=False)
    model = env.simulation.model
    bodies, ke = model.shape_body.numpy(), model.shape_material_ke.numpy()
    names = [label.rsplit("/", 1)[-1] for label in env.body_labels]
    by_body = {names[body]: float(ke[shape]) for shape, body in enumerate(bodies) if body >= 0}
    assert by_body["ball"] == pytest.approx(2 * 2500.0 * 1.0, rel=1e-4)
    assert by_body["box"] == pytest.approx(2 * 2500.0 * 0.4, rel=1e-4)


def test_a_body_that_cannot_move_along_the_normal_takes_the_mass_it_moves(tmp_path):
    # a 0.5 kg puck on two slides over the floor (an object on a table, a planar arm): its
    # least effective mass over the directions it moves in, not Newton's constants
    path = tmp_path / "puck.xml"
    path.write_text(FILE.format(solref="0.02 1", mass=0.5).replace(
        '<freejoint name="free"/>',
        '<joint name="x" type="slide" axis="1 0 0"/><joint name="y" type="slide" axis="0 1 0"/>',
    ).replace('pos="0 0 0.3"', 'pos="0 0 0.05"'))  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = Ball(1, model_file=str(path), contacts=True, capture=False)
    ke, kd, _, _ = shape_constants(env)
    np.testing.assert_allclose(ke, [2 * 2500.0 * 0.5], rtol=1e-4)
    np.testing.assert_allclose(kd, [2 * 100.0 * 0.5], rtol=1e-4)
