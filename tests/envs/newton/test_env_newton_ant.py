"""NewtonAnt: the ground holds it, torch's view of the torso equals Newton's kinematics,
and its gradients through contact agree with finite differences where they exist."""

from __future__ import annotations

import numpy as np
import pytest
import torch

newton = pytest.importorskip("newton", reason="the Newton backend needs pathgrad[newton]")

from helpers import assert_same_windows  # noqa: E402
from pathgrad.envs.newton import NewtonAnt  # noqa: E402


def _settled(
    num_envs: int = 1, steps: int = 45, **kwargs
) -> tuple[NewtonAnt, dict[str, torch.Tensor]]:
    """An ant that has dropped onto the ground and stands on it (feet in contact)."""
    env = NewtonAnt(num_envs, seed=0, **kwargs)
    env.reset(seed=0)
    for _ in range(steps):
        env.step(torch.zeros(num_envs, 8))
    return env, {key: value.detach().clone() for key, value in env.state.items()}


def test_the_ground_holds_the_ant_and_torch_sees_the_torso_as_newton_does():
    env, state = _settled(2, steps=60)  # 1 s: without the ground it would have fallen 4.9 m
    joint_q, joint_qd = state["joint_q"], state["joint_qd"]
    assert torch.isfinite(joint_q).all() and torch.isfinite(joint_qd).all()
    assert ((joint_q[:, 2] > 0.3) & (joint_q[:, 2] < 0.75)).all(), joint_q[:, 2]
    assert joint_qd[:, 2].abs().max() < 0.5  # resting, not falling
    # The torso pose in torch (free joint: position, quaternion xyzw) is Newton's body pose.
    model = env.simulation.model
    newton_state = model.state()
    newton_state.joint_q.assign(joint_q.reshape(-1).numpy())
    newton.eval_fk(model, newton_state.joint_q, newton_state.joint_qd, newton_state)
    bodies = newton_state.body_q.numpy().reshape(2, -1, 7)
    assert np.allclose(bodies[:, 0], joint_q[:, :7].numpy(), atol=1e-6)
    rotation = _rotation_matrices(bodies[:, 0, 3:])
    up, heading = env._alignment(joint_q)
    assert np.allclose(up.numpy(), rotation[:, 2, 2], atol=1e-6)
    assert np.allclose(heading.numpy(), rotation[:, 0, 0], atol=1e-6)
    # Reward and observation as documented.
    action = torch.full((2, 8), 0.5)
    before = {key: value.clone() for key, value in env.state.items()}
    observation, reward, terminated, _, _ = env.step(action)
    after = env.state
    up, heading = env._alignment(after["joint_q"])
    expected = (
        after["joint_qd"][:, 0] + 0.1 * up + heading + after["joint_q"][:, 2] - 0.27
        - 0.005 * 8 * 0.25
    )  # fmt: skip
    assert torch.allclose(reward, expected) and not terminated.any()
    assert observation.shape == (2, 37) and torch.equal(observation[:, -8:], action)
    assert not torch.equal(before["joint_q"], after["joint_q"])


def test_captured_graphs_replay_collision_and_contact_gradients_bit_for_bit():
    captured, launched = NewtonAnt(2, seed=0), NewtonAnt(2, seed=0, capture=False)
    assert_same_windows(captured, launched, 6)


def test_a_fallen_torso_ends_the_episode_and_the_ant_restarts_standing():
    env = NewtonAnt(2, seed=0)
    env.reset(seed=0)
    joint_q = env.state["joint_q"]
    low, lost = joint_q.clone(), joint_q.clone()
    low[0, 2], lost[0, 2] = 0.2, float("nan")
    assert env._terminated({"joint_q": low}).tolist() == [True, False]
    assert env._terminated({"joint_q": lost}).tolist() == [True, False]
    tall = NewtonAnt(2, seed=0, termination_height=1.0)  # the resting torso is too low
    tall.reset(seed=0)
    _, _, terminated, _, info = tall.step(torch.zeros(2, 8))
    assert terminated.all() and (info["final_observation"][:, 0] < 1.0).all()
    assert (tall.state["joint_q"][:, 2] > 0.69).all() and (tall.elapsed_steps == 0).all()
    assert (tall.state["time"] == 0).all()  # the episode clock restarts too


def test_average_forward_velocity_is_the_distance_over_the_episode_time():
    env = NewtonAnt(2, seed=0)
    env.reset(seed=0)
    for _ in range(3):
        metrics = env.step(torch.full((2, 8), 0.3))[4]["metrics"]
    assert torch.allclose(env.state["time"], torch.full((2,), 3 * env.dt))
    expected = metrics["distance"] / (3 * env.dt)
    assert torch.allclose(metrics["average_forward_velocity"], expected)
    assert (metrics["distance"] != 0).all()


@pytest.mark.parametrize(
    ("steps", "damping"), [(45, False), (46, False), (45, True), (46, True), (47, True)]
)
def test_gradients_through_contact_agree_with_finite_differences(steps, damping):
    """One step of an ant standing on the ground, at consecutive instants.

    The derivatives with respect to the actions (what the policy gradient uses)
    must match central differences with the env's contact model. Contact damping
    switches on where a point touches the ground, a jump in force that central
    differences in velocity see and a first-order gradient does not (the bias at
    discontinuities, measured by ``benchmarks/newton_ant_gradients.py``); with it
    off, the force is continuous and the velocity columns must match too.
    """
    contact_model = None if damping else {"contact_kd": 0.0}
    env, state = _settled(1, steps, contact_model=contact_model)
    generator = torch.Generator().manual_seed(steps)
    action = 0.3 * torch.randn(1, 8, generator=generator)
    weights = torch.randn(38, generator=generator)

    def output(joint_qd, act):
        env.state = {**state, "joint_qd": joint_qd}
        env.elapsed_steps = torch.zeros(1, dtype=torch.long)
        observation, reward, *_ = env.step(act)
        return (torch.cat([reward, observation[0]]) * weights).sum()

    inputs = [state["joint_qd"].clone(), action.clone()]
    leaves = [x.clone().requires_grad_() for x in inputs]
    analytic = torch.autograd.grad(output(*leaves), leaves)
    for index in (1,) if damping else (0, 1):
        numeric = []
        for column in range(inputs[index].numel()):
            plus, minus = [x.clone() for x in inputs], [x.clone() for x in inputs]
            plus[index].view(-1)[column] += 1e-3
            minus[index].view(-1)[column] -= 1e-3
            with torch.no_grad():
                numeric.append(float(output(*plus) - output(*minus)) / 2e-3)
        numeric = torch.tensor(numeric)
        got = analytic[index].view(-1)
        assert torch.linalg.norm(got - numeric) <= 0.03 * torch.linalg.norm(numeric), (got, numeric)


def _rotation_matrices(quaternions: np.ndarray) -> np.ndarray:
    x, y, z, w = quaternions.T
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
            np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
            np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
        ],
        1,
    )
