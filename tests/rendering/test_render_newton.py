"""pathgrad render for any Newton robot (drawn from its bodies) and an env's own drawing hook."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

newton = pytest.importorskip("newton", reason="the Newton backend needs pathgrad[newton]")

import warp as wp  # noqa: E402

from helpers import ROOT  # noqa: E402
from pathgrad.cli import main  # noqa: E402
from pathgrad.env import register_learning_env  # noqa: E402
from pathgrad.envs import Pendulum  # noqa: E402
from pathgrad.envs.newton import NewtonEnv, NewtonReacher  # noqa: E402
from pathgrad.rendering import Frame, record_episodes, write_animation  # noqa: E402
from pathgrad.rendering.drawings import DRAWINGS, DrawingScene, drawing_for, scene_for  # noqa: E402
from pathgrad.rendering.newton_bodies import (  # noqa: E402
    NewtonBodiesScene,
    convex_hull,
    shape_points,
)

ARM = ROOT / "src/pathgrad/envs/newton/robots/assets/planar_arm.xml"
QUICK = ["trainer.total_updates=1", "env.num_envs=4", "eval.frequency_steps=0",
         "logging.tensorboard=false", "trainer.update_horizon=null"]  # fmt: skip


class UserArm(NewtonReacher):
    """A user's robot: the built-in reacher under a new name (its drawing does not apply)."""


class PlainArm(NewtonEnv):
    """A NewtonEnv straight from the shipped MJCF, on the ground (contacts)."""

    default_model_file = str(ARM)

    def __init__(self, num_envs, device="cpu", **kwargs):
        super().__init__(num_envs, device, contacts=True, **kwargs)

    def _reward(self, state, action, next_state):
        return -next_state["joint_q"].square().sum(-1)


class SlidingBox(NewtonEnv):
    """A free box built by hand (``build_world``): a robot that travels."""

    def build_world(self, builder):
        body = builder.add_body(label="box")
        builder.add_shape_box(body, hx=0.1, hy=0.2, hz=0.05)

    def _reward(self, state, action, next_state):
        return next_state["joint_q"][:, 0]


class DrawnPendulum(Pendulum):
    """A torch env with its own drawing: the hook wins over the built-in Pendulum drawing."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def draw_frame(self, state, history, axes):
        self.calls.append((float(state["th"]), len(history)))
        angle = float(state["th"])
        axes.plot([0, np.sin(angle)], [0, np.cos(angle)], color="tab:purple", linewidth=4)
        axes.set_xlim(-1.2, 1.2)
        axes.set_ylim(-1.2, 1.2)


class DrawnPendulum3d(DrawnPendulum):
    draw_frame_projection = "3d"

    def draw_frame(self, state, history, axes):
        self.calls.append(axes.name)
        axes.plot([0, 1], [0, 0], [0, float(state["th"])], color="tab:purple")


def _steady(env):
    """A policy of constant torques (a curved, repeatable path)."""
    return lambda observation: torch.tensor([[0.6, -0.8]]).expand(observation.shape[0], -1)


def _eval_fk_positions(env, joint_q):
    """Body origins ``[bodies, 3]`` of world 0 by newton.eval_fk, computed independently."""
    model = env.simulation.model
    q = model.joint_q.numpy().copy()
    q[: env.coordinates] = joint_q.numpy()
    state = model.state()
    newton.eval_fk(model, wp.array(q, dtype=wp.float32), model.joint_qd, state)
    return state.body_q.numpy()[: model.body_count // env.num_envs, :3]


def test_a_user_newton_env_is_drawn_from_its_bodies_posed_by_forward_kinematics():
    env = UserArm(1, seed=0)
    assert drawing_for(NewtonReacher(1)) is DRAWINGS["NewtonReacher"]  # the built-in keeps its own
    assert drawing_for(env) is None
    frames = record_episodes(env, _steady(env), episodes=1, seed=0, every=20)
    scene = scene_for(env, frames)
    assert isinstance(scene, NewtonBodiesScene)
    side, top = scene.views
    assert (side.dims, top.dims) == ((0, 2), (0, 1))  # Newton's up axis is z
    for index in (0, len(frames) // 2, len(frames) - 1):
        scene.draw(index, f"frame {index}")
        joint_q = frames[index].state["joint_q"]
        expected = _eval_fk_positions(env, joint_q)
        for view in scene.views:
            np.testing.assert_allclose(view.origins.get_xydata(), expected[:, view.dims], atol=1e-5)
        # the forearm starts where the upper arm ends: 0.5 m along the shoulder angle
        shoulder = float(joint_q[0])
        elbow = 0.5 * np.array([np.cos(shoulder), np.sin(shoulder)])
        np.testing.assert_allclose(top.origins.get_xydata()[1], elbow, atol=1e-5)
        # the upper arm's capsule (radius 0.04) outlines the segment from shoulder to elbow
        start, end = top.origins.get_xydata()
        outline = top.shapes[0].get_xy()
        along = np.clip((outline - start) @ (end - start) / np.sum((end - start) ** 2), 0, 1)
        distance = np.linalg.norm(outline - (start + along[:, None] * (end - start)), axis=1)
        assert distance.max() <= 0.04 + 1e-6 and distance.min() > 0.03
        assert np.ptp(outline @ (end - start) / 0.5) > 0.5 + 0.07  # both rounded ends included
    assert scene.caption.get_text() == f"frame {len(frames) - 1}"
    # a fixed camera (the arm does not travel) that holds every frame's bodies
    assert scene._fixed
    for view in scene.views:
        (left, right), (bottom, top_) = view.axes.get_xlim(), view.axes.get_ylim()
        seen = scene.poses[:, :, list(view.dims)].reshape(-1, 2)
        assert (seen[:, 0] > left).all() and (seen[:, 0] < right).all()
        assert (seen[:, 1] > bottom).all() and (seen[:, 1] < top_).all()


class PuckAndMarker(NewtonEnv):
    """A visible marker and a puck whose only shape collides but is hidden, as Newton
    imports an MJCF geom that collides (Gymnasium's pusher object)."""

    def build_world(self, builder):
        hidden = builder.ShapeConfig(is_visible=False)
        puck = builder.add_body(label="puck", xform=wp.transform((0.5, 0.0, 0.0)))
        builder.add_shape_sphere(puck, radius=0.05, cfg=hidden)
        marker = builder.add_body(label="marker")
        builder.add_shape_box(marker, hx=0.1, hy=0.1, hz=0.01)
        builder.add_shape_box(marker, hx=0.02, hy=0.02, hz=0.3, cfg=hidden)

    def _reward(self, state, action, next_state):
        return next_state["joint_q"][:, 0]


def test_a_body_whose_shapes_are_all_hidden_is_drawn_from_its_collision_shapes():
    env = PuckAndMarker(1, seed=0)
    assert int(env.simulation.model.shape_count) == 3
    shapes, _ = NewtonBodiesScene._read_shapes(env.simulation.model, np.array([0, 1]))
    assert sorted(shape.body for shape in shapes) == [0, 1]  # the puck and the marker
    puck = next(shape for shape in shapes if shape.body == 0)
    assert np.ptp(puck.points, axis=0) == pytest.approx([0.1, 0.1, 0.1], abs=0.005)
    marker = next(shape for shape in shapes if shape.body == 1)
    assert np.ptp(marker.points[:, 2]) == pytest.approx(0.02, abs=1e-6)  # not the hidden post


def test_the_ground_of_a_model_with_contacts_is_drawn_in_the_side_view():
    env = PlainArm(2, seed=0)  # two worlds: only world 0's bodies are drawn
    env.reset(seed=0)
    state = {key: value[0].detach().clone() for key, value in env.state.items()}
    frames = [Frame(0, step, 0.0, state, torch.zeros(1)) for step in range(3)]
    scene = scene_for(env, frames)
    assert isinstance(scene, NewtonBodiesScene) and scene._ground == pytest.approx(0.0)
    scene.draw(0, "")
    side, _ = scene.views
    assert len(side.origins.get_xydata()) == 2 and len(side.shapes) == 2
    lines = [line for line in side.axes.lines if line not in scene.animated]
    assert any(np.allclose(line.get_ydata(), 0.0) for line in lines)  # the ground line


def test_pathgrad_render_writes_a_gif_of_a_user_newton_robot(tmp_path, monkeypatch, capsys):
    import pathgrad.env
    from pathgrad.core import env_registry

    pathgrad.env.get_registered_learning_env_names()  # the built-in envs first
    # registered for this test only: other tests (the config reference) list the registry
    monkeypatch.setattr(env_registry, "_REGISTRY", dict(env_registry._REGISTRY))
    monkeypatch.setattr(env_registry, "_DISPLAY_NAMES", dict(env_registry._DISPLAY_NAMES))
    register_learning_env("RenderTestArm", UserArm)
    monkeypatch.chdir(tmp_path)
    config = str(ROOT / "configs/newton_reacher.yaml")
    run = pathgrad.train(config, [*QUICK, "env.name=RenderTestArm"]).run_dir
    assert main(["render", str(run), "-o", "arm.gif", "--every", "20", "--fps", "10"]) == 0
    frames = int(capsys.readouterr().out.split(", ")[-1].split()[0])
    assert frames == 100 // 20 + 1  # steps 0, 20, ..., 80 and the last
    with Image.open(tmp_path / "arm.gif") as image:
        assert image.n_frames == frames
        assert image.size == (900, 500)  # the two views
        image.seek(frames - 1)
        pixels = np.asarray(image.convert("RGB"), dtype=np.int16)
    coloured = np.abs(pixels[..., 0] - pixels[..., 2]) > 60  # the links' blue and orange
    assert coloured.sum() > 200


def test_a_user_newton_robot_renders_to_mp4(tmp_path):
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    env = UserArm(1, seed=0)
    frames = record_episodes(env, _steady(env), episodes=1, seed=0, every=25)
    output = write_animation(env, frames, tmp_path / "arm.mp4", title="arm", fps=10)
    counted, _ = imageio_ffmpeg.count_frames_and_secs(str(output))
    assert counted == len(frames)


def test_a_torch_env_s_draw_frame_hook_draws_every_frame(tmp_path):
    env = DrawnPendulum(1)
    assert drawing_for(env) is not DRAWINGS["Pendulum"]
    frames = record_episodes(env, lambda obs: torch.zeros(obs.shape[0], 1), 1, seed=0, every=50)
    output = write_animation(env, frames, tmp_path / "hooked.gif", title="hook", fps=10)
    assert len(env.calls) == len(frames) == 200 // 50 + 1
    assert [calls for _, calls in env.calls] == [1, 2, 3, 4, 5]  # the episode's states so far
    assert [angle for angle, _ in env.calls] == [float(f.state["th"]) for f in frames]
    with Image.open(output) as image:
        assert image.n_frames == len(frames)
        pixels = np.asarray(image.convert("RGB"), dtype=np.int16)
    purple = (pixels[..., 2] - pixels[..., 1] > 60) & (pixels[..., 0] - pixels[..., 1] > 30)
    assert purple.sum() > 100  # the hook's purple pendulum, not the built-in red one


def test_a_draw_frame_hook_can_ask_for_3d_axes(tmp_path):
    env = DrawnPendulum3d(1)
    frames = record_episodes(env, lambda obs: torch.zeros(obs.shape[0], 1), 1, seed=0, every=100)
    scene = scene_for(env, frames)
    assert isinstance(scene, DrawingScene) and scene.axes.name == "3d"
    write_animation(env, frames, tmp_path / "hooked3d.gif", title="hook")
    assert env.calls[-len(frames) :] == ["3d"] * len(frames)


def test_the_camera_follows_a_robot_that_travels_further_than_its_size():
    env = SlidingBox(1)
    env.reset(seed=0)
    frames = []
    for step in range(4):  # 2 m a frame along x, turned a quarter about z at the end
        state = {key: value[0].detach().clone() for key, value in env.state.items()}
        state["joint_q"][:3] = torch.tensor([2.0 * step, 0.0, 0.5])
        if step == 3:
            state["joint_q"][3:] = torch.tensor([0.0, 0.0, np.sin(np.pi / 4), np.cos(np.pi / 4)])
        frames.append(Frame(0, step, 0.0, state, torch.zeros(1)))
    scene = scene_for(env, frames)
    assert not scene._fixed
    side, top = scene.views
    centres = []
    for index in range(4):
        scene.draw(index, "")
        centres.append(np.mean(top.axes.get_xlim()))
        corners = np.abs(top.shapes[0].get_xy()[:-1] - [2.0 * index, 0.0])  # closed: [-1] = [0]
        half = [0.2, 0.1] if index == 3 else [0.1, 0.2]  # the box's outline, turned at the end
        assert len(corners) == 4 and np.allclose(corners, half, atol=1e-5)
    np.testing.assert_allclose(centres, [0.0, 2.0, 4.0, 6.0], atol=1e-5)
    np.testing.assert_allclose(top.trail.get_xydata()[:, 0], [0.0, 2.0, 4.0, 6.0], atol=1e-5)
    assert len(top.body_axes.get_segments()) == 0  # a body with a shape shows no frame axes


def test_the_semi_implicit_solver_s_carried_body_poses_are_drawn():
    env = UserArm(1, seed=0, solver="semi_implicit")
    env.reset(seed=1)
    state = {key: value[0].detach().clone() for key, value in env.state.items()}
    assert "body_q" in state
    scene = scene_for(env, [Frame(0, 0, 0.0, state, torch.zeros(1))])
    scene.draw(0, "")
    expected = _eval_fk_positions(env, state["joint_q"])
    np.testing.assert_allclose(scene.views[1].origins.get_xydata(), expected[:, :2], atol=1e-5)


def test_shape_outlines_follow_newton_s_conventions():
    from pathgrad.rendering import newton_bodies

    for name in ("PLANE", "SPHERE", "CAPSULE", "ELLIPSOID", "CYLINDER", "BOX", "MESH", "CONE"):
        assert getattr(newton_bodies, name) == int(getattr(newton.GeoType, name))
    assert newton_bodies.SITE_FLAG == int(newton.ShapeFlags.SITE)
    assert newton_bodies.VISIBLE_FLAG == int(newton.ShapeFlags.VISIBLE)
    box = shape_points(int(newton.GeoType.BOX), np.array([0.1, 0.2, 0.3]))
    hull = convex_hull(box[:, :2])
    assert len(hull) == 4 and np.allclose(np.abs(hull), [0.1, 0.2])
    capsule = shape_points(int(newton.GeoType.CAPSULE), np.array([0.05, 0.2, 0.0]))
    assert capsule[:, 2].max() == pytest.approx(0.25, abs=2e-3)  # along local z, with its caps
    assert np.abs(capsule[:, :2]).max() <= 0.05 + 1e-9
    assert shape_points(int(newton.GeoType.PLANE), np.ones(3)) is None  # drawn as the ground
