"""Jacobians of a function of tensors: analytic (autograd) and by central differences."""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["finite_differences", "jacobian", "jacobians"]

Function = Callable[..., tuple[torch.Tensor, ...]]


def jacobian(output: torch.Tensor, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Analytic Jacobian ``[output entries, input entries]`` (float64) of one output."""
    rows = []
    for element in output.reshape(-1):
        grads = torch.autograd.grad(element, inputs, retain_graph=True, allow_unused=True)
        rows.append(
            torch.cat(
                [
                    (torch.zeros_like(x) if g is None else g).reshape(-1).double()
                    for g, x in zip(grads, inputs, strict=True)
                ]
            )
        )
    return torch.stack(rows)


def jacobians(rollout: Function, inputs: tuple[torch.Tensor, ...]) -> list[torch.Tensor]:
    """Analytic Jacobian of every output of ``rollout``."""
    return [jacobian(output, inputs) for output in rollout(*inputs)]


@torch.no_grad()
def finite_differences(
    rollout: Function,
    inputs: tuple[torch.Tensor, ...],
    relative_step: float = 1e-3,
) -> list[torch.Tensor]:
    """Central-difference Jacobians with a step of about ``relative_step * max(1, |x|)``.

    The step actually taken (after rounding to the input's dtype) divides the difference.
    """
    flat = [x.detach().clone() for x in inputs]
    columns: list[list[torch.Tensor]] = []
    for tensor in flat:
        values = tensor.view(-1)
        for index in range(values.numel()):
            original = values[index].item()
            step = relative_step * max(1.0, abs(original))
            values[index] = original + step
            upper = values[index].item()
            plus = [o.double().reshape(-1) for o in rollout(*flat)]
            values[index] = original - step
            lower = values[index].item()
            minus = [o.double().reshape(-1) for o in rollout(*flat)]
            values[index] = original
            columns.append([(p - m) / (upper - lower) for p, m in zip(plus, minus, strict=True)])
    return [torch.stack([column[k] for column in columns], dim=1) for k in range(len(columns[0]))]
