"""DiffRLHumanoid: DiffRL's constants, start, reward, termination and gradients on Newton."""

from __future__ import annotations

import math

import pytest
import torch

newton = pytest.importorskip("newton", reason="the Newton backend needs pathgrad[newton]")

from pathgrad.env import build_learning_env  # noqa: E402
from pathgrad.envs.newton import DiffRLHumanoid, NewtonSimulation  # noqa: E402
from pathgrad.envs.newton.engine.mass_matrix import MassMatrixCachingSimulation  # noqa: E402
from pathgrad.envs.newton.robots.diffrl_humanoid import MOTOR_STRENGTHS  # noqa: E402

# (radius, half-length of the cylinder) of every capsule and the radii of the spheres of
# DiffRL's humanoid.xml (head, hands).
CAPSULES = [(0.07, 0.07), (0.06, 0.06), (0.06, 0.06), (0.09, 0.07)]
CAPSULES += [(0.06, math.hypot(0.01, 0.34) / 2), (0.049, 0.15)] * 2  # thighs, shins
CAPSULES += [(0.027, math.hypot(0.21, 0.02) / 2)] * 4  # feet
CAPSULES += [(0.04, math.sqrt(3) * 0.08), (0.031, math.sqrt(3) * 0.08)] * 2  # arms
SPHERES = [0.09, 0.04, 0.04]
# Per hinge, in the action's order: the file's stiffness, damping (+ limit_kd 10), armature.
STIFFNESS = [20, 20, 10] + [10, 10, 20, 5, 2, 2] * 2 + [10, 10, 2] * 2
DAMPING = [15, 15, 15] + [15, 15, 15, 10.1, 11, 11] * 2 + [15, 15, 11] * 2
ARMATURE = [0.02, 0.01, 0.01] + [0.01, 0.01, 0.01, 0.007, 0.006, 0.006] * 2
ARMATURE += [0.01, 0.01, 0.006] * 2
RANGES = [(-45, 45), (-75, 30), (-35, 35)] + [(-25, 5), (-60, 35), (-80, 20), (-160, 2),
                                              (-50, 50), (-50, 50)] * 2  # fmt: skip
RANGES += [(-60, 60), (-60, 60), (-90, 50)] * 2
FEET = {  # the end points (m, in the foot's frame) of the foot capsules, radius 0.027
    "right_foot": [(-0.07, -0.02, -0.08), (0.14, -0.04, -0.08), (-0.07, 0, -0.08),
                   (0.14, 0.02, -0.08)],
    "left_foot": [(-0.07, 0.02, -0.08), (0.14, 0.04, -0.08), (-0.07, 0, -0.08),
                  (0.14, -0.02, -0.08)],
}  # fmt: skip


def _height_term(height: torch.Tensor) -> torch.Tensor:
    above = (height - 0.84).clamp(-1.0, 0.1)
    return torch.where(above < 0, -200.0 * above.square(), 10.0 * above)


def test_shapes_clipped_actions_and_the_reward_of_diffrl():
    env = DiffRLHumanoid(2, seed=0)
    observation, _ = env.reset(seed=0)
    assert observation.shape == (2, 76) and env.action_dim == 21
    assert env.single_action_space.shape == (21,) and env.max_episode_steps == 1000
    action = torch.tensor([[0.5] * 21, [1.5] * 21])  # clipped to 1, as DiffRL clips
    observation, reward, terminated, _, _ = env.step(action)
    state = env.state
    joint_q, joint_qd = state["joint_q"], state["joint_qd"]
    velocity = env.origin_velocity(state)
    up, heading = env._alignment(joint_q)
    assert torch.equal(observation[:, -21:], action.clamp(-1.0, 1.0))
    assert torch.equal(observation[:, :5], joint_q[:, 2:7])
    assert torch.equal(observation[:, 5:8], velocity)
    assert torch.equal(observation[:, 8:11], joint_qd[:, 3:6])
    assert torch.equal(observation[:, 11:32], joint_q[:, 7:])
    assert torch.allclose(observation[:, 32:53], 0.1 * joint_qd[:, 6:])
    assert torch.equal(observation[:, 53], up) and torch.equal(observation[:, 54], heading)
    penalty = 0.002 * action.clamp(-1, 1).square().sum(-1)
    expected = velocity[:, 0] + 0.1 * up + heading + _height_term(joint_q[:, 2]) - penalty
    assert torch.allclose(reward, expected) and not terminated.any()
    assert _height_term(torch.tensor([1.35, 0.9, 0.74])).tolist() == pytest.approx([1.0, 0.6, -2])
    # The heading is toward a target 200 m down +x of the start, not along +x.
    q = torch.tensor([[0.0, -20.0, 1.3, 0.0, 0.0, 0.0, 1.0] + [0.0] * 21])
    assert float(env._alignment(q)[1]) == pytest.approx(200 / math.hypot(200, 20))


def test_the_registered_name_builds_with_diffrl_s_constants():
    env = build_learning_env("DiffRLHumanoid", num_envs=2, device="cpu", seed=0)
    assert isinstance(env, DiffRLHumanoid)
    assert isinstance(env.simulation, MassMatrixCachingSimulation)
    assert env.simulation.solver.update_mass_matrix_interval == 48
    assert env.simulation.substeps == 48 and env.dt == pytest.approx(1 / 60)
    strengths = torch.tensor([0.35 * s for s in MOTOR_STRENGTHS.values()])
    assert torch.allclose(env.action_scale, strengths) and env.actuated_dofs == list(range(6, 27))
    labels = [label.rsplit("/", 1)[-1] for label in env.joint_labels]
    assert labels[1:] == list(MOTOR_STRENGTHS)  # the action's order is dflex's DOF order
    model = env.simulation.model
    expected = [(model.shape_material_ke, 2.0e4), (model.shape_material_kd, 12.5),
                (model.shape_material_kf, 1.0e3), (model.shape_material_mu, 0.75)]  # fmt: skip
    for values, want in expected:
        assert values.numpy() == pytest.approx(want), values
    hinges = slice(6, 27)
    per_dof = [(model.joint_stiffness, STIFFNESS), (model.joint_damping, DAMPING),
               (model.joint_armature, ARMATURE), (model.joint_limit_ke, [1.0e3] * 21),
               (model.joint_limit_kd, [0.0] * 21), (model.joint_target_ke, [0.0] * 21)]  # fmt: skip
    for values, want in per_dof:
        assert values.numpy()[hinges].tolist() == pytest.approx(want), values
    assert model.joint_armature.numpy()[:6].tolist() == [0.0] * 6  # the root's, as DiffRL's
    lower, upper = model.joint_limit_lower.numpy()[hinges], model.joint_limit_upper.numpy()[hinges]
    degrees = [math.degrees(bound) for pair in zip(lower, upper, strict=True) for bound in pair]
    assert degrees == pytest.approx([bound for pair in RANGES for bound in pair])
    every = DiffRLHumanoid(1, seed=0, mass_matrix_interval=1).simulation
    assert isinstance(every, NewtonSimulation)
    assert not isinstance(every, MassMatrixCachingSimulation)


def test_the_mass_is_the_dflex_model_s():
    env = DiffRLHumanoid(2, seed=0)
    mass = float(env.simulation.model.body_mass.numpy().sum()) / 2
    want = sum(1000.0 * math.pi * r * r * (2.0 * h + 4.0 / 3.0 * r) for r, h in CAPSULES)
    want += sum(1000.0 * 4.0 / 3.0 * math.pi * r**3 for r in SPHERES)
    assert mass == pytest.approx(want, rel=1e-5), (mass, want)  # 40.8 kg


def test_the_observed_velocity_is_the_torso_origin_s():
    """Tumbling in the air (no contact), the origin moves as the observed velocity says;
    Newton's root velocity (the torso's centre of mass's) does not."""
    env = DiffRLHumanoid(1, seed=0, stochastic_init=False)
    joint_q = env.state["joint_q"].clone()
    joint_q[0, 2] = 3.0
    joint_qd = torch.zeros(1, env.dofs)
    joint_qd[0, 3:6] = torch.tensor([0.5, 3.0, -1.0])
    env.state = {**env.state, "joint_q": joint_q, "joint_qd": joint_qd}
    before = env.origin_velocity(env.state)
    with torch.no_grad():
        env.step(torch.zeros(1, 21))
    moved = (env.state["joint_q"][0, :2] - joint_q[0, :2]) / env.dt
    average = 0.5 * (before + env.origin_velocity(env.state))[0, :2]
    assert torch.allclose(moved, average, atol=2e-3), (moved, average)
    assert moved.abs().max() > 0.05  # the spin moves the origin: 0.1 m/s along x


def test_a_torso_below_0_74_m_ends_the_episode():
    env = DiffRLHumanoid(2, seed=0)
    state = {key: value.clone() for key, value in env.state.items()}
    state["joint_q"][0, 2] = 0.73
    assert env._terminated(state).tolist() == [True, False]
    state["joint_q"][0, 2] = 0.75
    assert env._terminated(state).tolist() == [False, False]
    state["joint_qd"][1, 8] = math.nan  # a state no longer finite ends its episode
    assert env._terminated(state).tolist() == [False, True]
    tall = DiffRLHumanoid(2, seed=0, termination_height=2.0)  # no start is that high
    tall.reset(seed=0)
    _, _, terminated, _, info = tall.step(torch.zeros(2, 21))
    assert terminated.all() and (info["final_observation"][:, 0] < 2.0).all()
    assert (tall.elapsed_steps == 0).all()


def test_a_diverged_row_ends_its_episode_with_reward_0_as_diffrl_s():
    # SAPO's first DiffRLHumanoid run: from 0.59M env steps an episode now and then
    # diverged, its reward NaN, so every evaluation's return and some updates were NaN.
    env = DiffRLHumanoid(3, seed=0)
    env.reset(seed=0)
    state = {key: value.clone() for key, value in env.state.items()}
    state["joint_qd"][1, 8] = math.nan
    state["joint_qd"][2, 9] = 2e6  # beyond DiffRL's 1e6: diverged, though finite
    assert env._terminated(state).tolist() == [False, True, True]
    env.state = state
    with torch.no_grad():
        _, reward, terminated, _, _ = env.step(torch.zeros(3, 21))
    assert terminated[1:].all() and not terminated[0]
    assert torch.isfinite(reward).all() and reward[1:].tolist() == [0.0, 0.0]
    assert reward[0] != 0.0


def test_the_stochastic_start_stays_within_diffrl_s_bounds():
    env = DiffRLHumanoid(1, seed=0)
    state = env._sample_initial_state(4096)
    joint_q, joint_qd = state["joint_q"], state["joint_qd"]
    offset = joint_q[:, :3] - torch.tensor([0.0, 0.0, 1.35])
    angle = 2.0 * torch.acos(joint_q[:, 6].abs().clamp(max=1.0))
    for values, bound in ((offset, 0.1), (joint_q[:, 7:], 0.2), (joint_qd, 0.25),
                          (angle, math.pi / 24)):  # fmt: skip
        assert 0.95 * bound <= values.abs().max() <= bound + 1e-6
    assert torch.allclose(torch.linalg.vector_norm(joint_q[:, 3:7], dim=-1), torch.ones(4096))
    fixed = DiffRLHumanoid(1, seed=0, stochastic_init=False)._sample_initial_state(3)
    start = torch.tensor([0.0, 0.0, 1.35, 0.0, 0.0, 0.0, 1.0] + [0.0] * 21)
    assert torch.equal(fixed["joint_q"], start.expand(3, -1))
    assert (fixed["joint_qd"] == 0).all()


def test_thirty_random_steps_of_eight_humanoids_stay_finite():
    env = DiffRLHumanoid(8, seed=0)
    env.reset(seed=0)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _ in range(30):
            observation, reward, *_ = env.step(2.0 * torch.rand(8, 21, generator=generator) - 1)
            assert torch.isfinite(observation).all() and torch.isfinite(reward).all()


def _landing(interval: int = 48, **kwargs) -> tuple[DiffRLHumanoid, dict[str, torch.Tensor]]:
    """One humanoid 8 steps after its fixed start: its feet are 1-2 cm into the ground."""
    env = DiffRLHumanoid(1, seed=0, stochastic_init=False, mass_matrix_interval=interval,
                         **kwargs)  # fmt: skip
    with torch.no_grad():
        for _ in range(8):
            env.step(torch.zeros(1, 21))
    state = {key: value.detach().clone() for key, value in env.state.items()}
    lowest = min(float(env.body_point(state, foot, end)[0, 2]) - 0.027
                 for foot, ends in FEET.items() for end in ends)  # fmt: skip
    assert lowest < -0.01  # in contact
    return env, state


def _numeric(function, inputs: torch.Tensor, columns) -> torch.Tensor:
    """Central differences (step 1e-3) of ``function`` along ``inputs.view(-1)[columns]``."""
    numeric = []
    for column in columns:
        step = torch.zeros_like(inputs)
        step.view(-1)[column] = 1e-3
        with torch.no_grad():
            numeric.append((function(inputs + step) - function(inputs - step)) / 2e-3)
    return torch.stack(numeric, dim=-1)


@pytest.mark.parametrize("interval", [48, 1])
def test_the_action_jacobian_of_one_step_in_contact_agrees_with_finite_differences(interval):
    """d(weighted reward and observation)/d(action), float32 (Newton computes in float32)."""
    env, state = _landing(interval)
    generator = torch.Generator().manual_seed(1)
    action = 0.3 * torch.randn(1, 21, generator=generator)
    weights = torch.randn(77, generator=generator)

    def output(first: torch.Tensor) -> torch.Tensor:
        env.state = dict(state)
        env.elapsed_steps = torch.zeros(1, dtype=torch.long)
        observation, reward, *_ = env.step(first)
        return (torch.cat([reward, observation[0]]) * weights).sum()

    leaf = action.clone().requires_grad_()
    (got,) = torch.autograd.grad(output(leaf), leaf)
    want = _numeric(output, action, range(21))
    assert torch.linalg.norm(got[0] - want) <= 0.02 * torch.linalg.norm(want), (got, want)


def test_the_state_jacobian_in_contact_agrees_with_finite_differences():
    """d(next joint state)/d(torso position and hinge angles) while landing. The hinge
    angles move the step's mass matrix: without the adjoints of the 47 substeps reusing it
    (MassMatrixCachingSimulation) this check fails. Moving along x or y moves only x or y."""
    env, start = _landing()
    action = torch.zeros(1, 21)

    def next_state(joint_q: torch.Tensor) -> torch.Tensor:
        state = env._dynamics({**start, "joint_q": joint_q}, action)
        return torch.cat([state["joint_q"][0], state["joint_qd"][0]])

    joint_q = start["joint_q"].clone().requires_grad_()
    outputs = next_state(joint_q)
    rows = [torch.autograd.grad(value, joint_q, retain_graph=True)[0][0] for value in outputs]
    got = torch.stack(rows)
    for column in (0, 1):
        unit = torch.zeros(outputs.numel())
        unit[column] = 1.0
        assert torch.allclose(got[:, column], unit, atol=1e-4), got[:, column]
    columns = [2, *range(7, 28)]
    want = _numeric(next_state, start["joint_q"], columns)
    assert torch.linalg.norm(got[:, columns] - want) <= 0.02 * torch.linalg.norm(want)


def test_a_chain_through_a_termination_and_a_truncation_has_the_gradients_of_fd():
    """Six steps in the air (no contact): row 0 falls below its termination height at step
    4, row 1 reaches its time limit at step 3; both restart from the fixed start (below the
    termination height, so they end again at every step). d(weighted rewards, observations
    and final observations)/d(first action and start hinge angles) against central
    differences; what follows a reset does not depend on them."""
    env = DiffRLHumanoid(2, seed=0, stochastic_init=False, termination_height=1.983,
                         max_episode_steps=6)  # fmt: skip
    start = {key: value.clone() for key, value in env.state.items()}
    start["joint_q"][:, 2] = torch.tensor([2.0, 2.5])
    start["joint_q"][:, 7:] = 0.1
    generator = torch.Generator().manual_seed(2)
    actions = 0.1 * torch.randn(6, 2, 21, generator=generator)
    weights = torch.randn(6, 2, 1 + 2 * 76, generator=generator)
    endings = set()  # the (terminated, truncated) flags of each evaluation's first two steps

    def outputs(hinges: torch.Tensor, first: torch.Tensor) -> list[torch.Tensor]:
        env.state = {**start, "joint_q": torch.cat([start["joint_q"][:, :7], hinges], -1)}
        env.elapsed_steps = torch.tensor([0, 3])
        rows, flags = [], []
        for step in range(6):
            observation, reward, terminated, truncated, info = env.step(
                first if step == 0 else actions[step]
            )
            flags.append((*terminated.tolist(), *truncated.tolist()))
            final = info["final_observation"]
            rows.append(torch.cat([reward[:, None], observation, final], -1))
        endings.add(tuple(flags[:4]))
        return rows

    def output(hinges: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
        rows = outputs(hinges, first)
        return sum((row * weight).sum() for row, weight in zip(rows, weights, strict=True))

    hinges = start["joint_q"][:, 7:].clone().requires_grad_()
    first = actions[0].clone().requires_grad_()
    grads = torch.autograd.grad(output(hinges, first), [hinges, first])
    got = torch.cat([grad.reshape(-1) for grad in grads])
    rows = outputs(hinges, first)
    restarted = torch.stack([rows[3][0, 1:77], rows[2][1, 1:77]])  # observations after resets
    grads = torch.autograd.grad(restarted.sum(), [hinges, first], allow_unused=True)
    assert all(grad is None or not grad.any() for grad in grads)
    joint = torch.cat([hinges.detach().view(-1), first.detach().view(-1)])
    split = hinges.numel()

    def flat(inputs: torch.Tensor) -> torch.Tensor:
        return output(inputs[:split].view(2, 21), inputs[split:].view(2, 21))

    want = _numeric(flat, joint, range(joint.numel()))
    # Every evaluation ended row 1 (truncated) at step 3 and row 0 (terminated) at step 4.
    none, row_1, row_0 = (False,) * 4, (False, False, False, True), (True, True, False, False)
    assert endings == {(none, none, row_1, row_0)}, endings
    assert torch.linalg.norm(got - want) <= 0.02 * torch.linalg.norm(want), (got, want)
