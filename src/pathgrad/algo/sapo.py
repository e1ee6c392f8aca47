"""SAPO: soft analytic policy optimization (Xing et al., ICLR 2025), as its authors run it.

SHAC's short-horizon objective with an entropy bonus in every reward, the
soft values from two critics and a learned temperature, following the
authors' DFlex Ant settings in ``mineral`` (docs/research/sapo_authors_facts.md):

- no target critic: the live critics give every value; the **min** of the
  critics is the next-state value of the TD(lambda) targets, their **mean**
  bootstraps the actor; each critic regresses the same targets (MSE averaged);
- the bonus is the entropy offset and scaled to vanish at its target,
  ``b = (H - H_target) / (2 |H_target|)`` with ``H_target = -A/2``; rewards
  become ``reward_scale r + alpha b`` for the actor (graph kept) and the critics;
- ``alpha = exp(log alpha)`` starts at 1 and takes one step per update on
  ``alpha |H_target| (H_mean - H_target)`` (clipped to ``max_grad_norm``),
  after the actor's step and before the critics', whose targets use it;
- the critics' minibatches are contiguous slices in the same order every pass.

The bootstrap reads the state each step reached, ``V(s_{t+1})`` (before any
reset); the authors' stored code evaluates the critic on the pre-step features
there (``V(s_t)``), which the facts page weighs as a bug; pathgrad does not copy it.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from pathgrad.algo.schedules import build_optimizer
from pathgrad.algo.shac import SHAC, CriticCfg
from pathgrad.collector import DifferentiableRollout
from pathgrad.core.configclasses import OptimizerCfg, _coerce, configclass
from pathgrad.core.state_checks import check_optimizer_groups
from pathgrad.policies import hidden_layers

__all__ = ["SAPO", "SAPOCfg", "CriticEnsemble", "entropy_bonus"]

_BETAS = {"betas": [0.7, 0.95]}
_LATER_VARIANT = (
    "'sapo' is now the authors' SAPO (no target critic; the min of two critics for the "
    "targets, their mean for the actor); the earlier SAPO is 'sapo_ensemble' "
    "(algorithm.name: sapo_ensemble)"
)


def entropy_bonus(entropies: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """``(H - H_target) / (2 |H_target|)``: 0 at the target, negative below it."""
    return (entropies - target_entropy) / (2.0 * abs(target_entropy))


@configclass
class SAPOCfg(CriticCfg):
    """SAPO config: the critic's fields plus the temperature's; defaults are the authors'.

    Every critic ``Linear`` starts orthogonal with gain 1 and a zero bias.

    Attributes:
        critic_layer_norm: A ``LayerNorm`` between every hidden ``Linear`` of
            the critics and its activation (the authors' order).
        num_critics: Independent critics (the min of them for targets, the mean to bootstrap).
        target_entropy: Entropy the temperature steers towards, in nats of the
            action in the normalized box ``[-1, 1]^A``; ``None``: ``-A/2``. Not 0.
        init_temperature: Initial ``alpha``.
        learn_temperature: ``False`` keeps ``alpha`` at ``init_temperature``.
        temperature_optimizer: Optimizer of ``log alpha`` (no schedule).
        shuffle_critic_minibatches: A fresh permutation per critic pass instead
            of the authors' fixed contiguous slices.
    """

    # fields of the earlier SAPO (now sapo_ensemble): a one-line error names it
    RETIRED_FIELDS = {
        "target_critic_alpha": _LATER_VARIANT,
        "critic_reduction": _LATER_VARIANT,
    }

    max_grad_norm: float = 0.5
    optimizer: OptimizerCfg = OptimizerCfg(name="adamw", learning_rate=2e-3, kwargs=_BETAS)
    critic_activation: str = "silu"
    critic_layer_norm: bool = True
    critic_optimizer: OptimizerCfg = OptimizerCfg(name="adamw", learning_rate=5e-4, kwargs=_BETAS)
    critic_max_grad_norm: float = 0.5
    num_critics: int = 2
    target_entropy: float | None = None
    init_temperature: float = 1.0
    learn_temperature: bool = True
    temperature_optimizer: OptimizerCfg = OptimizerCfg(
        name="adamw", learning_rate=5e-3, kwargs=_BETAS
    )
    shuffle_critic_minibatches: bool = False

    def validate(self) -> None:
        """Check the temperature's and the critics' fields."""
        super().validate()
        self.temperature_optimizer = _coerce(
            self.temperature_optimizer, OptimizerCfg, "temperature_optimizer"
        )
        if self.num_critics < 1:
            raise ValueError(f"num_critics must be at least 1, got {self.num_critics}.")
        if not (self.init_temperature > 0.0 and math.isfinite(self.init_temperature)):
            raise ValueError(f"init_temperature must be positive, got {self.init_temperature}.")
        if self.target_entropy is not None and not (
            math.isfinite(self.target_entropy) and self.target_entropy != 0.0
        ):
            raise ValueError(
                "target_entropy must be a finite nonzero number or null, "
                f"got {self.target_entropy}."
            )


# what env.sizes' message says SAPO's sizes come from
SIZED_BY_OBSERVATION_AND_ACTION = (
    "its critics and its target entropy (env.single_observation_space, env.single_action_space)"
)


class CriticEnsemble(nn.Module):
    """``K`` independent critic MLPs; ``forward`` stacks their values ``[K, ..., 1]``."""

    def __init__(
        self,
        count: int,
        observation_dim: int,
        hidden: list[int],
        activation: str,
        layer_norm: bool = False,
        *,
        norm_before_activation: bool = False,
    ):
        super().__init__()
        self.members = nn.ModuleList()
        for _ in range(count):
            layers = hidden_layers(
                observation_dim,
                hidden,
                activation,
                layer_norm,
                norm_before_activation=norm_before_activation,
            )
            layers.append(nn.Linear(int(hidden[-1]) if len(hidden) else observation_dim, 1))
            self.members.append(nn.Sequential(*layers))

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return torch.stack([member(observations) for member in self.members])


class SAPO(SHAC):
    """Maximum-entropy SHAC as SAPO's authors run it (see the module docstring).

    The entropy ``H_t`` is the policy's ``entropy`` output, with its graph:
    for :class:`~pathgrad.squashed_normal.SquashedNormalPolicy` (the authors'
    actor) a one-sample estimate of the squashed distribution's entropy in the
    normalized action box; for a Gaussian MLP policy its Gaussian's.

    Args:
        cfg: SAPO config.
        policy: The actor; its outputs must carry ``entropy``.
        observation_dim: Size of the observation (the critics' input).
        action_dim: Size of the action (the default target entropy).
    """

    algorithm_name = "sapo"
    compiled_update = "critic"
    differentiates_entropy = True  # the bonus is in every step's reward

    @classmethod
    def from_config(cls, cfg: SAPOCfg, policy: nn.Module, env: Any = None) -> SAPO:
        """Built with critics sized by ``env``'s observation, the target entropy by its action."""
        return cls(cfg, policy, *cls.env_sizes(env, SIZED_BY_OBSERVATION_AND_ACTION))

    def __init__(
        self, cfg: SAPOCfg, policy: nn.Module, observation_dim: int, action_dim: int
    ) -> None:
        super().__init__(cfg, policy, observation_dim)
        self.cfg: SAPOCfg = cfg
        parameter = next(policy.parameters())
        self.target_entropy = (
            -0.5 * float(action_dim) if cfg.target_entropy is None else float(cfg.target_entropy)
        )
        self.log_temperature = nn.Parameter(
            torch.tensor(
                math.log(cfg.init_temperature), dtype=parameter.dtype, device=parameter.device
            ),
            requires_grad=cfg.learn_temperature,
        )
        self.temperature_optimizer = build_optimizer(
            [self.log_temperature], cfg.temperature_optimizer
        )
        self._entropy_sum = torch.zeros((), dtype=torch.float64)
        self._entropy_count = 0
        self._last_bonus: torch.Tensor | None = None

    @property
    def temperature(self) -> float:
        """The current ``alpha``."""
        return float(self.log_temperature.detach().exp())

    def _make_critic(self, observation_dim: int) -> nn.Module:
        cfg = self.cfg
        critic = CriticEnsemble(
            cfg.num_critics,
            observation_dim,
            cfg.critic_hidden_sizes,
            cfg.critic_activation,
            cfg.critic_layer_norm,
            norm_before_activation=True,
        )
        with torch.no_grad():
            for layer in critic.modules():
                if isinstance(layer, nn.Linear):
                    nn.init.orthogonal_(layer.weight, gain=1.0)
                    nn.init.zeros_(layer.bias)
        return critic

    def _make_target_critic(self) -> None:
        return None

    def _bootstrap_values(self, observations: torch.Tensor) -> torch.Tensor:
        """The critics' mean, differentiable in the state but not in their weights."""
        self.critic.requires_grad_(False)
        try:
            return self._values(self.critic, observations).mean(0)
        finally:
            self.critic.requires_grad_(True)

    def _target_values(self, observations: torch.Tensor) -> torch.Tensor:
        """The critics' min."""
        return self._values(self.critic, observations).amin(0)

    def _minibatch_order(self, count: int, device: torch.device) -> torch.Tensor:
        if self.cfg.shuffle_critic_minibatches:
            return super()._minibatch_order(count, device)
        return torch.arange(count, device=device)

    def _follow_critic(self) -> None:
        """Nothing: there is no target critic."""

    def _action_entropies(self, rollout: DifferentiableRollout) -> torch.Tensor:
        """The policy's ``entropy`` ``[T, N]`` at every step, with its graph."""
        entropies = rollout.policy_outputs("entropy")
        if entropies is None:
            raise ValueError("SAPO needs a stochastic policy whose outputs carry 'entropy'.")
        return entropies

    def _window_rewards(self, rollout: DifferentiableRollout) -> tuple[torch.Tensor, torch.Tensor]:
        """``reward_scale r + alpha b`` for the actor; the critics' part without the bonus."""
        entropies = self._action_entropies(rollout)
        finite = torch.isfinite(entropies)
        kept = torch.where(finite, entropies.detach(), torch.zeros_like(entropies))
        self._entropy_sum = self._entropy_sum + kept.sum().to(self._entropy_sum)
        self._entropy_count += int(finite.sum())
        bonus = entropy_bonus(entropies, self.target_entropy)
        self._last_bonus = bonus.detach()
        rewards = rollout.rewards * self.cfg.reward_scale
        return rewards + self.temperature * bonus, rewards.detach()

    def _critic_window(self, rollout: DifferentiableRollout, rewards: torch.Tensor) -> dict:
        window = super()._critic_window(rollout, rewards)
        window["entropy_bonus"] = self._last_bonus
        return window

    def _critic_rewards(self, window: dict[str, torch.Tensor]) -> torch.Tensor:
        """Soft rewards with the temperature of now (after this update's step)."""
        return window["rewards"] + self.temperature * window["entropy_bonus"]

    def begin_update(self) -> None:
        """Start an update; the entropy mean starts again."""
        super().begin_update()
        self._entropy_sum = torch.zeros((), dtype=torch.float64)
        self._entropy_count = 0

    def _mean_entropy(self) -> torch.Tensor:
        entropy = self._entropy_sum / max(self._entropy_count, 1)
        if self.synchronizer is not None:  # every rank steers by the mean over all
            entropy = self._average_across_ranks([], entropy.reshape(1))[0]
        return entropy

    def _train_critic(self) -> dict[str, float]:
        """The temperature's step, then the critics' (their targets use the new ``alpha``)."""
        if self.cfg.learn_temperature:
            gap = float(self._mean_entropy()) - self.target_entropy
            loss = self.log_temperature.exp() * abs(self.target_entropy) * gap
            self.temperature_optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_([self.log_temperature], self.cfg.max_grad_norm)
            self.temperature_optimizer.step()
        return super()._train_critic()

    def finish_update(self) -> dict[str, float]:
        """SHAC's actor step, the temperature's step, the critics' steps."""
        metrics = super().finish_update()
        metrics["temperature"] = self.temperature
        metrics["action_entropy"] = float(self._entropy_sum / max(self._entropy_count, 1))
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """SHAC's state without a target critic, plus the temperature and its optimizer."""
        return {
            **super().state_dict(),
            "log_temperature": self.log_temperature.detach().clone(),
            "temperature_optimizer": self.temperature_optimizer.state_dict(),
        }

    def validate_state_dict(self, state: dict[str, Any]) -> None:
        """Raise ``ValueError`` if ``state`` is not a SAPO state of this shape."""
        if "target_critic" in state:
            raise ValueError(
                "Checkpoint entry 'algorithm' has a 'target_critic': a state of the earlier "
                "SAPO, which resumes as 'sapo_ensemble' (algorithm.name: sapo_ensemble)."
            )
        for key in ("log_temperature", "temperature_optimizer"):
            if key not in state:
                raise ValueError(f"Checkpoint entry 'algorithm' has no '{key}' (not a SAPO state).")
        super().validate_state_dict(state)
        temperature = state["log_temperature"]
        if not (isinstance(temperature, torch.Tensor) and temperature.ndim == 0):
            raise ValueError("algorithm.log_temperature must be a scalar tensor.")
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
