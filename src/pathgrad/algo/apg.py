"""Analytic policy gradients: backpropagate the return through the simulator."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from pathgrad.algo.base import BaseAlgorithm, RolloutKind
from pathgrad.collector import DifferentiableRollout
from pathgrad.core.episodes import restarting_discounts
from pathgrad.gradients import BatchedGradientNormStats
from pathgrad.utils import AlgorithmCfg, configclass

__all__ = ["APG", "APGCfg", "complete_discounted_return", "segmented_discounted_return"]


def segmented_discounted_return(rollout: DifferentiableRollout, gamma: float) -> torch.Tensor:
    """Discounted return ``[N]`` of one segment; the discount restarts after done.

    Raises:
        ValueError: If the rollout is empty.
    """
    if rollout.num_steps == 0:
        raise ValueError("Cannot compute returns for an empty rollout.")
    rewards = rollout.rewards
    discounts, _ = restarting_discounts(rollout.dones, gamma)
    return (rewards * discounts.to(rewards.dtype)).sum(dim=0)


def complete_discounted_return(rollout: DifferentiableRollout, gamma: float) -> torch.Tensor:
    """Discounted return ``[N]`` up to and including each env's first done.

    Unlike segmented returns, the discount never restarts: rewards of episodes
    that begin by auto-reset within the fixed horizon are excluded.

    Raises:
        ValueError: If the rollout is empty.
    """
    if rollout.num_steps == 0:
        raise ValueError("Cannot compute returns for an empty rollout.")
    rewards = rollout.rewards
    steps = torch.arange(rollout.num_steps, device=rewards.device, dtype=rewards.dtype)
    discounts = torch.as_tensor(gamma, device=rewards.device, dtype=rewards.dtype) ** steps
    alive = rollout.alive_mask.to(rewards.dtype)
    return (rewards * alive * discounts.unsqueeze(-1)).sum(dim=0)


@configclass
class APGCfg(AlgorithmCfg):
    """Analytic policy-gradient config.

    ``gamma`` applies within each TBPTT update and restarts after done.

    Attributes:
        ent_coef: Weight of the discounted policy-entropy bonus.
        skip_nonfinite_updates: Skip an update whose loss or gradient is not
            finite (parameters and optimizer untouched) instead of raising
            ``FloatingPointError``.
        max_grad_norm_before_clip: If positive, skip updates whose gradient
            norm before clipping exceeds it.
    """

    ent_coef: float = 0.0
    skip_nonfinite_updates: bool = True
    max_grad_norm_before_clip: float = 0.0

    def validate(self) -> None:
        """Check the APG fields and the shared ones."""
        super().validate()
        if self.max_grad_norm_before_clip < 0.0:
            raise ValueError("max_grad_norm_before_clip cannot be negative.")


class APG(BaseAlgorithm[DifferentiableRollout]):
    """Optimize the policy through the rewards of differentiable rollouts.

    An update is ``begin_update()``, one or more ``accumulate_segment()`` (TBPTT)
    or ``accumulate_complete_rollout()`` calls, then ``finish_update()``;
    ``cancel_update()`` abandons it.
    """

    rollout_kind = RolloutKind.DIFFERENTIABLE
    supports_data_parallel = True
    algorithm_name = "apg"
    compiled_update = "apg"

    def __init__(self, cfg: APGCfg, policy: torch.nn.Module) -> None:
        if cfg.max_grad_norm_before_clip < 0.0:
            raise ValueError("max_grad_norm_before_clip cannot be negative.")
        self.cfg = cfg
        self.policy = policy
        self.device = torch.device(cfg.device)
        self._setup_optimization(cfg, policy.parameters())
        self._update_active = False
        self._reset_accumulators()
        # Mean entropy per sampled action in the last finished update (None: none sampled).
        self.last_policy_entropy: float | None = None
        # clip and step in one compiled program (set by pathgrad.compiled): the loss
        # total in, (norm before clipping, stepped) out; None: clip_grad_norm_ and step()
        self.fused_step: Callable[[torch.Tensor], tuple[float, bool]] | None = None

    def _reset_accumulators(self) -> None:
        self._update_valid = True
        self._discount: torch.Tensor | None = None
        zero = torch.zeros((), dtype=torch.float64, device=self.device)
        self._loss_total = zero
        self._objective_total = zero
        self._entropy_total = zero
        self._sampled_entropy_total = zero
        self._sampled_entropy_count = 0
        self._num_accumulated_steps = 0
        self._action_gradient_stats: list[BatchedGradientNormStats] = []

    def begin_update(self) -> None:
        """Start accumulating an update.

        Raises:
            RuntimeError: If an update is already active.
        """
        if self._update_active:
            raise RuntimeError("An APG optimizer update is already active.")
        self.optimizer.zero_grad(set_to_none=True)
        self._update_active = True
        self._reset_accumulators()

    def accumulate_segment(self, rollout: DifferentiableRollout) -> None:
        """Backpropagate one TBPTT segment; the discount carries to the next one.

        Raises:
            RuntimeError: If no update is active.
            ValueError: If the rollout is empty.
        """
        if not self._update_active:
            raise RuntimeError("Call begin_update() before accumulating a segment.")
        if rollout.num_steps == 0:
            raise ValueError("APG requires a non-empty differentiable rollout.")
        returns, entropy_returns, self._discount = self._discounted_terms(rollout, self._discount)
        objective = returns.mean()
        entropy = entropy_returns.mean()
        loss = -objective - self.cfg.ent_coef * entropy
        self._accumulate_loss(
            rollout.num_steps,
            rollout.action_gradient_stats,
            loss=loss,
            objective=objective,
            entropy=entropy,
        )

    def accumulate_complete_rollout(
        self,
        rollout: DifferentiableRollout,
        *,
        objective_scale: float | torch.Tensor = 1.0,
        accumulation_scale: float = 1.0,
    ) -> None:
        """Backpropagate one independent full-horizon rollout.

        Args:
            rollout: Complete graph-connected trajectory.
            objective_scale: Scalar or per-env return multiplier.
            accumulation_scale: Loss multiplier, usually one over the number
                of rollouts accumulated into this update.

        Raises:
            RuntimeError: If no update is active.
            ValueError: If the rollout is empty or a scale is invalid.
        """
        if not self._update_active:
            raise RuntimeError("Call begin_update() before accumulating a rollout.")
        if rollout.num_steps == 0:
            raise ValueError("APG requires a non-empty differentiable rollout.")
        if accumulation_scale <= 0.0:
            raise ValueError("accumulation_scale must be positive.")
        returns = complete_discounted_return(rollout, self.cfg.gamma)
        entropy_returns = torch.zeros_like(returns)
        entropies = self._entropies(rollout)
        if entropies is not None:
            alive = rollout.alive_mask.to(returns.dtype)
            steps = torch.arange(rollout.num_steps, device=returns.device, dtype=returns.dtype)
            gamma = torch.as_tensor(self.cfg.gamma, dtype=returns.dtype, device=returns.device)
            discounts = gamma**steps
            entropy_returns = (entropies * alive * discounts.unsqueeze(-1)).sum(dim=0)
        self.accumulate_complete_returns(
            returns,
            entropy_returns,
            num_steps=rollout.num_steps,
            objective_scale=objective_scale,
            accumulation_scale=accumulation_scale,
            action_gradient_stats=rollout.action_gradient_stats,
        )

    def accumulate_complete_returns(
        self,
        returns: torch.Tensor,
        entropy_returns: torch.Tensor,
        *,
        num_steps: int,
        objective_scale: float | torch.Tensor = 1.0,
        accumulation_scale: float = 1.0,
        action_gradient_stats: BatchedGradientNormStats | None = None,
    ) -> None:
        """Backpropagate already-computed complete-rollout returns ``[N]`` (graph kept).

        The path of gradient-checkpointed rollouts, which never hold a whole
        rollout; :meth:`accumulate_complete_rollout` computes the returns and
        calls it.

        Raises:
            RuntimeError: If no update is active.
            ValueError: If a scale is invalid.
        """
        if not self._update_active:
            raise RuntimeError("Call begin_update() before accumulating a rollout.")
        if accumulation_scale <= 0.0:
            raise ValueError("accumulation_scale must be positive.")
        scale = torch.as_tensor(objective_scale, dtype=returns.dtype, device=returns.device)
        scale = scale.detach()
        if scale.ndim > 1 or (scale.ndim == 1 and scale.shape != returns.shape):
            raise ValueError("objective_scale must be scalar or have one value per environment.")
        if not bool(torch.isfinite(scale).all()):
            raise ValueError("objective_scale must contain only finite values.")
        objective = (returns * scale).mean()
        entropy = (entropy_returns * scale).mean()
        loss = (-objective - self.cfg.ent_coef * entropy) * accumulation_scale
        self._accumulate_loss(
            num_steps,
            action_gradient_stats,
            loss=loss,
            objective=objective * accumulation_scale,
            entropy=entropy * accumulation_scale,
        )

    def _accumulate_loss(
        self,
        num_steps: int,
        action_gradient_stats: BatchedGradientNormStats | None,
        *,
        loss: torch.Tensor,
        objective: torch.Tensor,
        entropy: torch.Tensor,
    ) -> None:
        """Backpropagate one contribution of ``num_steps`` steps and check it is finite."""
        self._loss_total = self._loss_total + loss.detach()
        self._objective_total = self._objective_total + objective.detach()
        self._entropy_total = self._entropy_total + entropy.detach()
        self._num_accumulated_steps += num_steps
        if action_gradient_stats is not None:
            self._action_gradient_stats.append(action_gradient_stats)
        if not self.cfg.skip_nonfinite_updates and not bool(torch.isfinite(loss)):
            raise FloatingPointError("APG produced a non-finite loss.")
        # Always run backward, even for an update already invalid: it releases
        # the graph (and any tape a custom simulator step holds).
        loss.backward()
        checks = [torch.isfinite(loss.detach()).reshape(1)]
        checks += [
            torch.isfinite(p.grad).all().reshape(1)
            for p in self.policy.parameters()
            if p.grad is not None
        ]
        finite = bool(torch.cat(checks).all())
        if not finite or not self._update_valid:
            if not self.cfg.skip_nonfinite_updates:
                raise FloatingPointError("APG produced a non-finite policy gradient.")
            self._update_valid = False
            self.optimizer.zero_grad(set_to_none=True)

    def finish_update(self) -> dict[str, float]:
        """Clip the gradient and apply one optimizer step, unless skipped.

        Raises:
            RuntimeError: If no update is active or nothing was accumulated.
        """
        if not self._update_active:
            raise RuntimeError("Call begin_update() before finishing an update.")
        if self._num_accumulated_steps == 0:
            raise RuntimeError("Cannot finish an APG update without any segments.")
        self._synchronize_ranks()
        if not self._update_valid:
            self._update_active = False
            return self._accumulated_metrics(float("nan"), skipped=True, excessive=False)
        norm, stepped = self._clip_and_step()
        if not stepped:
            self._update_active = False
            return self._accumulated_metrics(norm, skipped=True, excessive=math.isfinite(norm))
        self._step_scheduler()
        self._update_active = False
        return self._accumulated_metrics(norm, skipped=False, excessive=False)

    def _clip_and_step(self) -> tuple[float, bool]:
        """Clip the gradient and step, unless its norm is not finite or over the limit.

        Returns the norm before clipping and whether the optimizer stepped.
        :attr:`fused_step`, where set, does it instead.
        """
        if self.fused_step is not None:
            return self.fused_step(self._loss_total)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            tuple(self.policy.parameters()), self.cfg.max_grad_norm
        )
        norm = float(grad_norm)
        limit = self.cfg.max_grad_norm_before_clip
        if not torch.isfinite(grad_norm) or (limit > 0.0 and norm > limit):
            self.optimizer.zero_grad(set_to_none=True)
            return norm, False
        self.optimizer.step()
        return norm, True

    def _synchronize_ranks(self) -> None:
        """Data-parallel: average gradients and loss terms; a skip on any rank skips all."""
        if self.synchronizer is None or self.synchronizer.world_size == 1:
            return
        invalid = torch.tensor(0.0 if self._update_valid else 1.0, dtype=torch.float64)
        extras = torch.stack(
            [invalid.to(self.device), self._loss_total, self._objective_total, self._entropy_total]
        )
        if not self._update_valid:  # its gradient is dropped: zeros join the average
            self.optimizer.zero_grad(set_to_none=True)
        averaged = self._average_across_ranks(self.policy.parameters(), extras, carry=True)
        invalid, self._loss_total, self._objective_total, self._entropy_total = averaged
        self._update_valid = bool(invalid == 0.0)

    def cancel_update(self) -> None:
        """Abandon the active update: drop gradients and accumulators."""
        self.optimizer.zero_grad(set_to_none=True)
        self._update_active = False
        self._action_gradient_stats = []

    def _discounted_terms(
        self, rollout: DifferentiableRollout, initial_discount: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Segment return, entropy return and the discount to carry on."""
        rewards = rollout.rewards
        if initial_discount is None:
            initial_discount = torch.ones_like(rewards[0]).detach()
        discounts, next_discount = restarting_discounts(
            rollout.dones, self.cfg.gamma, initial_discount
        )
        returns = (rewards * discounts).sum(dim=0)
        entropies = self._entropies(rollout)
        entropy_returns = (
            torch.zeros_like(returns) if entropies is None else (entropies * discounts).sum(dim=0)
        )
        return returns, entropy_returns, next_discount

    def _entropies(self, rollout: DifferentiableRollout) -> torch.Tensor | None:
        """Policy entropies ``[T, N]``, without a graph when the bonus is off (recorded)."""
        entropies = rollout.policy_outputs("entropy")
        if entropies is None:
            return None
        self.record_policy_entropy(entropies)
        return entropies if self.cfg.ent_coef != 0.0 else entropies.detach()

    def record_policy_entropy(self, entropies: torch.Tensor) -> None:
        """Add sampled action-distribution entropies to :attr:`last_policy_entropy` (a mean)."""
        self._sampled_entropy_total = self._sampled_entropy_total + entropies.detach().sum()
        self._sampled_entropy_count += entropies.numel()

    def _accumulated_metrics(
        self, grad_norm: float, *, skipped: bool, excessive: bool
    ) -> dict[str, float]:
        metrics = {
            "loss": float(self._loss_total),
            "objective": float(self._objective_total),
            "entropy": float(self._entropy_total),
            "grad_norm": grad_norm,
            "skipped_update": float(skipped),
            "skipped_excessive_gradient": float(excessive),
            "learning_rate": self.current_learning_rate(),
        }
        count = self._sampled_entropy_count
        self.last_policy_entropy = (
            float(self._sampled_entropy_total) / count if count else None
        )  # outside the metrics, which keep the reference's keys
        if self._action_gradient_stats:
            merged = BatchedGradientNormStats.merge(self._action_gradient_stats)
            metrics.update(merged.metrics())
        return metrics
