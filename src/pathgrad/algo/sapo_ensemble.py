"""SAPO-ensemble: pathgrad's earlier SAPO variant, kept for its measured configs.

The authors' SAPO is :mod:`pathgrad.algo.sapo`. This variant differs from it:
a Polyak target critic, an ensemble combined by one reduction (``mean`` or
``min``) for both the bootstrap and the targets, the entropy ``-log pi(a_t)``
of the taken action without offset or scale, ``alpha`` from 0.1 towards the
target ``-A``, and the networks of the policy and critic configured as SHAC's.

Maximum-entropy first-order training: SHAC's short-horizon objective with an
entropy bonus at every step, ``sum_t gamma^t (r_t + alpha H_t) + gamma^h V(s_h)``,
whose analytic gradient reaches the policy through the simulation and through
the reparameterized sample of ``H_t``. The temperature ``alpha`` is learned so
that the policy's entropy tracks a target (as in SAC), and the soft values are
estimated by an ensemble of critics trained on TD(lambda) targets of the soft
rewards ``r_t + alpha H_t``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from pathgrad.algo.sapo import SIZED_BY_OBSERVATION_AND_ACTION, CriticEnsemble
from pathgrad.algo.schedules import build_optimizer
from pathgrad.algo.shac import SHAC, SHACCfg
from pathgrad.collector import DifferentiableRollout
from pathgrad.core.configclasses import OptimizerCfg, _coerce, configclass
from pathgrad.core.state_checks import check_optimizer_groups

__all__ = ["SAPOEnsemble", "SAPOEnsembleCfg"]

CRITIC_REDUCTIONS = ("mean", "min")


@configclass
class SAPOEnsembleCfg(SHACCfg):
    """SAPO-ensemble config: SHAC's fields plus the temperature's and the ensemble's.

    Attributes:
        num_critics: Critics in the ensemble (each its own MLP, same targets).
        critic_reduction: How the ensemble's values combine into one: ``mean``
            or ``min`` (the pessimistic clipped estimate).
        init_temperature: Initial entropy temperature ``alpha``.
        target_entropy: Entropy the temperature steers towards, in nats of
            the action vector measured in the normalized action box
            ``[-1, 1]^A``; ``None`` means ``-A`` (SAC's heuristic).
        temperature_optimizer: Optimizer of ``log alpha`` (one step per update).
        learn_temperature: ``False`` keeps ``alpha`` at ``init_temperature``.
    """

    num_critics: int = 2
    critic_reduction: str = "mean"
    init_temperature: float = 0.1
    target_entropy: float | None = None
    temperature_optimizer: OptimizerCfg = OptimizerCfg(learning_rate=5e-3)
    learn_temperature: bool = True

    def validate(self) -> None:
        """Check the temperature and ensemble fields and SHAC's."""
        super().validate()
        self.temperature_optimizer = _coerce(
            self.temperature_optimizer, OptimizerCfg, "temperature_optimizer"
        )
        if self.num_critics < 1:
            raise ValueError(f"num_critics must be at least 1, got {self.num_critics}.")
        if self.critic_reduction not in CRITIC_REDUCTIONS:
            raise ValueError(
                f"critic_reduction must be one of {list(CRITIC_REDUCTIONS)}, "
                f"got '{self.critic_reduction}'."
            )
        if not (self.init_temperature > 0.0 and math.isfinite(self.init_temperature)):
            raise ValueError(f"init_temperature must be positive, got {self.init_temperature}.")
        if self.target_entropy is not None and not math.isfinite(self.target_entropy):
            raise ValueError("target_entropy must be a finite number or null.")


class SAPOEnsemble(SHAC):
    """Maximum-entropy SHAC with a learned temperature and a critic ensemble.

    Entropy ``H_t = -log pi(a_t | s_t)`` of the sampled action, in the
    normalized action box (the log of the action scale is added back, so
    ``target_entropy`` does not depend on the action units); with a
    ``squash``-ed policy it includes tanh's change of variables. Per window
    the actor objective is SHAC's with rewards ``reward_scale r_t + alpha H_t``
    (``alpha`` a constant for the actor), and the critics regress the
    TD(lambda) targets of the same soft rewards. After the actor and critic
    steps, ``log alpha`` takes one step on ``log alpha (H_mean - target)``:
    ``alpha`` falls while the entropy is above the target and rises below it.

    Args:
        cfg: SAPO-ensemble config.
        policy: The actor; its outputs must carry ``log_prob``.
        observation_dim: Size of the observation (the critics' input).
        action_dim: Size of the action (the default target entropy).
    """

    algorithm_name = "sapo_ensemble"

    @classmethod
    def from_config(cls, cfg: SAPOEnsembleCfg, policy: nn.Module, env: Any = None) -> Any:
        """Built with critics sized by ``env``'s observation, the target entropy by its action."""
        return cls(cfg, policy, *cls.env_sizes(env, SIZED_BY_OBSERVATION_AND_ACTION))

    def __init__(
        self, cfg: SAPOEnsembleCfg, policy: nn.Module, observation_dim: int, action_dim: int
    ) -> None:
        super().__init__(cfg, policy, observation_dim)
        self.cfg: SAPOEnsembleCfg = cfg
        parameter = next(policy.parameters())
        self.target_entropy = (
            -float(action_dim) if cfg.target_entropy is None else float(cfg.target_entropy)
        )
        initial = math.log(cfg.init_temperature)
        self.log_temperature = nn.Parameter(
            torch.tensor(initial, dtype=parameter.dtype, device=parameter.device),
            requires_grad=cfg.learn_temperature,
        )
        self.temperature_optimizer = build_optimizer(
            [self.log_temperature], cfg.temperature_optimizer
        )
        self._entropy_sum = torch.zeros((), dtype=torch.float64)
        self._entropy_count = 0

    @property
    def temperature(self) -> float:
        """The current ``alpha``."""
        return float(self.log_temperature.detach().exp())

    def _make_critic(self, observation_dim: int) -> nn.Module:
        cfg = self.cfg
        return CriticEnsemble(
            cfg.num_critics,
            observation_dim,
            cfg.critic_hidden_sizes,
            cfg.critic_activation,
            cfg.critic_layer_norm,
        )

    def _values(self, network: nn.Module, observations: torch.Tensor) -> torch.Tensor:
        """The ensemble's combined value (mean or min over its members)."""
        values = super()._values(network, observations)  # [K, ...]
        return values.mean(0) if self.cfg.critic_reduction == "mean" else values.amin(0)

    def _action_entropies(self, rollout: DifferentiableRollout) -> torch.Tensor:
        """``-log pi(a_t | s_t)`` ``[T, N]`` in the normalized action box, with its graph."""
        log_probs = rollout.policy_outputs("log_prob")
        if log_probs is None:
            raise ValueError(
                "SAPO-ensemble needs a stochastic policy whose outputs carry 'log_prob'."
            )
        if getattr(self.policy, "squash", False):
            log_probs = log_probs + self.policy.action_half_range.log().sum()
        return -log_probs

    def _window_rewards(self, rollout: DifferentiableRollout) -> tuple[torch.Tensor, torch.Tensor]:
        """Soft rewards ``reward_scale r_t + alpha H_t`` for the actor and the critics."""
        entropies = self._action_entropies(rollout)
        finite = torch.isfinite(entropies)
        self._entropy_sum = self._entropy_sum + torch.where(
            finite, entropies.detach(), torch.zeros_like(entropies)
        ).sum().to(self._entropy_sum)
        self._entropy_count += int(finite.sum())
        rewards = rollout.rewards * self.cfg.reward_scale + self.temperature * entropies
        return rewards, rewards.detach()

    def begin_update(self) -> None:
        """Start an update; the entropy mean starts again."""
        super().begin_update()
        self._entropy_sum = torch.zeros((), dtype=torch.float64)
        self._entropy_count = 0

    def finish_update(self) -> dict[str, float]:
        """SHAC's actor and critic steps, then one temperature step."""
        metrics = super().finish_update()
        entropy = self._entropy_sum / max(self._entropy_count, 1)
        if self.synchronizer is not None:  # every rank steers by the mean over all
            entropy = self._average_across_ranks([], entropy.reshape(1))[0]
        if metrics["skipped_update"] == 0.0 and self.cfg.learn_temperature:
            gap = float(entropy) - self.target_entropy
            self.temperature_optimizer.zero_grad(set_to_none=True)
            self.log_temperature.grad = torch.full_like(self.log_temperature, gap)
            self.temperature_optimizer.step()
        metrics["temperature"] = self.temperature
        metrics["action_entropy"] = float(entropy)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """SHAC's state plus the temperature and its optimizer."""
        return {
            **super().state_dict(),
            "log_temperature": self.log_temperature.detach().clone(),
            "temperature_optimizer": self.temperature_optimizer.state_dict(),
        }

    def validate_state_dict(self, state: dict[str, Any]) -> None:
        """Raise ``ValueError`` if ``state`` is not a SAPO state of this shape."""
        for key in ("log_temperature", "temperature_optimizer"):
            if key not in state:
                raise ValueError(f"Checkpoint entry 'algorithm' has no '{key}' (not a SAPO state).")
        super().validate_state_dict(state)
        check_optimizer_groups(
            "algorithm.temperature_optimizer",
            state["temperature_optimizer"],
            self.temperature_optimizer,
        )

    def load_state_dict(self, state: dict[str, Any], *, resume_scheduler: str = "restore") -> None:
        """Restore SHAC's state, the temperature and its optimizer."""
        super().load_state_dict(state, resume_scheduler=resume_scheduler)
        with torch.no_grad():
            self.log_temperature.copy_(state["log_temperature"])
        self.temperature_optimizer.load_state_dict(state["temperature_optimizer"])
