"""NVIDIA Warp without its start-up banner, whoever imports it first.

Warp prints a banner when it initializes (at ``wp.init()`` or its first array)
and its native code reports a missing CUDA driver on stderr. pathgrad
initializes it with both muted, and its commands install :func:`install`
first, so that a user's env module that imports Warp before pathgrad does
meets an already quiet Warp. ``PATHGRAD_WARP_VERBOSE=1`` keeps Warp's messages.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any

__all__ = ["VERBOSE_VARIABLE", "init_quietly", "install"]

VERBOSE_VARIABLE = "PATHGRAD_WARP_VERBOSE"


def _verbose() -> bool:
    return os.environ.get(VERBOSE_VARIABLE) == "1"


def init_quietly(warp: ModuleType) -> None:
    """Initialize ``warp`` with its banner off and stderr muted (native messages), then
    leave its log level at warnings. Nothing with ``PATHGRAD_WARP_VERBOSE=1``."""
    if _verbose():
        return
    warp.config.log_level = warp.LOG_ERROR
    devnull, saved = os.open(os.devnull, os.O_WRONLY), os.dup(2)
    try:
        os.dup2(devnull, 2)
        warp.init()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    warp.config.log_level = warp.LOG_WARNING


class _QuietLoader(importlib.abc.Loader):
    """Warp's own loader, then :func:`init_quietly` on the module it made."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        init_quietly(module)


class _WarpFinder(importlib.abc.MetaPathFinder):
    """Finds ``warp`` as the other finders do, with :class:`_QuietLoader` around it."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "warp":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _QuietLoader(spec.loader)
                return spec
        return None


def install() -> None:
    """Make the first import of Warp in this process initialize it quietly (once)."""
    if _verbose() or any(isinstance(finder, _WarpFinder) for finder in sys.meta_path):
        return
    warp = sys.modules.get("warp")
    if warp is not None:  # imported already: initialize it before anyone prints with it
        init_quietly(warp)
        return
    sys.meta_path.insert(0, _WarpFinder())
