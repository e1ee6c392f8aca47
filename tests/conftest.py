"""Suite-wide collection: tests that build Newton models share one xdist worker.

On a cold cache every worker that first builds a Newton model compiles the same
Warp kernels (tens of seconds); under ``--dist loadgroup`` (``make test``) the
``newton`` group runs on one worker, which compiles them once.
"""

from __future__ import annotations

import pytest

NEWTON_TESTS = ("envs/newton/", "rendering/test_render_newton.py")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path.as_posix()
        if any(f"/tests/{part}" in path for part in NEWTON_TESTS):
            item.add_marker(pytest.mark.xdist_group("newton"))
