"""The reference's ``MLP``: hidden ``Linear`` layers with an activation each, then a head.

Either argument names work: the reference's (``input_dim``, ``output_dim``,
``hidden_dims``, ``init_orthogonal(scales=)``) or pathgrad's earlier ones
(``in_dim``, ``out_dim``, ``hidden_sizes``, ``init_orthogonal(gains=)``);
positionally they are the same. ``output_dim`` may be a shape: the head then
has its product as width and is unflattened to it, as the reference's is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from pathgrad.policies import ACTIVATIONS

__all__ = ["MLP", "MLP_ACTIVATIONS"]

# The MLP's activations: the policies' ones and a few more of torch's.
MLP_ACTIVATIONS: dict[str, type[nn.Module]] = {
    **ACTIVATIONS,
    "swish": nn.SiLU,  # the reference's other name of silu
    "leaky_relu": nn.LeakyReLU,
    "sigmoid": nn.Sigmoid,
    "softplus": nn.Softplus,
    "identity": nn.Identity,
}


def _one_of(names: tuple[str, str], values: tuple[Any, Any]) -> Any:
    """The value given under either name (the reference's first)."""
    given = [value for value in values if value is not None]
    if not given:
        raise TypeError(f"MLP needs {names[0]} (or {names[1]}).")
    if len(given) == 2 and given[0] != given[1]:
        raise TypeError(f"MLP got {names[0]}={values[0]!r} and {names[1]}={values[1]!r}: give one.")
    return given[0]


class MLP(nn.Sequential):
    """``Linear -> activation [-> LayerNorm] [-> Dropout]`` per hidden width, then a head.

    Args:
        input_dim: Input size (also ``in_dim``).
        output_dim: Output size, or an output shape (also ``out_dim``).
        hidden_dims: Hidden widths (also ``hidden_sizes``).
        activation: Hidden activation (see ``MLP_ACTIVATIONS``).
        last_activation: Activation after the head (``None``: linear output).
        use_layernorm: A ``LayerNorm`` after every hidden activation.
        dropout_p: Dropout probability after every hidden layer (0: none).

    Raises:
        TypeError: If a size is missing, or given twice with different values.
        ValueError: For an unknown activation, a non-positive width or a
            dropout probability outside [0, 1).
    """

    def __init__(
        self,
        input_dim: int | None = None,
        output_dim: int | Sequence[int] | None = None,
        hidden_dims: Sequence[int] | None = None,
        activation: str = "elu",
        last_activation: str | None = None,
        use_layernorm: bool = False,
        dropout_p: float = 0.0,
        *,
        in_dim: int | None = None,
        out_dim: int | Sequence[int] | None = None,
        hidden_sizes: Sequence[int] | None = None,
    ) -> None:
        input_dim = _one_of(("input_dim", "in_dim"), (input_dim, in_dim))
        output_dim = _one_of(("output_dim", "out_dim"), (output_dim, out_dim))
        hidden = list(_one_of(("hidden_dims", "hidden_sizes"), (hidden_dims, hidden_sizes)))
        for name in (activation, last_activation):
            if name is not None and name.lower() not in MLP_ACTIVATIONS:
                raise ValueError(
                    f"activation must be one of {sorted(MLP_ACTIVATIONS)}, got '{name}'."
                )
        if not 0.0 <= float(dropout_p) < 1.0:
            raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}.")
        shape = (int(output_dim),) if isinstance(output_dim, int) else tuple(map(int, output_dim))
        if not shape or min(shape) <= 0:
            raise ValueError(f"output_dim must be a positive int or shape, got {output_dim!r}.")
        layers: list[nn.Module] = []
        width = int(input_dim)
        for size in hidden:
            if int(size) <= 0:
                raise ValueError(f"hidden_dims must be positive, got {hidden}.")
            layers += [nn.Linear(width, int(size)), MLP_ACTIVATIONS[activation.lower()]()]
            if use_layernorm:
                layers.append(nn.LayerNorm(int(size)))
            if dropout_p > 0.0:
                layers.append(nn.Dropout(float(dropout_p)))
            width = int(size)
        layers.append(nn.Linear(width, math.prod(shape)))
        if not isinstance(output_dim, int):
            layers.append(nn.Unflatten(-1, shape))
        if last_activation is not None:
            layers.append(MLP_ACTIVATIONS[last_activation.lower()]())
        super().__init__(*layers)

    @property
    def linear_layers(self) -> list[nn.Linear]:
        """The ``Linear`` layers, input to head."""
        return [module for module in self if isinstance(module, nn.Linear)]

    def init_orthogonal(
        self,
        scales: float | Sequence[float] | None = None,
        *,
        gains: float | Sequence[float] | None = None,
    ) -> None:
        """Orthogonal weights with gain ``scales`` (one for all, or one per ``Linear``;
        default 1.0, as the reference's; ``gains`` is the same), zero biases.

        Raises:
            ValueError: If a list of gains does not have one per ``Linear`` layer.
        """
        if scales is None and gains is None:
            scales = 1.0
        chosen = _one_of(("scales", "gains"), (scales, gains))
        linears = self.linear_layers
        values = (
            [float(chosen)] * len(linears)
            if isinstance(chosen, int | float)
            else [float(gain) for gain in chosen]
        )
        if len(values) != len(linears):
            raise ValueError(
                f"orthogonal_init needs one gain per linear layer ({len(linears)}), "
                f"got {len(values)}."
            )
        with torch.no_grad():
            for layer, gain in zip(linears, values, strict=True):
                nn.init.orthogonal_(layer.weight, gain=gain)
                nn.init.zeros_(layer.bias)
