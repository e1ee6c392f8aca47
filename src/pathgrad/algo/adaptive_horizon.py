"""AHAC's horizon: the contact signal and the per-step dual variables that move it.

Georgiev et al. (ICML 2024), as the authors' code does it (facts in
docs/research/ahac_authors_facts.md): the contact value of a step and env is
the Frobenius norm, over bodies and the 6 wrench components, of the contact
wrench divided elementwise by the body's spatial acceleration with every
component's magnitude floored at 1. Its mean over envs ``c_t`` drives one dual
variable per step of the current horizon ``H``::

    lambda_t <- lambda_t + lr (c_t - C)
    H        <- clip(H + lr sum_t lambda_t, min_horizon, max_horizon)

and each update then steps ``round(H)`` env steps.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from pathgrad.algo.schedules import LearningRateSchedule
from pathgrad.core.configclasses import LRSchedulerCfg

__all__ = ["DualHorizon", "contact_values"]


def contact_values(contact_forces: torch.Tensor, accelerations: torch.Tensor) -> torch.Tensor:
    """Contact value ``[N]`` per env of per-body wrenches and accelerations ``[N, B, 6]``.

    ``|| f / a ||_F`` over bodies and components, with every acceleration
    component's magnitude floored at 1 and its sign kept (``|a| >= 1``). The
    authors' last version floors ``max(a, 1)`` instead, which maps every
    negative component to +1; since the norm drops the sign, the two differ only
    for components below -1 (divided by 1 there, by ``|a|`` here). Computed in
    float64, without a graph.

    Raises:
        ValueError: If the shapes differ or are not ``[N, B, 6]``.
    """
    if contact_forces.shape != accelerations.shape or contact_forces.ndim != 3:
        raise ValueError(
            "contact_forces and accelerations must both be [num_envs, bodies, 6], got "
            f"{tuple(contact_forces.shape)} and {tuple(accelerations.shape)}."
        )
    forces = contact_forces.detach().to(torch.float64)
    acceleration = accelerations.detach().to(torch.float64)
    floored = torch.where(
        acceleration >= 0.0, acceleration.clamp(min=1.0), acceleration.clamp(max=-1.0)
    )
    return (forces / floored).flatten(1).norm(dim=1)


class DualHorizon:
    """The horizon ``H`` (a float) and one dual variable per step of ``round(H)``.

    ``H`` starts at ``min_horizon`` and the duals at 0. When ``round(H)``
    changes, the duals are trimmed, or padded with the last one: the per-step
    vector is kept (the authors' code instead refills every step with
    ``lambda_0``, so that only one value survives an update). The rate
    follows ``schedule`` (a closed-form curve over updates, like the
    optimizers' rates, so it resumes exactly). The duals are not clamped at 0,
    as in the authors' code.

    Args:
        min_horizon: Lower bound of ``H`` and its start.
        max_horizon: Upper bound of ``H``.
        threshold: ``C``, the contact value the duals compare against.
        rate: The base rate of the dual and horizon steps.
        schedule: The rate's curve (e.g. linear to ``1e-5 / rate``).
        contact_lengthens: The authors' code's sign: contact above ``C``
            lengthens ``H``. ``False`` flips the horizon step (contact above
            ``C`` shortens ``H``, the paper's stated intent).
    """

    def __init__(
        self,
        min_horizon: int,
        max_horizon: int,
        threshold: float,
        rate: float,
        schedule: LRSchedulerCfg,
        *,
        contact_lengthens: bool = True,
    ) -> None:
        self.min_horizon, self.max_horizon = int(min_horizon), int(max_horizon)
        self.threshold = float(threshold)
        self.sign = 1.0 if contact_lengthens else -1.0
        self.schedule = LearningRateSchedule(schedule, [float(rate)])
        self.horizon = float(self.min_horizon)
        self.duals = torch.zeros(self.steps, dtype=torch.float64)

    @property
    def steps(self) -> int:
        """Env steps of the next window: ``round(H)`` (Python's rounding)."""
        return int(round(self.horizon))

    @property
    def rate(self) -> float:
        """The rate of the next update."""
        return self.schedule.learning_rate(
            self.schedule.step_count, self.schedule.base_learning_rates[0]
        )

    def update(self, contact: torch.Tensor) -> None:
        """One dual step on the window's contact values ``c_t`` ``[T]``, then one on ``H``.

        A window shorter than ``round(H)`` (the last one of an env-step budget)
        moves its first ``T`` duals. A non-finite reading moves nothing (the
        rate still advances).

        Raises:
            ValueError: If ``contact`` is longer than the duals.
        """
        contact = contact.detach().to(torch.float64).reshape(-1).cpu()
        if contact.numel() > self.duals.numel():
            raise ValueError(
                f"{contact.numel()} contact values for {self.duals.numel()} duals (round(H))."
            )
        rate = self.rate
        if contact.numel() > 0 and bool(torch.isfinite(contact).all()):
            self.duals[: contact.numel()] += rate * (contact - self.threshold)
            step = self.sign * rate * float(self.duals.sum())
            self.horizon = min(max(self.horizon + step, self.min_horizon), self.max_horizon)
            self._fit_duals()
        self.schedule.step_count += 1

    def _fit_duals(self) -> None:
        """Trim the duals to ``round(H)``, or pad them with the last one."""
        steps, count = self.steps, self.duals.numel()
        if steps < count:
            self.duals = self.duals[:steps].clone()
        elif steps > count:
            self.duals = torch.cat([self.duals, self.duals[-1:].expand(steps - count)])

    def state_dict(self) -> dict[str, Any]:
        """``H``, the duals and the rate's schedule."""
        return {
            "horizon": self.horizon,
            "duals": self.duals.tolist(),
            "schedule": self.schedule.state_dict(),
        }

    def validate_state_dict(self, state: Any, name: str) -> None:
        """Raise ``ValueError`` naming the first bad field of ``state`` (under ``name``)."""
        if not isinstance(state, dict):
            raise ValueError(f"{name} must be a mapping, got {type(state).__name__}.")
        for key in ("horizon", "duals", "schedule"):
            if key not in state:
                raise ValueError(f"{name} has no '{key}'.")
        horizon = state["horizon"]
        if isinstance(horizon, bool) or not isinstance(horizon, int | float):
            raise ValueError(f"{name}.horizon must be a number, got {horizon!r}.")
        if not self.min_horizon <= float(horizon) <= self.max_horizon:
            raise ValueError(
                f"{name}.horizon {horizon} is outside [{self.min_horizon}, {self.max_horizon}] "
                "(min_horizon and max_horizon of this config)."
            )
        duals = state["duals"]
        if not isinstance(duals, list) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in duals
        ):
            raise ValueError(f"{name}.duals must be a list of finite numbers.")
        if len(duals) != int(round(float(horizon))):
            raise ValueError(
                f"{name}.duals has {len(duals)} values, expected round(horizon) = "
                f"{int(round(float(horizon)))}."
            )
        schedule = state["schedule"]
        if not isinstance(schedule, dict) or not {
            "step_count",
            "bound_horizon",
            "base_learning_rates",
        } <= set(schedule):
            raise ValueError(
                f"{name}.schedule must hold step_count, bound_horizon and base_learning_rates."
            )

    def load_state_dict(self, state: dict[str, Any], *, restore_schedule: bool = True) -> None:
        """Restore :meth:`state_dict`; ``restore_schedule=False`` restarts the rate's curve."""
        self.horizon = float(state["horizon"])
        self.duals = torch.tensor(state["duals"], dtype=torch.float64)
        if restore_schedule:
            self.schedule.load_state_dict(state["schedule"])
        else:
            self.schedule.restart()
