"""AHAC: adaptive-horizon actor-critic, as its authors define it (Georgiev et al., ICML 2024).

SHAC's actor objective on a window whose length the contact signal sets: one
dual variable per step of the horizon ``H`` compares the step's mean contact
value with a threshold and moves ``H`` (:mod:`pathgrad.algo.adaptive_horizon`);
each update steps exactly ``round(H)`` env steps (the trainer asks
:meth:`AHAC.window_steps`). Two independent critics, no target network: the
smaller value bootstraps the actor and the TD(lambda) targets, and both critics
train on those targets until their loss stops moving
(:func:`~pathgrad.algo.twin_critic.fit_to_convergence`). The code facts this
follows, and its oddities, are in docs/research/ahac_authors_facts.md.

Sign: as in the authors' code (which produced the published results), contact
above the threshold lengthens ``H``; the paper's stated intent (shorten the
horizon in stiff contact) reads the other way: ``contact_lengthens_horizon:
false`` flips it.
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

from pathgrad.algo.adaptive_horizon import DualHorizon, contact_values
from pathgrad.algo.shac import SHAC, CriticCfg
from pathgrad.algo.twin_critic import TwinCritic, fit_to_convergence
from pathgrad.collector import DifferentiableRollout
from pathgrad.core.configclasses import LRSchedulerCfg, OptimizerCfg, _coerce, configclass

__all__ = ["AHAC", "AHACCfg", "CONTACT_INFO_KEYS"]

CONTACT_INFO_KEYS = ("contact_forces", "accelerations")

_STIFFNESS = (
    "is a field of 'ahac_stiffness' (pathgrad's former 'ahac', whose horizon follows the "
    "window's stiffness); set algorithm.name: ahac_stiffness to run it, or use "
    "contact_threshold for the authors' AHAC"
)
_NO_TARGET = (
    "AHAC has no target critic (it bootstraps from its online critics); leave the field out "
    "(pathgrad's former 'ahac', which has one, is algorithm.name: ahac_stiffness)"
)


@configclass
class AHACCfg(CriticCfg):
    """AHAC config: the critic's fields (with the authors' defaults) plus the horizon's.

    ``critic_epochs`` is the most critic passes per update (the authors' 64);
    ``critic_max_grad_norm`` 0 leaves the critic unclipped. AHAC has no target
    critic, so no ``target_critic_alpha``: a config that sets it gets a
    one-line error.

    Attributes:
        critic_stop_tolerance: Critic training stops when the last 5 pass-mean
            losses change by less than this per pass on average.
        critic_lr_scheduler: The critic's learning-rate curve (the authors':
            linear to 1e-5); ``None``: the actor's.
        min_horizon: Shortest window, and the first one.
        max_horizon: Longest window.
        contact_threshold: ``C``, compared with each step's mean contact value.
        horizon_lr: Base rate of the dual and horizon steps.
        horizon_lr_scheduler: Its curve over updates (the authors': linear to 1e-5).
        contact_lengthens_horizon: The authors' code's sign (contact above ``C``
            lengthens the window); ``False``: it shortens it.
    """

    # fields of other algorithms: a one-line error says what to do (the first listed wins)
    RETIRED_FIELDS = MappingProxyType(
        {"stiffness_threshold": _STIFFNESS, "target_critic_alpha": _NO_TARGET}
    )

    optimizer: OptimizerCfg = OptimizerCfg(learning_rate=2e-3, kwargs={"betas": [0.7, 0.95]})
    lr_scheduler: LRSchedulerCfg = LRSchedulerCfg(name="linear", kwargs={"end_factor": 0.005})
    critic_hidden_sizes: list[int] = [400, 200, 100]
    critic_layer_norm: bool = True
    critic_optimizer: OptimizerCfg = OptimizerCfg(learning_rate=5e-4, kwargs={"betas": [0.7, 0.95]})
    critic_epochs: int = 64
    critic_max_grad_norm: float = 0.0
    critic_stop_tolerance: float = 0.2
    critic_lr_scheduler: LRSchedulerCfg | None = LRSchedulerCfg(
        name="linear", kwargs={"end_factor": 0.02}
    )
    min_horizon: int = 8
    max_horizon: int = 64
    contact_threshold: float = 500.0
    horizon_lr: float = 5e-4
    horizon_lr_scheduler: LRSchedulerCfg = LRSchedulerCfg(
        name="linear", kwargs={"end_factor": 0.02}
    )
    contact_lengthens_horizon: bool = True

    def validate(self) -> None:
        """Check the horizon fields and the critic's."""
        super().validate()
        try:
            value = _coerce(self.horizon_lr_scheduler, LRSchedulerCfg, "horizon_lr_scheduler")
            value.validate()
        except ValueError as error:
            raise ValueError(f"horizon_lr_scheduler: {error}") from None
        self.horizon_lr_scheduler = value
        for name in ("min_horizon", "max_horizon"):
            value = getattr(self, name)
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
            setattr(self, name, int(value))
        if self.max_horizon < self.min_horizon:
            raise ValueError(
                f"max_horizon must be at least min_horizon ({self.min_horizon}), "
                f"got {self.max_horizon}."
            )
        for name in ("contact_threshold", "horizon_lr", "critic_stop_tolerance"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}.")


class AHAC(SHAC):
    """The authors' AHAC on windows of ``round(H)`` steps (see the module docstring).

    Needs an env that reports ``info["contact_forces"]`` and
    ``info["accelerations"]`` (``[N, bodies, 6]``) at every step.

    Args:
        cfg: AHAC config.
        policy: The actor.
        observation_dim: Size of the observation (the critics' input).
    """

    algorithm_name = "ahac"
    step_info_keys = CONTACT_INFO_KEYS  # what compiled rollout chunks must not drop
    sets_window_length = True
    compile_blocker = (
        f"AHAC reads info{list(CONTACT_INFO_KEYS)} of every step, which only Newton envs "
        "report, and torch cannot compile a Newton step"
    )

    @classmethod
    def from_config(cls, cfg: AHACCfg, policy: nn.Module, env: Any = None) -> AHAC:
        """Built with critics sized by ``env``, which must report contacts.

        Raises:
            ValueError: If ``env`` is None or reports no contact forces.
        """
        observation_dim, _ = cls.env_sizes(env)
        if not getattr(env, "provides_contact_signal", False):
            raise ValueError(
                f"Algorithm 'ahac' needs contact forces from the env (info['contact_forces'] and "
                f"info['accelerations'] every step); {type(env).__name__} reports none. Use "
                "'ahac_stiffness' (its horizon follows the window's stiffness) for envs without "
                "contacts."
            )
        return cls(cfg, policy, observation_dim=observation_dim)

    def __init__(self, cfg: AHACCfg, policy: nn.Module, observation_dim: int) -> None:
        super().__init__(cfg, policy, observation_dim)
        self.cfg: AHACCfg = cfg
        self.adaptive_horizon = DualHorizon(
            cfg.min_horizon,
            cfg.max_horizon,
            cfg.contact_threshold,
            cfg.horizon_lr,
            cfg.horizon_lr_scheduler,
            contact_lengthens=cfg.contact_lengthens_horizon,
        )
        self._contacts: list[torch.Tensor] = []

    @property
    def lr_scheduler_cfgs(self) -> tuple[LRSchedulerCfg, ...]:
        """Every curve that a budget binds: actor, critic and horizon rate."""
        cfg = self.cfg
        critic = cfg.critic_lr_scheduler or cfg.lr_scheduler
        return (cfg.lr_scheduler, critic, cfg.horizon_lr_scheduler)

    def window_steps(self, default: int) -> int:
        """Env steps of the next update: ``round(H)`` (the trainer's ``default`` is unused)."""
        return self.adaptive_horizon.steps

    def _make_critic(self, observation_dim: int) -> nn.Module:
        cfg = self.cfg
        return TwinCritic(
            observation_dim, cfg.critic_hidden_sizes, cfg.critic_activation, cfg.critic_layer_norm
        )

    def _make_target_critic(self) -> nn.Module | None:
        return None  # AHAC bootstraps from the online critics

    def _bootstrap_values(self, observations: torch.Tensor) -> torch.Tensor:
        """The online critics' smaller value, differentiable in the state only."""
        if self.observation_transform is not None:
            observations = self.observation_transform(observations)
        frozen = {name: p.detach() for name, p in self.critic.named_parameters()}
        return functional_call(self.critic, frozen, (observations,)).squeeze(-1)

    def _target_values(self, observations: torch.Tensor) -> torch.Tensor:
        """The online critics' smaller value (the TD(lambda) targets are built without grad)."""
        return self._bootstrap_values(observations)

    def begin_update(self) -> None:
        """Start an update (and forget the contact values of an earlier one)."""
        super().begin_update()
        self._contacts = []

    def accumulate_segment(self, rollout: DifferentiableRollout) -> None:
        """SHAC's window objective; keep the window's contact values ``c_t``."""
        if rollout.num_steps > 0:
            self._contacts.append(self._window_contacts(rollout))
        super().accumulate_segment(rollout)

    @staticmethod
    def _window_contacts(rollout: DifferentiableRollout) -> torch.Tensor:
        """Mean contact value over envs of every step ``[T]`` (float64)."""
        values = []
        for transition in rollout.transitions:
            info = transition.info
            missing = [key for key in CONTACT_INFO_KEYS if key not in info]
            if missing:
                raise ValueError(
                    f"AHAC needs info{missing} from every env step (per-body contact "
                    "wrenches and accelerations, [num_envs, bodies, 6])."
                )
            values.append(contact_values(info["contact_forces"], info["accelerations"]).mean())
        return torch.stack(values)

    def finish_update(self) -> dict[str, float]:
        """Actor and critic steps, then the dual and horizon steps (rank-averaged signal)."""
        steps = self.adaptive_horizon.steps
        contacts = torch.cat(self._contacts) if self._contacts else torch.zeros(0)
        metrics = super().finish_update()
        contacts = contacts.to(device=self.device, dtype=torch.float64)
        contacts = self._average_across_ranks((), contacts).cpu()
        rate = self.adaptive_horizon.rate
        self.adaptive_horizon.update(contacts)
        self._contacts = []
        duals = self.adaptive_horizon.duals
        metrics.update(
            {
                "horizon": float(steps),
                "horizon_value": self.adaptive_horizon.horizon,
                "contact_mean": float(contacts.mean()) if contacts.numel() else float("nan"),
                "dual_mean": float(duals.mean()),
                "horizon_lr": rate,
            }
        )
        return metrics

    def cancel_update(self) -> None:
        """Abandon the active update and its contact values."""
        super().cancel_update()
        self._contacts = []

    def _fit_critic(self, inputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """Both critics to convergence (at most ``critic_epochs`` unshuffled passes)."""
        passes, loss = fit_to_convergence(
            self.critic,
            self.critic_optimizer,
            inputs,
            targets,
            minibatches=self.cfg.critic_minibatches,
            max_passes=self.cfg.critic_epochs,
            tolerance=self.cfg.critic_stop_tolerance,
            max_grad_norm=self.cfg.critic_max_grad_norm,
            average=lambda shared: self._average_across_ranks(self.critic.parameters(), shared),
        )
        return {"value_loss": loss, "critic_passes": float(passes)}

    def prepare_schedule(self, estimated_updates: int, remaining_updates: int) -> None:
        """Bind the actor's, the critic's and the horizon rate's curves to the budget."""
        super().prepare_schedule(estimated_updates, remaining_updates)
        self.adaptive_horizon.schedule.bind_budget(remaining_updates)

    def state_dict(self) -> dict[str, Any]:
        """SHAC's state (no target critic) plus ``H``, the duals and their rate's schedule."""
        return {**super().state_dict(), "adaptive_horizon": self.adaptive_horizon.state_dict()}

    def validate_state_dict(self, state: dict[str, Any]) -> None:
        """Raise ``ValueError`` naming the first field of ``state`` that does not fit."""
        saved = state.get("horizon")
        if isinstance(saved, dict) and "multiplier" in saved:
            raise ValueError(
                "Checkpoint entry 'algorithm' is an 'ahac_stiffness' state (pathgrad's former "
                "'ahac'); resume it with algorithm.name: ahac_stiffness."
            )
        super().validate_state_dict(state)
        if "adaptive_horizon" not in state:
            raise ValueError(
                "Checkpoint entry 'algorithm' has no 'adaptive_horizon' (not an AHAC state)."
            )
        self.adaptive_horizon.validate_state_dict(
            state["adaptive_horizon"], "algorithm.adaptive_horizon"
        )

    def load_state_dict(self, state: dict[str, Any], *, resume_scheduler: str = "restore") -> None:
        """Restore SHAC's state and the horizon's (``restart`` restarts its rate too)."""
        super().load_state_dict(state, resume_scheduler=resume_scheduler)
        self.adaptive_horizon.load_state_dict(
            state["adaptive_horizon"], restore_schedule=resume_scheduler == "restore"
        )
