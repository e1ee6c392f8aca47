"""A contact buffer too small for the robot is named, once, with the setting that fixes it.

Newton drops the contacts that do not fit in its buffer and prints a line from
its kernel on every substep that drops some: bodies then sink into the ground
or pass through each other, and a training log fills with identical lines.
:class:`ContactCapacityWatch` reads the most contacts a substep has needed
(:meth:`NewtonSimulation.contact_overflow`) after the first step and then
every :attr:`ContactCapacityWatch.every` steps (a device synchronisation
each), and warns once; ``pathgrad check-env`` fails its rollout on it.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

__all__ = ["ContactCapacityWatch", "contact_capacity_problems"]


def contact_capacity_problems(env: Any) -> list[str]:
    """One line when a substep of ``env`` has needed more contacts than fit, else none."""
    simulation = env.simulation
    peak = simulation.contact_overflow()
    if peak is None:
        return []
    pairs = max(1, int(simulation.model.shape_contact_pair_count))
    per_pair = env.contacts_per_shape_pair
    setting = "Newton's estimate" if per_pair is None else f"contacts_per_shape_pair={per_pair}"
    return [
        f"contacts: a substep found {peak} contacts but the buffer holds "
        f"{simulation.contact_capacity} ({setting}, {pairs} shape pairs over "
        f"{env.num_envs} envs); Newton drops the rest, so bodies sink into the ground or "
        f"pass through each other. Set contacts_per_shape_pair to at least "
        f"{math.ceil(peak / pairs)} (env.cfg or the class attribute)."
    ]


class ContactCapacityWatch:
    """Warns once when the contact buffer has overflowed (checked every ``every`` steps)."""

    every = 256

    def __init__(self) -> None:
        self.steps = 0
        self.warned = False

    def after_step(self, env: Any) -> None:
        self.steps += 1
        if self.warned or self.steps % self.every != 1:
            return
        problems = contact_capacity_problems(env)
        if problems:
            self.warned = True
            warnings.warn(f"{type(env).__name__}: {problems[0]}", RuntimeWarning, stacklevel=2)
