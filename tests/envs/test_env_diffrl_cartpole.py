"""DiffRLCartPoleSwingUp: the SHAC paper's task definition, its physics and its gradients."""

from __future__ import annotations

import math

import pytest
import torch

from pathgrad.env import build_learning_env
from pathgrad.envs import DiffRLCartPoleSwingUp
from pathgrad.testing import check_env_gradients

F64 = torch.float64


def energy(env: DiffRLCartPoleSwingUp, state: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mechanical energy (J): cart, pole about its centre of mass, pole's height."""
    m, arm, total = env.pole_mass, env.pole_com_distance, env.cart_mass + env.pole_mass
    x_dot, theta, theta_dot = state["velocity"], state["angle"], state["angular_velocity"]
    kinetic = (0.5 * total * x_dot**2 + m * arm * torch.cos(theta) * x_dot * theta_dot
               + 0.5 * (env.pole_inertia + m * arm * arm) * theta_dot**2)  # fmt: skip
    return kinetic + m * env.gravity * arm * torch.cos(theta)


def test_the_task_definition():
    env = DiffRLCartPoleSwingUp(512, seed=0, dtype="float64")
    assert env.max_episode_steps == 240 and env.dt == pytest.approx(1 / 60)
    observation, _ = env.reset(seed=0)
    state = env.state
    assert (state["position"].abs() <= math.pi / 2).all() and state["position"].std() > 0.5
    assert ((state["angle"] - math.pi).abs() <= math.pi / 2).all()
    assert (state["velocity"].abs() <= 0.25).all() and (
        state["angular_velocity"].abs() <= 0.25
    ).all()
    assert torch.allclose(observation[:, 2], torch.sin(state["angle"]))
    assert torch.allclose(observation[:, 3], torch.cos(state["angle"]))
    fixed = DiffRLCartPoleSwingUp(4, stochastic_init=False, dtype="float64")
    fixed.reset(seed=0)
    assert torch.equal(fixed.state["angle"], torch.full((4,), math.pi, dtype=F64))
    _, reward, *_ = fixed.step(torch.zeros(4, 1, dtype=F64))  # hanging still: -pi^2 per step
    assert torch.allclose(reward, torch.full((4,), -(math.pi**2), dtype=F64), atol=1e-9)
    assert isinstance(build_learning_env("DiffRLCartPoleSwingUp", num_envs=1, device="cpu"),
                      DiffRLCartPoleSwingUp)  # fmt: skip


def energy_drift(substeps: int) -> torch.Tensor:
    """Largest energy change (J) over 60 unforced steps of envs that never reach a limit."""
    env = DiffRLCartPoleSwingUp(
        64, seed=1, dtype="float64", substeps=substeps, mass_matrix_substeps=1
    )
    env.reset(seed=1)
    before = energy(env, env.state)
    inside = torch.ones(64, dtype=torch.bool)
    for _ in range(60):
        env.step(torch.zeros(64, 1, dtype=F64))
        inside &= env.state["position"].abs() < env.track_limit
    assert inside.sum() > 32
    return (energy(env, env.state) - before).abs()[inside].max()


def test_energy_is_kept_without_force_and_actions_are_clipped():
    # Semi-implicit Euler is first order: the drift shrinks with the substep (the
    # equations are those of the energy below, or it would not vanish).
    coarse, fine = energy_drift(40), energy_drift(400)
    assert fine < 0.03 and coarse / fine > 5
    a = DiffRLCartPoleSwingUp(2, stochastic_init=False, dtype="float64")
    b = DiffRLCartPoleSwingUp(2, stochastic_init=False, dtype="float64")
    a.reset(seed=0), b.reset(seed=0)
    a.step(torch.full((2, 1), 5.0, dtype=F64))
    b.step(torch.ones(2, 1, dtype=F64))
    assert torch.equal(a.state["position"], b.state["position"])
    assert a.state["velocity"][0] > 0  # pushed towards +x


def test_the_mass_matrix_is_cached_over_substeps_as_in_the_reference():
    cached = DiffRLCartPoleSwingUp(8, seed=2, dtype="float64")
    fresh = DiffRLCartPoleSwingUp(8, seed=2, dtype="float64", mass_matrix_substeps=1)
    cached.reset(seed=2), fresh.reset(seed=2)
    action = torch.full((8, 1), 0.3, dtype=F64)
    cached.step(action), fresh.step(action)
    gap = (cached.state["angular_velocity"] - fresh.state["angular_velocity"]).abs()
    assert 0 < gap.max() < 1e-2  # close, but not the same integrator
    with pytest.raises(ValueError, match="mass_matrix_substeps must be a positive integer"):
        DiffRLCartPoleSwingUp(1, mass_matrix_substeps=0)


def test_the_track_limit_pushes_back():
    env = DiffRLCartPoleSwingUp(1, stochastic_init=False, dtype="float64")
    x = torch.tensor([4.5, -4.5, 3.0], dtype=F64)
    force = env.limit_force(x, torch.tensor([1.0, -1.0, 5.0], dtype=F64))
    assert torch.allclose(force, torch.tensor([-51.0, 51.0, 0.0], dtype=F64))


def test_gradients_match_central_differences():
    env = DiffRLCartPoleSwingUp(4, seed=0, dtype="float64", max_episode_steps=6)
    assert check_env_gradients(env, num_steps=5, seed=3)
