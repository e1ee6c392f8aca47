"""Whether a torch device named in a config can be used on this machine."""

from __future__ import annotations

import torch

__all__ = ["device_problem"]


def device_problem(name: str) -> str | None:
    """Why torch device ``name`` cannot be used on this machine, or ``None`` if it can."""
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        return f"'{name}' is not a torch device (e.g. cpu, cuda, cuda:1, mps)"
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return f"'{name}' is not available: this torch ({torch.__version__}) sees no CUDA GPU"
        if device.index is not None and device.index >= torch.cuda.device_count():
            return f"'{name}' is not available: {torch.cuda.device_count()} CUDA GPU(s) found"
    elif device.type == "mps" and not torch.backends.mps.is_available():
        return f"'{name}' is not available on this machine"
    elif device.type not in ("cpu", "cuda", "mps"):
        return f"'{name}' is not supported (use cpu, cuda or mps)"
    return None
