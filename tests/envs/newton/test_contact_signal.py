"""The contact signal of Newton envs (AHAC): shapes, values, and no effect on the step."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("newton")

from helpers import assert_same_windows  # noqa: E402
from pathgrad.envs.newton import DiffRLAnt  # noqa: E402


def test_diffrl_ant_reports_per_body_contact_wrenches_and_accelerations():
    env = DiffRLAnt(2, stochastic_init=False, seed=0)
    assert env.provides_contact_signal
    env.reset(seed=0)
    total = 0.0
    for _ in range(60):  # fall and land on the feet
        *_, info = env.step(torch.zeros(2, env.action_dim))
        total = total + info["contact_forces"]
    forces, accelerations = info["contact_forces"], info["accelerations"]
    bodies = len(env.body_labels)
    assert forces.shape == accelerations.shape == (2, bodies, 6)
    assert not forces.requires_grad and not accelerations.requires_grad
    assert bool(torch.isfinite(forces).all() and torch.isfinite(accelerations).all())
    feet = [i for i, label in enumerate(env.body_labels) if label.endswith("_foot")]
    others = [i for i in range(bodies) if i not in feet]
    assert torch.equal(total[:, others], torch.zeros_like(total[:, others]))  # never touch
    assert bool((total[:, feet, 2] > 0.0).all())  # the ground pushes every foot up
    # on average over the second, the ground carries the weight (within the bounce)
    mass = float(env.simulation.model.body_mass.numpy().reshape(2, -1)[0].sum())
    assert total[:, :, 2].sum(1).mean() / 60 == pytest.approx(mass * 9.81, rel=0.5)


def test_the_signal_leaves_observations_rewards_and_gradients_bit_equal():
    env = DiffRLAnt(2, seed=0)
    twin = DiffRLAnt(2, seed=0)
    twin.simulation.contact_signal = None  # before the first step captures the graph
    assert (
        not twin.provides_contact_signal
        and "contact_forces" not in twin.step(torch.zeros(2, twin.action_dim))[-1]
    )
    twin.reset(seed=0)
    assert_same_windows(env, twin, steps=4)
