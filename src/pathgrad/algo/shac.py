"""SHAC: short-horizon actor-critic (Xu et al., ICLR 2022).

The actor is trained like APG over a short window, but the return is
bootstrapped with a learned critic at the end of the window and wherever an
episode is truncated inside it, so rewards beyond the window still shape the
gradient. The critic regresses TD(lambda) targets of the window; a Polyak
averaged target critic supplies the bootstrap values.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from pathgrad.algo.apg import APG, APGCfg
from pathgrad.algo.schedules import LearningRateSchedule, build_optimizer
from pathgrad.collector import DifferentiableRollout
from pathgrad.core.configclasses import (
    LRSchedulerCfg,
    OptimizerCfg,
    _coerce,
    coerce_lr_scheduler_cfg,
    configclass,
)
from pathgrad.core.episodes import restarting_discounts
from pathgrad.core.state_checks import check_optimizer_groups, check_state_shapes
from pathgrad.policies import ACTIVATIONS, hidden_layers

__all__ = ["SHAC", "SHACCfg", "CriticCfg", "td_lambda_targets"]


def td_lambda_targets(
    rewards: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """TD(lambda) value targets ``[T, N]`` of one window.

    ``G_t = r_t + gamma ((1 - lam) V'_t + lam G_{t+1})`` inside an episode, and
    ``G_t = r_t + gamma V'_t`` where the episode ends (``done``) or the window
    does (``t = T - 1``). ``V'_t`` is the value of the state the step reached
    before any reset: ``next_values``, which callers zero where ``terminated``.

    Args:
        rewards: Rewards ``[T, N]``.
        next_values: Values of the pre-reset next states ``[T, N]``.
        terminated: Terminal flags ``[T, N]``: no value after them.
        dones: Episode ends ``[T, N]`` (terminated or truncated).
        gamma: Discount.
        lam: TD(lambda) mixing in [0, 1].
    """
    next_values = torch.where(terminated, torch.zeros_like(next_values), next_values)
    targets = torch.empty_like(rewards)
    following = next_values[-1]  # G_{t+1}; at the window's end only V' counts
    for step in range(rewards.shape[0] - 1, -1, -1):
        cut = dones[step] | (step == rewards.shape[0] - 1)
        mixed = (1.0 - lam) * next_values[step] + lam * following
        targets[step] = rewards[step] + gamma * torch.where(cut, next_values[step], mixed)
        following = targets[step]
    return targets


def _mlp(
    inputs: int, hidden: Sequence[int], activation: str, layer_norm: bool = False
) -> nn.Sequential:
    layers = hidden_layers(inputs, hidden, activation, layer_norm)
    layers.append(nn.Linear(int(hidden[-1]) if len(hidden) else inputs, 1))
    return nn.Sequential(*layers)


@configclass
class CriticCfg(APGCfg):
    """APG's fields plus a critic's (SHAC's and SAPO's shared fields).

    Attributes:
        lam: TD(lambda) mixing of the critic targets.
        critic_hidden_sizes: Hidden layer widths of the critic MLP.
        critic_activation: Hidden activation of the critic.
        critic_layer_norm: A ``LayerNorm`` after every hidden activation of the critic.
        critic_optimizer: Optimizer of the critic (same schedule as the actor's).
        critic_epochs: Passes over the window's data per update.
        critic_minibatches: Minibatches per pass.
        critic_max_grad_norm: Gradient-norm clip of each critic step (0: no clipping).
        critic_lr_scheduler: The critic's learning-rate schedule; ``None``: the actor's.
        reward_scale: Rewards are multiplied by it for actor and critic.
        critic_warmup_updates: Updates whose actor objective leaves out the critic's
            bootstrap (the plain window return, as APG's) while the critic trains;
            an untrained critic's value gradient can send a few-env run far off
            at the start.
    """

    lam: float = 0.95
    critic_hidden_sizes: list[int] = [64, 64]
    critic_activation: str = "elu"
    critic_layer_norm: bool = False
    critic_optimizer: OptimizerCfg = OptimizerCfg(learning_rate=2e-3)
    critic_epochs: int = 16
    critic_minibatches: int = 4
    critic_max_grad_norm: float = 1.0
    critic_lr_scheduler: LRSchedulerCfg | None = None
    reward_scale: float = 1.0
    critic_warmup_updates: int = 0

    def validate(self) -> None:
        """Check the critic fields and APG's."""
        super().validate()
        self.critic_optimizer = _coerce(self.critic_optimizer, OptimizerCfg, "critic_optimizer")
        if self.critic_lr_scheduler is not None:
            try:
                self.critic_lr_scheduler = coerce_lr_scheduler_cfg(self.critic_lr_scheduler)
            except ValueError as error:
                raise ValueError(f"critic_lr_scheduler: {error}") from error
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"lam must be in [0, 1], got {self.lam}.")
        if any(int(width) <= 0 for width in self.critic_hidden_sizes):
            raise ValueError("critic_hidden_sizes must be positive.")
        if self.critic_activation not in ACTIVATIONS:
            raise ValueError(f"critic_activation must be one of {sorted(ACTIVATIONS)}.")
        if self.critic_epochs <= 0 or self.critic_minibatches <= 0:
            raise ValueError("critic_epochs and critic_minibatches must be positive.")
        if not self.critic_max_grad_norm >= 0.0:
            raise ValueError(
                "critic_max_grad_norm must be >= 0 (0: no clipping), "
                f"got {self.critic_max_grad_norm}."
            )
        if not self.reward_scale > 0.0:
            raise ValueError("reward_scale must be positive.")
        if self.critic_warmup_updates < 0:
            raise ValueError(
                f"critic_warmup_updates must be >= 0, got {self.critic_warmup_updates}."
            )


@configclass
class SHACCfg(CriticCfg):
    """SHAC config: the critic's fields plus its target critic's.

    Attributes:
        target_critic_alpha: Polyak factor: ``target = alpha target + (1 - alpha) critic``.
    """

    target_critic_alpha: float = 0.2

    def validate(self) -> None:
        """Check the target critic's factor and the critic's fields."""
        super().validate()
        if not 0.0 <= self.target_critic_alpha < 1.0:
            raise ValueError("target_critic_alpha must be in [0, 1).")


class SHAC(APG):
    """Short-horizon actor-critic on segmented windows.

    Actor objective per window of ``h`` steps, averaged over envs and divided
    by ``h``: ``sum_t gamma^t r_t + gamma^h V_target(s_h)``; the discount
    restarts after an episode ends, which adds ``gamma^(k+1) V_target`` of the
    pre-reset observation after a truncation and nothing after a termination.
    The bootstrap is differentiable in the state (through the observation), not
    in the critic's weights. After each actor step the critic trains on the
    window's TD(lambda) targets and the target critic follows it.

    Args:
        cfg: SHAC config.
        policy: The actor.
        observation_dim: Size of the observation (the critic's input).
    """

    needs_final_observation = True  # the bootstrap of a truncated episode reads it
    rollout_modes = ("segmented",)
    algorithm_name = "shac"
    compiled_update = "critic"

    @classmethod
    def from_config(cls, cfg: CriticCfg, policy: nn.Module, env: Any = None) -> SHAC:
        """Built with a critic sized by ``env``'s observation."""
        observation_dim, _ = cls.env_sizes(env)
        return cls(cfg, policy, observation_dim=observation_dim)

    def compiled_optimizers(self) -> list[tuple[Any, str]]:
        """The actor's optimizer and the critic's."""
        return [*super().compiled_optimizers(), (self.critic_optimizer, "the critic optimizer")]

    def __init__(self, cfg: CriticCfg, policy: nn.Module, observation_dim: int) -> None:
        super().__init__(cfg, policy)
        self.cfg: SHACCfg = cfg
        parameter = next(policy.parameters())
        critic = self._make_critic(int(observation_dim))
        self.critic = critic.to(device=parameter.device, dtype=parameter.dtype)
        self.target_critic: nn.Module | None = self._make_target_critic()
        self.critic_optimizer = build_optimizer(self.critic.parameters(), cfg.critic_optimizer)
        base_rates = [float(group["lr"]) for group in self.critic_optimizer.param_groups]
        schedule = cfg.critic_lr_scheduler or cfg.lr_scheduler
        self.critic_schedule = LearningRateSchedule(schedule, base_rates)
        self.critic_schedule.apply(self.critic_optimizer)
        self._windows: list[dict[str, torch.Tensor]] = []
        self.critic_updates = 0  # updates with a critic step so far (ends the warm-up)
        # _critic_step as one compiled program (set by pathgrad.compiled); None: eager
        self.fused_critic_step: Callable[..., torch.Tensor] | None = None

    def _make_critic(self, observation_dim: int) -> nn.Module:
        """The critic network: an MLP from the (normalized) observation to one value."""
        cfg = self.cfg
        return _mlp(
            observation_dim, cfg.critic_hidden_sizes, cfg.critic_activation, cfg.critic_layer_norm
        )

    def _make_target_critic(self) -> nn.Module | None:
        """The Polyak-averaged copy of the critic the values come from."""
        return copy.deepcopy(self.critic).requires_grad_(False)

    def _bootstrap_values(self, observations: torch.Tensor) -> torch.Tensor:
        """Values ``[...]`` that bootstrap the actor's objective (differentiable in the state)."""
        return self._values(self.target_critic, observations)

    def _target_values(self, observations: torch.Tensor) -> torch.Tensor:
        """Values ``[...]`` of next states in the critic's TD(lambda) targets."""
        return self._values(self.target_critic, observations)

    def _minibatch_order(self, count: int, device: torch.device) -> torch.Tensor:
        """The order of the critic's samples in one pass (a fresh permutation)."""
        return torch.randperm(count, device=device)

    @torch.no_grad()
    def _follow_critic(self) -> None:
        """After the critic's steps: the target critic follows it (Polyak)."""
        alpha = self.cfg.target_critic_alpha
        for target, source in zip(
            self.target_critic.parameters(), self.critic.parameters(), strict=True
        ):
            target.mul_(alpha).add_(source, alpha=1.0 - alpha)

    def _window_rewards(self, rollout: DifferentiableRollout) -> tuple[torch.Tensor, torch.Tensor]:
        """Rewards ``[T, N]`` of the actor's objective (with their graph) and the critic's."""
        rewards = rollout.rewards * self.cfg.reward_scale
        return rewards, rewards.detach()

    def _values(self, network: nn.Module, observations: torch.Tensor) -> torch.Tensor:
        """Values ``[...]`` of raw observations ``[..., D]``."""
        if self.observation_transform is not None:
            observations = self.observation_transform(observations)
        return network(observations).squeeze(-1)

    def begin_update(self) -> None:
        """Start an update (and forget windows of an earlier one)."""
        super().begin_update()
        self._windows = []

    def accumulate_segment(self, rollout: DifferentiableRollout) -> None:
        """Backpropagate the bootstrapped objective of one window; keep its data."""
        if not self._update_active:
            raise RuntimeError("Call begin_update() before accumulating a segment.")
        if rollout.num_steps == 0:
            raise ValueError("SHAC requires a non-empty differentiable rollout.")
        rewards, critic_rewards = self._window_rewards(rollout)
        dones = rollout.dones
        terminated = rollout.terminated
        final_observations = rollout.final_observations
        steps = rollout.num_steps
        discounts, _ = restarting_discounts(dones, self.cfg.gamma, torch.ones_like(rewards[0]))
        discounts = discounts.detach()
        last = torch.zeros_like(dones)
        last[-1] = True
        bootstrap = (dones | last) & ~terminated
        if self.critic_updates < self.cfg.critic_warmup_updates:  # the window return alone
            bootstrapped = torch.zeros_like(rewards)
        else:
            values = self._bootstrap_values(final_observations)
            bootstrapped = torch.where(bootstrap, values, torch.zeros_like(values))
        per_env = (discounts * (rewards + self.cfg.gamma * bootstrapped)).sum(dim=0)
        objective = per_env.mean() / steps
        entropies = self._entropies(rollout)
        entropy = (
            torch.zeros_like(objective)
            if entropies is None
            else (discounts * entropies).sum(dim=0).mean() / steps
        )
        loss = -objective - self.cfg.ent_coef * entropy
        self._accumulate_loss(
            rollout.num_steps,
            rollout.action_gradient_stats,
            loss=loss,
            objective=objective,
            entropy=entropy,
        )
        self._windows.append(self._critic_window(rollout, critic_rewards))

    @staticmethod
    def _critic_window(rollout: DifferentiableRollout, rewards: torch.Tensor) -> dict:
        """What the critic learns from of one window (no graph), with its ``rewards``."""
        return {
            "observations": rollout.observations.detach(),
            "rewards": rewards,
            "terminated": rollout.terminated,
            "dones": rollout.dones,
            "final_observations": rollout.final_observations.detach(),
        }

    def accumulate_complete_rollout(self, rollout: DifferentiableRollout, **kwargs: Any) -> None:
        """Not supported: SHAC bootstraps windows of a carried state.

        Raises:
            ValueError: Always.
        """
        raise ValueError("SHAC trains on segmented windows: use rollout_mode='segmented'.")

    def finish_update(self) -> dict[str, float]:
        """Actor step (as APG), then critic epochs and the target-critic update."""
        metrics = super().finish_update()
        if metrics["skipped_update"] == 0.0:
            metrics.update(self._train_critic())
            self.critic_schedule.step(self.critic_optimizer)
            self.critic_updates += 1
        self._windows = []
        return metrics

    def cancel_update(self) -> None:
        """Abandon the active update and its windows."""
        super().cancel_update()
        self._windows = []

    def _critic_rewards(self, window: dict[str, torch.Tensor]) -> torch.Tensor:
        """The rewards ``[T, N]`` of a kept window that the critic's targets sum."""
        return window["rewards"]

    @torch.no_grad()
    def _targets(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Critic inputs ``[M, D]`` and TD(lambda) targets ``[M]`` of the update's windows."""
        inputs, targets = [], []
        for window in self._windows:
            next_values = self._target_values(window["final_observations"])
            window_targets = td_lambda_targets(
                self._critic_rewards(window),
                next_values,
                window["terminated"],
                window["dones"],
                self.cfg.gamma,
                self.cfg.lam,
            )
            observations = window["observations"]
            if self.observation_transform is not None:
                observations = self.observation_transform(observations)
            inputs.append(observations.reshape(-1, observations.shape[-1]))
            targets.append(window_targets.reshape(-1))
        return torch.cat(inputs), torch.cat(targets)

    def _train_critic(self) -> dict[str, float]:
        """Fit the critic to the update's TD(lambda) targets (:meth:`_fit_critic`)."""
        inputs, targets = self._targets()
        finite = bool(torch.isfinite(inputs).all() and torch.isfinite(targets).all())
        if self.synchronizer is not None:  # data-parallel: all ranks train the critic, or none
            finite = self.synchronizer.all_agree(finite)
        if not finite:
            return {"value_loss": float("nan"), "explained_variance": float("nan")}
        metrics = self._fit_critic(inputs, targets)
        with torch.no_grad():
            residual = targets - self.critic(inputs).squeeze(-1)
            variance = targets.var() if targets.numel() > 1 else torch.zeros_like(targets[0])
            explained = 1.0 - residual.var() / variance if variance > 0 else torch.nan
        return {
            **metrics,
            "explained_variance": float(explained),
            "critic_learning_rate": float(self.critic_optimizer.param_groups[0]["lr"]),
        }

    def _fit_critic(self, inputs: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
        """``critic_epochs`` passes of shuffled minibatches, then the target follows.

        Returns ``value_loss``, the mean loss of the last pass.
        """
        count = targets.shape[0]
        batch = max(1, count // self.cfg.critic_minibatches)
        step = self.fused_critic_step or self._critic_step
        losses = []
        for _ in range(self.cfg.critic_epochs):
            order = self._minibatch_order(count, targets.device)
            for start in range(0, count - batch + 1, batch):
                losses.append(step(inputs, targets, order[start : start + batch]))
        self._follow_critic()
        last_epoch = losses[-max(1, count // batch) :]
        return {"value_loss": float(torch.stack(last_epoch).mean())}

    def _critic_step(
        self, inputs: torch.Tensor, targets: torch.Tensor, index: torch.Tensor
    ) -> torch.Tensor:
        """One critic step on the rows ``index``; returns its loss (no graph)."""
        loss = (self.critic(inputs[index]).squeeze(-1) - targets[index]).square().mean()
        self.critic_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self._average_across_ranks(self.critic.parameters(), loss.detach().reshape(1))
        if self.cfg.critic_max_grad_norm > 0.0:
            nn.utils.clip_grad_norm_(self.critic.parameters(), self.cfg.critic_max_grad_norm)
        self.critic_optimizer.step()
        return loss.detach()

    def state_dict(self) -> dict[str, Any]:
        """Actor optimizer and schedule, critic, target critic (if any) and critic optimizer."""
        state = {
            **super().state_dict(),
            "critic": self.critic.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "critic_schedule": self.critic_schedule.state_dict(),
            "critic_updates": self.critic_updates,
        }
        if self.target_critic is not None:
            state["target_critic"] = self.target_critic.state_dict()
        return state

    def validate_state_dict(self, state: dict[str, Any]) -> None:
        """Raise ``ValueError`` if the saved critic does not fit this one."""
        super().validate_state_dict(state)
        keys = ("critic", "critic_optimizer", "critic_schedule")
        if self.target_critic is not None:
            keys += ("target_critic",)
        for key in keys:
            if key not in state:
                raise ValueError(f"Checkpoint entry 'algorithm' has no '{key}' (not a SHAC state).")
        check_state_shapes("algorithm.critic", state["critic"], self.critic.state_dict())
        updates = state.get("critic_updates", 0)
        if isinstance(updates, bool) or not isinstance(updates, int) or updates < 0:
            raise ValueError(
                f"algorithm.critic_updates must be a non-negative integer, got {updates!r}."
            )
        check_optimizer_groups(
            "algorithm.critic_optimizer", state["critic_optimizer"], self.critic_optimizer
        )

    def load_state_dict(self, state: dict[str, Any], *, resume_scheduler: str = "restore") -> None:
        """Restore actor and critic; ``restart`` restarts both learning-rate curves."""
        super().load_state_dict(state, resume_scheduler=resume_scheduler)
        self.critic.load_state_dict(state["critic"])
        if self.target_critic is not None:
            self.target_critic.load_state_dict(state["target_critic"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        # checkpoints before the warm-up option: the critic trained once per schedule step
        saved_updates = state.get("critic_updates", state["critic_schedule"]["step_count"])
        self.critic_updates = int(saved_updates)
        if resume_scheduler == "restore":
            self.critic_schedule.load_state_dict(state["critic_schedule"])
        else:
            self.critic_schedule.restart()
        self.critic_schedule.apply(self.critic_optimizer)

    def prepare_schedule(self, estimated_updates: int, remaining_updates: int) -> None:
        """Bind the actor's and the critic's schedule to the same budget."""
        super().prepare_schedule(estimated_updates, remaining_updates)
        self.critic_schedule.bind_budget(remaining_updates)
        self.critic_schedule.apply(self.critic_optimizer)
