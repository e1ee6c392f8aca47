"""Adam and AdamW steps as pure tensor code on ``torch.optim``'s own state, for compiled programs.

The state tensors (``step``, ``exp_avg``, ``exp_avg_sq``) are those
``torch.optim.Adam``/``AdamW`` create and update, so checkpoints, resume and
learning-rate schedules are shared with eager training. The learning rate is a
tensor input (a schedule changes it without a recompile); the other
hyperparameters are constants of the compiled program.
"""

from __future__ import annotations

from typing import Any

import torch

from pathgrad.compiled.guards import GuardSkipping

__all__ = [
    "CompiledClipAdam",
    "adam_constants",
    "adam_state",
    "adam_values",
    "clipped_adam_step",
    "global_norm",
    "optimizer_blockers",
]


def optimizer_blockers(optimizer: Any, label: str = "the optimizer") -> list[str]:
    """Why ``optimizer``'s step cannot be compiled (empty: it can)."""
    if not isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW):
        return [f"{label} is {type(optimizer).__name__}, not Adam or AdamW"]
    if len(optimizer.param_groups) != 1:
        return [f"{label} has more than one parameter group"]
    group = optimizer.param_groups[0]
    reasons = []
    if group.get("amsgrad") or group.get("maximize") or group.get("differentiable"):
        reasons.append("amsgrad, maximize and differentiable Adam are not compiled")
    if torch.is_tensor(group["lr"]):
        reasons.append("a tensor learning rate is not compiled")
    return reasons


def adam_constants(
    optimizer: torch.optim.Optimizer, max_norm: float, norm_limit: float
) -> tuple[float, ...]:
    """The floats of a compiled step (changing one recompiles it; they never change)."""
    group = optimizer.param_groups[0]
    beta1, beta2 = (float(beta) for beta in group["betas"])
    decoupled = isinstance(optimizer, torch.optim.AdamW)
    return (
        beta1,
        beta2,
        float(group["eps"]),
        float(group["weight_decay"]),
        decoupled,
        float(max_norm),
        float(norm_limit),
    )


def adam_state(optimizer: torch.optim.Optimizer, parameter: torch.Tensor) -> dict[str, Any]:
    """The optimizer's state of ``parameter``, created as ``torch.optim.Adam`` creates it."""
    state = optimizer.state[parameter]
    if not state:
        scalar = torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32
        state["step"] = torch.zeros((), dtype=scalar)
        state["exp_avg"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
    return state


def adam_values(
    value: torch.Tensor,
    gradient: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    step: torch.Tensor,
    learning_rate: torch.Tensor,
    constants: tuple[float, ...],
) -> tuple[torch.Tensor, ...]:
    """One Adam/AdamW step of one tensor: new value, ``exp_avg``, ``exp_avg_sq`` and ``step``."""
    beta1, beta2, eps, weight_decay, decoupled = constants[:5]
    new_step = step + 1
    count = new_step.to(torch.float64)
    lr = learning_rate
    if weight_decay != 0.0:
        if decoupled:
            value = value * (1 - lr * weight_decay).to(value.dtype)
        else:
            gradient = gradient + weight_decay * value
    new_exp_avg = exp_avg.lerp(gradient, 1 - beta1)
    new_exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * (gradient * gradient)
    step_size = lr / (1 - beta1**count)
    correction = torch.sqrt(1 - beta2**count)
    denominator = new_exp_avg_sq.sqrt() / correction.to(value.dtype) + eps
    value = value - step_size.to(value.dtype) * (new_exp_avg / denominator)
    return value, new_exp_avg, new_exp_avg_sq, new_step


def global_norm(gradients: list[torch.Tensor]) -> torch.Tensor:
    """The norm of all ``gradients`` together, as ``clip_grad_norm_`` computes it."""
    return torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(gradient) for gradient in gradients])
    )


def clipped_adam_step(
    parameters: list[torch.Tensor],
    gradients: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    steps: list[torch.Tensor],
    learning_rate: torch.Tensor,
    loss: torch.Tensor,
    constants: tuple[float, ...],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Finite check, global-norm clip and one Adam/AdamW step, skipped by selection.

    Returns the norm before clipping, whether loss and gradients are finite,
    and whether the step was applied (finite, and under the norm limit if any).
    """
    max_norm, norm_limit = constants[5:]
    finite = torch.isfinite(loss)
    for gradient in gradients:
        finite = finite & torch.isfinite(gradient).all()
    norm = global_norm(gradients)
    apply = finite & torch.isfinite(norm)
    if norm_limit > 0.0:
        apply = apply & (norm <= norm_limit)
    clip = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for parameter, gradient, exp_avg, exp_avg_sq, step in zip(
        parameters, gradients, exp_avgs, exp_avg_sqs, steps, strict=True
    ):
        gradient = gradient * clip.to(gradient.dtype)
        new = adam_values(parameter, gradient, exp_avg, exp_avg_sq, step, learning_rate, constants)
        for old, value in zip((parameter, exp_avg, exp_avg_sq, step), new, strict=True):
            old.copy_(torch.where(apply, value, old))
    return norm, finite, apply


class CompiledClipAdam:
    """The finite check, clip and Adam/AdamW step of one optimizer as one compiled program.

    Args:
        optimizer: A one-group ``torch.optim.Adam`` or ``AdamW``.
        max_norm: Global-norm clip of the gradient.
        norm_limit: Skip the step when the norm before clipping exceeds it (0: never).
        options: Inductor options of ``torch.compile``.
        guards: Lets the owning update's calls skip guard evaluation.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        max_norm: float,
        norm_limit: float,
        options: dict[str, Any],
        guards: GuardSkipping | None = None,
    ) -> None:
        self.optimizer = optimizer
        self.parameters = list(optimizer.param_groups[0]["params"])
        self.constants = adam_constants(optimizer, max_norm, norm_limit)
        self._compiled = torch.compile(clipped_adam_step, dynamic=False, options=options)
        if guards is not None:
            self._compiled = guards.wrap(self._compiled)

    def step(self, loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list]:
        """Step on the parameters' ``grad`` (none: zeros); no host read.

        Returns the norm before clipping, whether loss and gradient are finite,
        whether the step was applied, and which parameters had no state before.
        """
        optimizer = self.optimizer
        fresh = [not optimizer.state[parameter] for parameter in self.parameters]
        states = [adam_state(optimizer, parameter) for parameter in self.parameters]
        gradients = [
            parameter.grad if parameter.grad is not None else torch.zeros_like(parameter)
            for parameter in self.parameters
        ]
        rate = float(optimizer.param_groups[0]["lr"])
        with torch.no_grad():
            norm, finite, applied = self._compiled(
                self.parameters,
                gradients,
                [state["exp_avg"] for state in states],
                [state["exp_avg_sq"] for state in states],
                [state["step"] for state in states],
                torch.tensor(rate, dtype=torch.float64, device=self.parameters[0].device),
                loss,
                self.constants,
            )
        return norm, finite, applied, fresh

    def drop_states(self, fresh: list[bool]) -> None:
        """After a skipped step: no state for the parameters that had none (as eager)."""
        for parameter, created in zip(self.parameters, fresh, strict=True):
            if created:
                del self.optimizer.state[parameter]

    def clip_and_step(self, loss: torch.Tensor) -> tuple[float, bool]:
        """``APG.fused_step``: the norm before clipping and whether the optimizer stepped."""
        norm, _, applied, fresh = self.step(loss)
        norm, applied = torch.stack([norm.double(), applied.double()]).tolist()
        if not applied:
            self.drop_states(fresh)
            self.optimizer.zero_grad(set_to_none=True)
        return norm, bool(applied)
