"""``sin``, ``cos`` and squares rounded as NumPy rounds them, for bitwise parity.

PyTorch's vectorized CPU kernels round about 0.2% of float64 sines and cosines
differently in the last place than the C library that NumPy (and so Gymnasium)
uses, and NumPy scalars square through C ``pow``, which is not correctly
rounded. Over a 200-step episode either breaks bitwise equality more often
than not. On CPU these functions compute the value with NumPy and the
derivative with PyTorch; on other devices they fall back to PyTorch.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["libm_cos", "libm_sin", "libm_square"]


class _NumpySin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return torch.from_numpy(np.sin(x.detach().numpy()))

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * torch.cos(x)


class _NumpyCos(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return torch.from_numpy(np.cos(x.detach().numpy()))

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return -grad * torch.sin(x)


def libm_sin(x: torch.Tensor) -> torch.Tensor:
    """``sin(x)``, rounded like NumPy on CPU; differentiable."""
    return _NumpySin.apply(x) if x.device.type == "cpu" else torch.sin(x)


def libm_cos(x: torch.Tensor) -> torch.Tensor:
    """``cos(x)``, rounded like NumPy on CPU; differentiable."""
    return _NumpyCos.apply(x) if x.device.type == "cpu" else torch.cos(x)


class _ScalarPowSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        values = x.detach().numpy()
        return torch.from_numpy(np.array([value**2 for value in values], dtype=values.dtype))

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * 2 * x


def libm_square(x: torch.Tensor) -> torch.Tensor:
    """``x**2`` of a vector as NumPy scalars compute it (C ``pow``/``powf``).

    The C library's ``pow(x, 2)`` differs from the correctly rounded ``x * x``
    in the last place for about 0.05-0.1% of inputs; Gymnasium squares NumPy
    scalars, so parity needs the same rounding. One Python call per element on
    CPU (a parity tool, not a fast path); ``x * x`` on other devices.
    """
    if x.device.type != "cpu" or x.ndim != 1:
        return x * x
    return _ScalarPowSquare.apply(x)
