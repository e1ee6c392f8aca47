"""DiffRLHopper and DiffRLHalfCheetah: DiffRL's constants, start, reward, termination, gradients."""

from __future__ import annotations

import math

import pytest
import torch

newton = pytest.importorskip("newton", reason="the Newton backend needs pathgrad[newton]")

from pathgrad.env import build_learning_env  # noqa: E402
from pathgrad.envs.newton import DiffRLHalfCheetah, DiffRLHopper, NewtonSimulation  # noqa: E402
from pathgrad.envs.newton.engine.mass_matrix import MassMatrixCachingSimulation  # noqa: E402
from pathgrad.testing import check_env, check_env_gradients  # noqa: E402

ENVS = {"DiffRLHopper": DiffRLHopper, "DiffRLHalfCheetah": DiffRLHalfCheetah}
# (radius, half-length of the cylinder) of every capsule of DiffRL's MJCF files.
CAPSULES = {
    "DiffRLHopper": [(0.05, 0.2), (0.05, 0.225), (0.04, 0.25), (0.06, 0.195)],
    "DiffRLHalfCheetah": [(0.046, h) for h in (0.5, 0.15, 0.145, 0.15, 0.094, 0.133, 0.106, 0.07)],
}
# Per DOF (root x, z, pitch, hinges): dflex's damping (MJCF or parse_mjcf's) + limit_kd 10.
DAMPING = {
    "DiffRLHopper": [10.0, 10.0, 10.0, 12.0, 12.0, 12.0],
    "DiffRLHalfCheetah": [10.0, 10.0, 10.0, 16.0, 14.5, 13.0, 14.5, 13.0, 11.5],
}
CONSTANTS = {  # armature, contact ke, kd, kf, mu
    "DiffRLHopper": (1.0, 2.0e4, 4.0, 1.0e3, 0.9),
    "DiffRLHalfCheetah": (0.1, 2.0e4, 4.0, 1.0e3, 1.0),
}
NOISE = {"DiffRLHopper": (0.05, 0.05, 0.05, 0.05), "DiffRLHalfCheetah": (0.1, 0.1, 0.1, 0.25)}
names = pytest.mark.parametrize("name", list(ENVS))


def _hopper_terms(joint_q: torch.Tensor) -> torch.Tensor:
    height = (joint_q[:, 1] + 0.3).clamp(-1.0, 0.3)
    height = torch.where(height < 0, -200.0 * height.square(), height)
    return height + 1.0 - joint_q[:, 2].square() / (math.pi / 6) ** 2


@names
def test_shapes_clipped_actions_and_the_reward_of_diffrl(name):
    env = ENVS[name](2, seed=0)
    observation, _ = env.reset(seed=0)
    dims = {"DiffRLHopper": (11, 3), "DiffRLHalfCheetah": (17, 6)}[name]
    assert (observation.shape[1], env.action_dim) == dims and env.max_episode_steps == 1000
    action = torch.full((2, env.action_dim), 0.5)
    action[1] = 1.5  # clipped to 1, as DiffRL clips
    observation, reward, *_ = env.step(action)
    joint_q, joint_qd = env.state["joint_q"], env.state["joint_qd"]
    assert torch.equal(observation, torch.cat([joint_q[:, 1:], joint_qd], dim=-1))
    expected = joint_qd[:, 0] - 0.1 * action.clamp(-1, 1).square().sum(-1)
    if name == "DiffRLHopper":
        expected = expected + _hopper_terms(joint_q)
    assert torch.allclose(reward, expected)


@names
def test_the_registered_name_builds_with_diffrl_s_constants(name):
    env = build_learning_env(name, num_envs=2, device="cpu", seed=0)
    assert isinstance(env, ENVS[name]) and isinstance(env.simulation, MassMatrixCachingSimulation)
    assert env.simulation.solver.update_mass_matrix_interval == 16
    assert env.simulation.substeps == 16 and env.dt == pytest.approx(1 / 60)
    assert torch.equal(env.action_scale, torch.full((env.action_dim,), 200.0))
    assert env.actuated_dofs == list(range(3, env.dofs))
    model, dofs = env.simulation.model, env.dofs
    armature, ke, kd, kf, mu = CONSTANTS[name]
    expected = [(model.shape_material_ke, ke), (model.shape_material_kd, kd),
                (model.shape_material_kf, kf), (model.shape_material_mu, mu),
                (model.joint_armature, armature), (model.joint_limit_kd, 0.0),
                (model.joint_target_ke, 0.0), (model.joint_limit_ke, 1.0e3)]  # fmt: skip
    for values, want in expected:
        assert values.numpy() == pytest.approx(want), values
    assert model.joint_damping.numpy().tolist() == pytest.approx(DAMPING[name] * 2)
    stiffness = model.joint_stiffness.numpy()[:dofs].tolist()
    hinges = [240, 180, 120, 180, 120, 60] if name == "DiffRLHalfCheetah" else [0, 0, 0]
    assert stiffness == pytest.approx([0.0] * 3 + hinges)
    every = ENVS[name](1, seed=0, mass_matrix_interval=1).simulation
    assert isinstance(every, NewtonSimulation)
    assert not isinstance(every, MassMatrixCachingSimulation)


@names
def test_the_mass_is_the_dflex_model_s(name):
    env = ENVS[name](2, seed=0)
    mass = float(env.simulation.model.body_mass.numpy().sum()) / 2
    want = sum(1000.0 * math.pi * r * r * (2.0 * h + 4.0 / 3.0 * r) for r, h in CAPSULES[name])
    assert mass == pytest.approx(want, rel=1e-5), (mass, want)  # 15.8 kg and 21.2 kg


def test_the_hopper_ends_below_minus_0_45_m_and_the_cheetah_never():
    hopper = DiffRLHopper(2, seed=0)
    joint_q = hopper.state["joint_q"].clone()
    joint_qd = hopper.state["joint_qd"]
    joint_q[0, 1] = -0.46
    assert hopper._terminated({"joint_q": joint_q, "joint_qd": joint_qd}).tolist() == [True, False]
    joint_q[0, 1] = -0.44
    assert hopper._terminated({"joint_q": joint_q, "joint_qd": joint_qd}).tolist() == [False, False]
    assert _hopper_terms(torch.tensor([[0.0, -0.4, 0.0]])).item() == pytest.approx(-1.0)
    tall = DiffRLHopper(2, seed=0, termination_height=0.5)  # no start is that high
    tall.reset(seed=0)
    _, _, terminated, _, info = tall.step(torch.zeros(2, 3))
    assert terminated.all() and (tall.elapsed_steps == 0).all()
    cheetah = DiffRLHalfCheetah(2, seed=0)
    low = {**cheetah.state, "joint_q": cheetah.state["joint_q"] - 5.0}
    assert not cheetah._terminated(low).any()
    broken = {**cheetah.state, "joint_qd": torch.full_like(cheetah.state["joint_qd"], math.nan)}
    assert cheetah._terminated(broken).all()  # a state no longer finite ends its episode


@names
def test_the_stochastic_start_stays_within_diffrl_s_bounds(name):
    env = ENVS[name](1, seed=0)
    state = env._sample_initial_state(4096)
    start = torch.zeros(env.coordinates)
    start[1] = -0.2 if name == "DiffRLHalfCheetah" else 0.0
    offset = state["joint_q"] - start
    position, pitch, hinges, velocity = NOISE[name]
    for values, bound in ((offset[:, :2], position), (offset[:, 2], pitch),
                          (offset[:, 3:], hinges), (state["joint_qd"], velocity)):  # fmt: skip
        assert bound * 0.99 <= values.abs().max() <= bound + 1e-6
    fixed = ENVS[name](1, seed=0, stochastic_init=False)._sample_initial_state(3)
    assert (fixed["joint_q"] == start).all()
    assert (fixed["joint_qd"] == 0).all()


@names
def test_fifty_random_steps_of_sixteen_envs_stay_finite(name):
    env = ENVS[name](16, seed=0)
    env.reset(seed=0)
    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        action = 2.0 * torch.rand(16, env.action_dim, generator=generator) - 1.0
        observation, reward, terminated, *_ = env.step(action)
        assert torch.isfinite(observation).all() and torch.isfinite(reward).all()


def _one_step_jacobian(env, state, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """d(weighted reward and observation)/d(action) of one step: autograd and central
    differences (float32: Newton's backend computes in float32 only)."""
    generator = torch.Generator().manual_seed(seed)
    action = 0.3 * torch.randn(1, env.action_dim, generator=generator)
    weights = torch.randn(1 + env.observation_dim, generator=generator)

    def output(first: torch.Tensor) -> torch.Tensor:
        env.state = dict(state)
        env.elapsed_steps = torch.zeros(1, dtype=torch.long)
        observation, reward, *_ = env.step(first)
        return (torch.cat([reward, observation[0]]) * weights).sum()

    leaf = action.clone().requires_grad_()
    (analytic,) = torch.autograd.grad(output(leaf), leaf)
    numeric = []
    for column in range(env.action_dim):
        step = torch.zeros_like(action)
        step[0, column] = 1e-3
        with torch.no_grad():
            numeric.append(float(output(action + step) - output(action - step)) / 2e-3)
    return analytic.view(-1), torch.tensor(numeric)


@names
@pytest.mark.parametrize("interval", [16, 1])
def test_the_action_jacobian_of_one_step_in_contact_agrees_with_finite_differences(name, interval):
    env = ENVS[name](1, seed=0, mass_matrix_interval=interval)
    env.reset(seed=0)
    with torch.no_grad():  # the hopper bounces: 38 steps end at the bottom of its second hop
        for step in range(38 if name == "DiffRLHopper" else 30):
            env.step(0.3 * torch.sin(torch.arange(float(env.action_dim)) + 0.2 * step)[None])
    state = {key: value.detach().clone() for key, value in env.state.items()}
    assert float(state["joint_q"][0, 1]) < (-0.05 if name == "DiffRLHopper" else -0.3)  # down
    got, want = _one_step_jacobian(env, state, seed=1)
    assert torch.linalg.norm(got - want) <= 0.02 * torch.linalg.norm(want), (got, want)


@names
def test_the_state_jacobian_in_contact_agrees_with_finite_differences(name):
    """d(next joint state)/d(joint coordinates), standing at rest on the ground. Contact
    damping is off: at rest the approach speed crosses 0, the kink of ``kd min(v, 0)``.
    Moving along x moves only x. Without restore_external_forces (Newton 1.8 overwrites
    the contact wrenches its adjoint reads) the cheetah's x column is 99% off."""
    env = ENVS[name](1, seed=0, stochastic_init=False, contact_model={"contact_kd": 0.0})
    action = torch.zeros(1, env.action_dim)
    with torch.no_grad():
        for _ in range(40):
            env.step(action)
    start = {key: value.detach().clone() for key, value in env.state.items()}

    def next_state(joint_q: torch.Tensor) -> torch.Tensor:
        state = env._dynamics({**start, "joint_q": joint_q}, action)
        return torch.cat([state["joint_q"][0], state["joint_qd"][0]])

    joint_q = start["joint_q"].clone().requires_grad_()
    outputs = next_state(joint_q)
    rows = [torch.autograd.grad(value, joint_q, retain_graph=True)[0][0] for value in outputs]
    got = torch.stack(rows)
    unit = torch.zeros(outputs.numel())
    unit[0] = 1.0
    assert torch.allclose(got[:, 0], unit, atol=1e-4), got[:, 0]
    numeric = []
    for column in range(env.coordinates):
        step = torch.zeros_like(joint_q)
        step[0, column] = 1e-3
        with torch.no_grad():
            numeric.append((next_state(joint_q + step) - next_state(joint_q - step)) / 2e-3)
    want = torch.stack(numeric, dim=1)
    assert torch.linalg.norm(got - want) <= 0.02 * torch.linalg.norm(want)


def _airborne(name: str, steps: int) -> tuple:
    """An env with the fixed start, and a start off the hinge limits and 0.2 m higher (no
    contact before the chain's end): the hopper's thigh and leg start at their upper limit
    0, where finite differences straddle the kink."""
    env = ENVS[name](2, seed=0, max_episode_steps=steps, stochastic_init=False)
    state = {key: value.clone() for key, value in env.state.items()}
    if name == "DiffRLHopper":
        state["joint_q"][:, 1] += 0.2
        state["joint_q"][:, 3:5] = -0.1
    return env, state


@names
def test_a_chain_of_steps_through_a_reset_has_the_gradients_of_finite_differences(name):
    env, state = _airborne(name, 5)  # the feet touch down after the chain
    assert check_env_gradients(
        env, 5, reset_at_step=2, initial_state=state, state_keys=["joint_q", "joint_qd"]
    )


@names
def test_check_env_passes(name):
    env, state = _airborne(name, 8)
    result = check_env(env, num_steps=4, gradient_options={"initial_state": state})
    assert result.passed, str(result)
