"""``ahac_stiffness``: an adaptive-horizon actor-critic driven by the window's stiffness.

pathgrad's earlier algorithm named ``ahac`` (kept so that its documented results
stay reproducible); the authors' AHAC (Georgiev et al., ICML 2024) is
:mod:`pathgrad.algo.ahac`.

SHAC whose actor window is not fixed: it is shortened while the dynamics
along it are stiff and lengthened while they are not. Everything else is
SHAC's: the bootstrapped objective (target-critic value at the truncation
point), the TD(lambda) critic targets and the Polyak target critic.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from pathgrad.algo.shac import SHAC, SHACCfg
from pathgrad.collector import DifferentiableRollout
from pathgrad.utils import configclass

__all__ = ["StiffnessAHAC", "StiffnessAHACCfg", "window_stiffness"]


def window_stiffness(
    end_observation: torch.Tensor, actions: list[torch.Tensor], *, retain_graph: bool = True
) -> torch.Tensor:
    """Per-env log growth ``[N]`` of the window's closed-loop sensitivity.

    One backward pass of the probe ``<u, o_h>`` (``o_h`` the window's end
    observation ``[N, D]``, ``u = 1 / sqrt(D)`` in every entry) gives, for
    each env ``i`` and step ``t < h``, ``g_it = |d<u, o_ih> / d a_it|``: how
    strongly the end state reacts to the action of step ``t``, through the
    dynamics and the policy's feedback (the product of the step Jacobians
    from ``t`` to ``h``). The stiffness of env ``i`` is
    ``log(max_t g_it / g_i,h-1)`` >= 0: zero where the sensitivity does not
    grow backward in time, about ``rho (h - 1)`` for a per-step growth rate
    ``rho``. Rows with no sensitivity at the last step are NaN (no reading);
    a reset inside the window leaves only the steps after it.

    Raises:
        ValueError: If ``actions`` is empty.
    """
    if not actions:
        raise ValueError("window_stiffness needs at least one action.")
    probe = torch.full_like(end_observation, 1.0 / math.sqrt(end_observation.shape[-1]))
    gradients = torch.autograd.grad(
        end_observation,
        actions,
        grad_outputs=probe,
        retain_graph=retain_graph,
        allow_unused=True,
    )
    rows = end_observation.shape[0]
    norms = torch.stack(
        [
            torch.zeros(rows, dtype=torch.float64, device=end_observation.device)
            if gradient is None
            else gradient.detach().reshape(rows, -1).to(torch.float64).norm(dim=1)
            for gradient in gradients
        ]
    )  # [h, N]
    last = norms[-1]
    growth = torch.log(norms.amax(dim=0)) - torch.log(last)
    return torch.where(last > 0.0, growth, torch.full_like(growth, float("nan")))


@configclass
class StiffnessAHACCfg(SHACCfg):
    """StiffnessAHAC config: SHAC's fields plus the horizon's.

    The trainer's ``segment_length`` is the window collected; the actor uses
    its first ``horizon`` steps (at most the window). Keep ``segment_length``
    at least ``max_horizon``.

    Attributes:
        min_horizon: Shortest actor window (steps).
        max_horizon: Longest actor window (steps); the first update uses it.
        stiffness_threshold: ``C``: the largest accepted mean log growth of
            the window's sensitivity (see :func:`window_stiffness`).
        horizon_lr: Dual-ascent step: steps of horizon per unit of stiffness
            above (or below) ``C``, per update.
    """

    min_horizon: int = 4
    max_horizon: int = 32
    stiffness_threshold: float = 3.0
    horizon_lr: float = 2.0

    def validate(self) -> None:
        """Check the horizon fields and SHAC's."""
        super().validate()
        if isinstance(self.min_horizon, bool) or int(self.min_horizon) != self.min_horizon:
            raise ValueError(f"min_horizon must be an integer, got {self.min_horizon!r}.")
        if isinstance(self.max_horizon, bool) or int(self.max_horizon) != self.max_horizon:
            raise ValueError(f"max_horizon must be an integer, got {self.max_horizon!r}.")
        self.min_horizon, self.max_horizon = int(self.min_horizon), int(self.max_horizon)
        if self.min_horizon < 1:
            raise ValueError(f"min_horizon must be at least 1, got {self.min_horizon}.")
        if self.max_horizon < self.min_horizon:
            raise ValueError(
                f"max_horizon must be at least min_horizon ({self.min_horizon}), "
                f"got {self.max_horizon}."
            )
        if not (math.isfinite(self.stiffness_threshold) and self.stiffness_threshold > 0.0):
            raise ValueError(
                f"stiffness_threshold must be positive and finite, got {self.stiffness_threshold}."
            )
        if not (math.isfinite(self.horizon_lr) and self.horizon_lr > 0.0):
            raise ValueError(f"horizon_lr must be positive and finite, got {self.horizon_lr}.")


class StiffnessAHAC(SHAC):
    """SHAC with a horizon adapted to the stiffness of the dynamics.

    Each window the trainer collects (``segment_length`` steps) trains the
    actor on its first ``h = min(horizon, window)`` steps: SHAC's objective,
    bootstrapped with ``gamma^h V_target(s_h)`` and divided by ``h``; the
    later steps get no actor gradient and, like the whole window, train the
    critic. Before the actor's backward pass one extra backward pass measures
    the window's stiffness ``sigma`` (:func:`window_stiffness`, mean over envs
    with a reading). After each update, dual ascent on the constraint
    ``sigma <= C`` moves the multiplier ``nu`` (in steps, bounded to
    ``[0, max_horizon - min_horizon]``): ``nu += horizon_lr (sigma - C)``
    with ``sigma`` averaged over the update's windows (and ranks); the next
    horizon is ``max_horizon - round(nu)``. Stiff windows shorten it, smooth
    ones lengthen it back. Updates with no finite reading leave ``nu`` as is.

    The probe passes through the trainer's action-adjoint hooks, so with
    ``action_adjoint_max_norm`` its sensitivities are clipped too (which caps
    the reading); the gradient-health record counts only the actor's pass.

    Args:
        cfg: StiffnessAHAC config.
        policy: The actor.
        observation_dim: Size of the observation (the critic's input).
    """

    algorithm_name = "ahac_stiffness"

    def __init__(self, cfg: StiffnessAHACCfg, policy: nn.Module, observation_dim: int) -> None:
        super().__init__(cfg, policy, observation_dim)
        self.cfg: StiffnessAHACCfg = cfg
        self.horizon_multiplier = 0.0
        self.horizon = cfg.max_horizon
        self.last_stiffness = float("nan")
        self._stiffness_readings: list[torch.Tensor] = []

    def _horizon_of(self, multiplier: float) -> int:
        return self.cfg.max_horizon - int(round(multiplier))

    def begin_update(self) -> None:
        """Start an update with the current horizon."""
        super().begin_update()
        self._stiffness_readings = []

    def accumulate_segment(self, rollout: DifferentiableRollout) -> None:
        """Measure the window's stiffness, then backpropagate its truncated objective."""
        if not self._update_active:
            raise RuntimeError("Call begin_update() before accumulating a segment.")
        if rollout.num_steps == 0:
            raise ValueError("StiffnessAHAC requires a non-empty differentiable rollout.")
        steps = min(self.horizon, rollout.num_steps)
        head = rollout.transitions[:steps]
        actions = [t.action for t in head if t.action.requires_grad]
        end = head[-1].info["final_observation"]
        if actions and end.requires_grad:
            with _frozen(rollout.action_gradient_stats):
                self._stiffness_readings.append(window_stiffness(end, actions))
        actor_window = DifferentiableRollout(
            rollout.initial_observation, head, rollout.action_gradient_stats
        )
        super().accumulate_segment(actor_window)
        if steps < rollout.num_steps:  # the critic learns from the whole window
            self._windows[-1] = self._critic_window(rollout, self._window_rewards(rollout)[1])

    def finish_update(self) -> dict[str, float]:
        """SHAC's actor and critic steps, then one dual-ascent step on the horizon."""
        horizon = self.horizon
        readings = torch.cat(self._stiffness_readings) if self._stiffness_readings else None
        metrics = super().finish_update()
        total, count = 0.0, 0.0
        if readings is not None:
            finite = readings[torch.isfinite(readings)]
            total, count = float(finite.sum()), float(finite.numel())
        summed = self._average_across_ranks((), torch.tensor([total, count], dtype=torch.float64))
        total, count = float(summed[0]), float(summed[1])
        stiffness = total / count if count > 0.0 else float("nan")
        if math.isfinite(stiffness):
            step = self.cfg.horizon_lr * (stiffness - self.cfg.stiffness_threshold)
            span = float(self.cfg.max_horizon - self.cfg.min_horizon)
            self.horizon_multiplier = min(max(self.horizon_multiplier + step, 0.0), span)
            self.horizon = self._horizon_of(self.horizon_multiplier)
        self.last_stiffness = stiffness
        self._stiffness_readings = []
        metrics.update(
            {
                "horizon": float(horizon),
                "stiffness": stiffness,
                "horizon_multiplier": self.horizon_multiplier,
            }
        )
        return metrics

    def cancel_update(self) -> None:
        """Abandon the active update and its stiffness readings."""
        super().cancel_update()
        self._stiffness_readings = []

    def state_dict(self) -> dict[str, Any]:
        """SHAC's state plus the multiplier, the horizon and the last reading."""
        return {
            **super().state_dict(),
            "horizon": {
                "multiplier": self.horizon_multiplier,
                "horizon": self.horizon,
                "last_stiffness": self.last_stiffness,
            },
        }

    def validate_state_dict(self, state: dict[str, Any]) -> None:
        """Raise ``ValueError`` if ``state`` is not an ahac_stiffness state fitting this config."""
        super().validate_state_dict(state)
        saved = state.get("horizon")
        if not isinstance(saved, dict) or not {"multiplier", "horizon"} <= set(saved):
            raise ValueError(
                "Checkpoint entry 'algorithm' has no 'horizon' (not an ahac_stiffness state)."
            )
        multiplier = float(saved["multiplier"])
        span = self.cfg.max_horizon - self.cfg.min_horizon
        if not 0.0 <= multiplier <= span:
            raise ValueError(
                f"algorithm.horizon.multiplier {multiplier} is outside [0, {span}] "
                "(max_horizon - min_horizon of this config)."
            )
        if int(saved["horizon"]) != self._horizon_of(multiplier):
            raise ValueError(
                f"algorithm.horizon.horizon {saved['horizon']} does not follow from the "
                f"multiplier {multiplier} and max_horizon {self.cfg.max_horizon}."
            )

    def load_state_dict(self, state: dict[str, Any], *, resume_scheduler: str = "restore") -> None:
        """Restore SHAC's state and the horizon's."""
        super().load_state_dict(state, resume_scheduler=resume_scheduler)
        saved = state["horizon"]
        self.horizon_multiplier = float(saved["multiplier"])
        self.horizon = int(saved["horizon"])
        self.last_stiffness = float(saved.get("last_stiffness", float("nan")))


class _frozen:
    """Restore a gradient-health record after the probe's backward pass."""

    def __init__(self, stats: Any) -> None:
        self.stats = stats
        self.saved: dict[str, torch.Tensor] = {}

    def __enter__(self) -> None:
        if self.stats is not None:
            self.saved = {k: v.clone() for k, v in vars(self.stats).items() if torch.is_tensor(v)}

    def __exit__(self, *exc: object) -> None:
        for name, value in self.saved.items():
            getattr(self.stats, name).copy_(value)
