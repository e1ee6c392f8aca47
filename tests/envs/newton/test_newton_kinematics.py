"""NewtonEnv body poses (Newton's forward kinematics in torch) against newton.eval_fk and
central differences, a fingertip reward from them, and the armature and damping settings."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

newton = pytest.importorskip("newton", reason="the Newton backend needs pathgrad[newton]")

from pathgrad.envs.newton import (  # noqa: E402
    NewtonAnt,
    NewtonCartPoleSwingUp,
    NewtonEnv,
    NewtonReacher,
)
from pathgrad.envs.newton.robots.reacher import ASSET  # noqa: E402
from pathgrad.testing import check_env_gradients  # noqa: E402

TIP = (0.5, 0.0, 0.0)  # the Reacher's fingertip in the forearm's frame


class Arm(NewtonEnv):
    """NewtonReacher's arm: a spinning start, reward pulling the fingertip to (0.5, 0.5)."""

    default_model_file = str(ASSET)
    implicit_damping = False  # these tests measure Featherstone's explicit damping

    def __init__(self, num_envs: int, held_damping: float = 0.0, **settings):
        self.held_damping = held_damping
        super().__init__(num_envs, actuated_joints=["shoulder", "elbow"], seed=0, **settings)

    def _sample_initial_state(self, num):
        return {
            "joint_q": self._uniform(-1.5, 1.5, num, 2),
            "joint_qd": self._uniform(-2, 2, num, 2),
        }

    def extra_joint_forces(self, state):
        return -self.held_damping * state["joint_qd"] if self.held_damping else None

    def _reward(self, state, action, next_state):
        tip = self.body_point(next_state, "forearm", TIP)
        return -(tip[:, :2] - torch.tensor([0.5, 0.5])).square().sum(-1)


def random_joint_q(env, generator):
    """Random coordinates for every row; free joints get a random unit quaternion (xyzw)."""
    q = env.default_joint_q + torch.rand(env.num_envs, env.coordinates, generator=generator) * 4 - 2
    if isinstance(env, NewtonAnt):
        q[:, 3:7] = torch.nn.functional.normalize(torch.randn(env.num_envs, 4, generator=generator))
    return q


def eval_fk(env, joint_q):
    model = env.simulation.model
    state = model.state()
    state.joint_q.assign(joint_q.reshape(-1).numpy())
    newton.eval_fk(model, state.joint_q, state.joint_qd, state)
    return state.body_q.numpy().reshape(env.num_envs, -1, 7)


ENVS = [
    pytest.param(lambda: NewtonReacher(3), id="reacher"),
    pytest.param(lambda: NewtonCartPoleSwingUp(3), id="cartpole"),
    pytest.param(lambda: NewtonAnt(2), id="ant"),
]


@pytest.mark.parametrize("make", ENVS)
def test_body_poses_match_eval_fk_and_central_differences(make):
    env = make()
    generator = torch.Generator().manual_seed(0)
    joint_q = random_joint_q(env, generator).requires_grad_()
    positions, quaternions = env.body_poses({"joint_q": joint_q})
    poses = torch.cat([positions, quaternions], -1)
    assert positions.shape == (env.num_envs, len(env.body_labels), 3)
    want = eval_fk(env, joint_q.detach())
    got = poses.detach().numpy()
    assert np.allclose(got, want, atol=1e-6)
    few, _ = env.body_poses({"joint_q": joint_q[:1].detach()})  # fewer rows than worlds
    assert torch.equal(few, positions[:1].detach())
    # d(w . poses)/d joint_q against float32 central differences (step 3e-3: error 1e-5)
    weights = torch.randn(got.shape, generator=generator)
    (gradient,) = torch.autograd.grad((weights * poses).sum(), joint_q)
    step, differences = 3e-3, torch.zeros_like(gradient)
    for index in np.ndindex(*joint_q.shape):
        shifted = [joint_q.detach().clone() for _ in range(2)]
        shifted[0][index] += step
        shifted[1][index] -= step
        up, down = (torch.cat(env.body_poses({"joint_q": q}), -1) for q in shifted)
        differences[index] = (weights * (up - down)).sum() / (2 * step)
    assert torch.linalg.vector_norm(gradient - differences) <= 2e-4 * torch.linalg.vector_norm(
        differences
    )


def test_a_fingertip_reward_from_body_point_is_the_reachers_reward_and_gradient():
    env = NewtonReacher(4, seed=0)
    env.reset(seed=1)
    action = torch.randn(4, 2, generator=torch.Generator().manual_seed(2)).requires_grad_()
    _, reward, *_ = env.step(action)
    next_state = env.state
    tip = env.body_point(next_state, "forearm", TIP)
    assert torch.allclose(tip[:, :2], env.fingertip(next_state["joint_q"]), atol=1e-6)
    assert torch.allclose(tip[:, 2], torch.zeros(4))
    ours = -torch.linalg.vector_norm(tip[:, :2] - next_state["target"], dim=-1)
    ours = ours - env.control_cost * action.square().sum(-1)
    assert torch.allclose(ours, reward, atol=1e-6)
    (want,) = torch.autograd.grad(reward.sum(), action, retain_graph=True)
    (got,) = torch.autograd.grad(ours.sum(), action)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-6)
    # and the fingertip's Jacobian equals the float64 planar kinematics' exact one
    q = env.state["joint_q"].detach().requires_grad_()
    q64 = q.detach().double().requires_grad_()
    for k in range(2):
        (got,) = torch.autograd.grad(env.body_point({"joint_q": q}, "forearm", TIP)[:, k].sum(), q)
        (want,) = torch.autograd.grad(env.fingertip(q64)[:, k].sum(), q64)
        assert torch.allclose(got.double(), want, atol=2e-6)
    with pytest.raises(ValueError, match="body 'hand' does not exist; bodies: upper_arm, forearm"):
        env.body_point(next_state, "hand", TIP)
    maximal = NewtonReacher(2, solver="semi_implicit", substeps=4)  # reads its own body_q
    maximal.reset(seed=0)
    tip = maximal.body_point(maximal.state, "forearm", TIP)
    assert torch.allclose(tip[:, :2], maximal.fingertip(maximal.state["joint_q"]), atol=1e-6)


def test_gradients_through_damping_armature_and_body_poses_over_a_reset():
    assert check_env_gradients(Arm(2, armature=0.05, joint_damping=0.5, max_episode_steps=5), 5)


def test_armature_and_damping_reach_the_model_and_bad_values_are_named():
    env = Arm(2, armature=[0.1, 0.2], joint_damping=0.5)
    model = env.simulation.model
    assert np.allclose(model.joint_armature.numpy(), [0.1, 0.2] * 2)
    assert np.allclose(model.joint_damping.numpy(), [0.5] * 4)
    assert np.allclose(Arm(1).simulation.model.joint_damping.numpy(), 0.0)  # the model's own
    for settings, message in [
        ({"armature": -0.1}, "armature must be finite and non-negative, got -0.1"),
        ({"joint_damping": [1.0, math.nan]}, "joint_damping must be finite and non-negative"),
        ({"armature": [0.1, 0.1, 0.1]}, r"armature must be a number or 2 values \(one per DOF\)"),
        (
            {"joint_damping": "high"},
            r"joint_damping must be a number or 2 values \(one per DOF\), got 'high'",
        ),
    ]:
        with pytest.raises(ValueError, match=message):
            Arm(1, **settings)


def test_the_built_in_newton_envs_take_armature_and_damping_from_their_config():
    from pathgrad.runs.config import load_config
    from pathgrad.runs.run import build_env

    for name in ("NewtonReacher", "NewtonCartPoleSwingUp"):
        config = load_config(
            None, [f"env.name={name}", "env.cfg={armature: 0.05, joint_damping: 0.2}"]
        )
        model = build_env(config, 1, 0).simulation.model
        assert np.allclose(model.joint_armature.numpy(), 0.05), name
        assert np.allclose(model.joint_damping.numpy(), 0.2), name


def peak_speed(env, steps=20):
    """Largest |joint_qd| over ``steps`` unforced steps (inf once not finite)."""
    env.reset(seed=0)
    peak = 0.0
    with torch.no_grad():
        for _ in range(steps):
            env.step(torch.zeros(env.num_envs, 2))
            peak = max(peak, env.state["joint_qd"].abs().max().nan_to_num(math.inf).item())
    return peak


def test_model_damping_is_stable_where_the_same_damping_held_over_substeps_is_not():
    """Explicit damping c is stable while c dt / inertia < 2: the model's uses the substep,
    extra_joint_forces the env step (docs/simulators.md measures the thresholds)."""
    settings = {"dt": 0.05, "substeps": 2, "armature": 0.1}
    assert peak_speed(Arm(8, joint_damping=5.0, **settings)) < 2.0  # decays from 2 rad/s
    assert peak_speed(Arm(8, held_damping=5.0, **settings)) > 10.0  # the same, held: grows
    assert peak_speed(Arm(8, joint_damping=5.0, dt=0.05, substeps=2)) > 10.0  # no armature
