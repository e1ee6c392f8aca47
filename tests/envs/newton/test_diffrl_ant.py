"""DiffRLAnt: the SHAC paper's Ant on Newton, its constants, start, termination and gradients."""

from __future__ import annotations

import math

import pytest
import torch

newton = pytest.importorskip("newton", reason="the Newton backend needs pathgrad[newton]")

from helpers import assert_same_windows, window_with_gradients  # noqa: E402
from pathgrad.env import build_learning_env  # noqa: E402
from pathgrad.envs.newton import DiffRLAnt, NewtonSimulation  # noqa: E402
from pathgrad.envs.newton.engine.mass_matrix import MassMatrixCachingSimulation  # noqa: E402
from pathgrad.envs.newton.robots.ant import REST_JOINT_ANGLES  # noqa: E402


def _settled(steps: int = 30, **kwargs) -> tuple[DiffRLAnt, dict[str, torch.Tensor]]:
    """One ant after ``steps`` steps of a fixed gait from its (seeded) random start."""
    env = DiffRLAnt(1, seed=0, **kwargs)
    env.reset(seed=0)
    with torch.no_grad():
        for step in range(steps):
            env.step(0.3 * torch.sin(torch.arange(8.0) + 0.2 * step).unsqueeze(0))
    return env, {key: value.detach().clone() for key, value in env.state.items()}


def test_shapes_clipped_actions_and_the_reward_of_diffrl():
    env = DiffRLAnt(2, seed=0)
    observation, _ = env.reset(seed=0)
    assert observation.shape == (2, 37) and env.action_dim == 8
    assert env.single_action_space.shape == (8,) and env.max_episode_steps == 1000
    action = torch.tensor([[0.5] * 8, [1.5] * 8])  # clipped to 1 as DiffRL clips
    observation, reward, terminated, _, _ = env.step(action)
    after = env.state
    assert torch.equal(observation[:, -8:], action.clamp(-1.0, 1.0))
    up, heading = env._alignment(after["joint_q"])
    expected = after["joint_qd"][:, 0] + 0.1 * up + heading + after["joint_q"][:, 2] - 0.27
    assert torch.allclose(reward, expected) and not terminated.any()  # no action penalty
    assert torch.allclose(observation[:, 0], after["joint_q"][:, 2])
    assert torch.allclose(observation[:, 5], after["joint_qd"][:, 0])  # DiffRL's progress


def test_the_registered_name_builds_with_the_paper_s_constants():
    env = build_learning_env("DiffRLAnt", num_envs=2, device="cpu", seed=0)
    assert isinstance(env, DiffRLAnt)
    assert isinstance(env.simulation, MassMatrixCachingSimulation)
    assert env.simulation.solver.update_mass_matrix_interval == 16
    assert env.simulation.substeps == 16 and env.dt == pytest.approx(1 / 60)
    assert torch.equal(env.action_scale, torch.full((8,), 200.0))
    model = env.simulation.model
    assert (model.shape_material_ke.numpy() == 4.0e4).all()
    assert (model.shape_material_kd.numpy() == 80.0).all()  # dflex's kd d at rest
    assert (model.shape_material_mu.numpy() == 0.75).all()
    damping = model.joint_damping.numpy().reshape(2, -1)[:, 6:]
    assert (damping == 11.0).all() and (model.joint_armature.numpy() == 0.05).all()
    assert (model.joint_limit_kd.numpy() == 0.0).all()  # dflex's limit damping is in the 11
    every = DiffRLAnt(1, seed=0, mass_matrix_interval=1)
    assert type(every.simulation) is NewtonSimulation


def test_the_ant_weighs_180_kg():
    env = DiffRLAnt(2, seed=0)
    mass = float(env.simulation.model.body_mass.numpy().sum()) / 2
    assert mass == pytest.approx(180.0, rel=0.05), mass


def test_a_torso_below_0_27_m_ends_the_episode():
    env = DiffRLAnt(2, seed=0)
    joint_q = env.state["joint_q"].clone()
    joint_q[0, 2] = 0.26
    assert env._terminated({"joint_q": joint_q}).tolist() == [True, False]
    joint_q[0, 2] = 0.28
    assert env._terminated({"joint_q": joint_q}).tolist() == [False, False]
    tall = DiffRLAnt(2, seed=0, termination_height=1.0)  # no start is that high
    tall.reset(seed=0)
    _, _, terminated, _, info = tall.step(torch.zeros(2, 8))
    assert terminated.all() and (info["final_observation"][:, 0] < 1.0).all()
    assert (tall.elapsed_steps == 0).all()


def test_the_stochastic_start_stays_within_diffrl_s_bounds():
    env = DiffRLAnt(1, seed=0)
    state = env._sample_initial_state(4096)
    joint_q, joint_qd = state["joint_q"], state["joint_qd"]
    offset = joint_q[:, :3] - torch.tensor([0.0, 0.0, 0.75])
    hinges = joint_q[:, 7:] - torch.tensor(REST_JOINT_ANGLES)
    angle = 2.0 * torch.acos(joint_q[:, 6].abs().clamp(max=1.0))
    for values, bound in ((offset, 0.1), (hinges, 0.2), (joint_qd, 0.25), (angle, math.pi / 24)):
        assert values.abs().max() <= bound + 1e-6
        assert values.abs().max() >= 0.95 * bound  # spread over the whole range
    assert torch.allclose(torch.linalg.vector_norm(joint_q[:, 3:7], dim=-1), torch.ones(4096))
    fixed = DiffRLAnt(1, seed=0, stochastic_init=False)._sample_initial_state(3)
    assert torch.equal(fixed["joint_q"][:, 7:], torch.tensor(REST_JOINT_ANGLES).expand(3, -1))
    assert torch.equal(fixed["joint_q"][:, :7], torch.tensor([[0, 0, 0.75, 0, 0, 0, 1.0]] * 3))
    assert (fixed["joint_qd"] == 0).all()


def test_fifty_random_steps_of_sixteen_ants_stay_finite():
    env = DiffRLAnt(16, seed=0)
    env.reset(seed=0)
    generator = torch.Generator().manual_seed(0)
    for _ in range(50):
        observation, reward, *_ = env.step(2.0 * torch.rand(16, 8, generator=generator) - 1.0)
        assert torch.isfinite(observation).all() and torch.isfinite(reward).all()


def _jacobian_check(
    env, state, steps: int, seed: int, wrt: str = "action"
) -> tuple[torch.Tensor, torch.Tensor]:
    """d(weighted reward and observation after ``steps``)/d(first action or hinge angles):
    autograd and central differences (float32: Newton's backend computes in float32 only)."""
    generator = torch.Generator().manual_seed(seed)
    actions = 0.3 * torch.randn(steps, 1, 8, generator=generator)
    weights = torch.randn(38, generator=generator)

    def output(joint_q: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
        env.state = {**state, "joint_q": joint_q}
        env.elapsed_steps = torch.zeros(1, dtype=torch.long)
        for step in range(steps):
            observation, reward, *_ = env.step(first if step == 0 else actions[step])
        return (torch.cat([reward, observation[0]]) * weights).sum()

    inputs = [state["joint_q"].clone(), actions[0].clone()]
    index, columns = (1, range(8)) if wrt == "action" else (0, range(7, 15))
    leaves = [x.clone().requires_grad_() for x in inputs]
    analytic = torch.autograd.grad(output(*leaves), leaves[index])[0].view(-1)[list(columns)]
    numeric = []
    for column in columns:
        plus, minus = [x.clone() for x in inputs], [x.clone() for x in inputs]
        plus[index].view(-1)[column] += 1e-3
        minus[index].view(-1)[column] -= 1e-3
        with torch.no_grad():
            numeric.append(float(output(*plus) - output(*minus)) / 2e-3)
    return analytic, torch.tensor(numeric)


@pytest.mark.parametrize("interval", [16, 1])
@pytest.mark.parametrize("steps", [30, 45])
def test_the_action_jacobian_of_one_step_agrees_with_finite_differences(interval, steps):
    env, state = _settled(steps, mass_matrix_interval=interval)
    got, want = _jacobian_check(env, state, 1, seed=steps)
    assert torch.linalg.norm(got - want) <= 0.02 * torch.linalg.norm(want), (got, want)


@pytest.mark.parametrize(("steps", "wrt"), [(1, "hinges"), (3, "action")])
def test_the_substeps_reusing_a_mass_matrix_differentiate_it(steps, wrt):
    """In the air (no contact): the hinge angles (and, through them, earlier actions) move
    each step's mass matrix; the adjoints of the 15 substeps that reuse it must reach
    them too (without: 10% off for the hinges, 4% for the actions)."""
    env = DiffRLAnt(1, seed=0)
    state = {key: value.clone() for key, value in env.state.items()}
    state["joint_q"][:, 2] = 3.0
    got, want = _jacobian_check(env, state, steps, seed=0, wrt=wrt)
    assert torch.linalg.norm(got - want) <= 0.02 * torch.linalg.norm(want), (got, want)


def test_captured_graphs_replay_the_mass_matrix_caching_bit_for_bit():
    captured = DiffRLAnt(2, seed=0, mass_matrix_interval=4)
    launched = DiffRLAnt(2, seed=0, mass_matrix_interval=4, capture=False)
    assert_same_windows(captured, launched, 4)


def test_shapes_collide_with_the_ground_only_within_a_two_per_pair_capacity():
    # dflex's Ant collides each shape with the ground only: one pair per shape of each ant.
    env = DiffRLAnt(3, seed=0)
    model = env.simulation.model
    shapes_per_ant = (model.shape_count - 1) // 3  # the ground plane is shared
    assert int(model.shape_contact_pair_count) == 3 * shapes_per_ant
    assert int(env.simulation._contacts.rigid_contact_max) == 2 * 3 * shapes_per_ant
    with pytest.raises(ValueError, match="contacts_per_shape_pair must be positive, got 0"):
        NewtonSimulation(model, dt=1 / 60, contacts=True, contacts_per_shape_pair=0)


def _detecting_again(cls):
    return type(cls.__name__, (cls,), {"keep_contacts": False})


@pytest.mark.parametrize("name", ["DiffRLAnt", "DiffRLHopper"])
def test_contacts_kept_from_the_forward_pass_give_the_same_gradients_bit_for_bit(name):
    """The backward pass puts back each substep's contacts instead of detecting them again."""
    import pathgrad.envs.newton as backend

    cls = getattr(backend, name)
    kept, detecting = cls(2, seed=0), _detecting_again(cls)(2, seed=0)
    assert kept.simulation.saved_contacts is not None
    assert detecting.simulation.saved_contacts is None
    assert_same_windows(kept, detecting, 24)
    assert int(kept.simulation._contacts.rigid_contact_count.numpy()[0]) > 0  # in contact


def test_the_backward_pass_reads_the_contacts_it_kept(monkeypatch):
    """Loading no contacts into the backward pass changes the gradients: the record is used."""
    from pathgrad.envs.newton.engine.saved_arrays import SavedArrays

    env = DiffRLAnt(2, seed=0)
    _, _, right = window_with_gradients(env, 24)
    monkeypatch.setattr(SavedArrays, "load", lambda self, row: self._staged.zero_())
    _, _, without_contacts = window_with_gradients(env, 24)
    assert torch.isfinite(right).all() and not torch.equal(right, without_contacts)


@pytest.mark.parametrize("interval", [16, 4])
def test_the_mass_matrix_kept_from_the_forward_pass_gives_the_same_gradients(interval):
    """Each block's mass matrix and factor are put back, not evaluated again by a substep."""
    kept = DiffRLAnt(2, seed=0, mass_matrix_interval=interval)
    evaluating = DiffRLAnt(2, seed=0, mass_matrix_interval=interval)
    evaluating.simulation.saved_mass = None
    assert kept.simulation.saved_mass is not None
    assert_same_windows(kept, evaluating, 6)
    assert "restore_mass_matrix" in kept.simulation._graphs
    assert "mass_matrix" in evaluating.simulation._graphs


def test_a_step_that_no_backward_pass_follows_keeps_no_substep_inputs():
    """Under no_grad (evaluation, critic targets) the step copies out nothing for a backward."""
    env = DiffRLAnt(2, seed=0)
    q, qd = env.state["joint_q"], env.state["joint_qd"]
    force = torch.zeros(2, env.dofs)
    kept = env.simulation.forward(q, qd, force)
    bare = env.simulation.forward(q, qd, force, keep_inputs=False)
    assert torch.equal(kept[0], bare[0]) and torch.equal(kept[1], bare[1])
    assert len(kept[2]) == 16 and all(len(entry) == 5 for entry in kept[2]) and bare[2] == []
