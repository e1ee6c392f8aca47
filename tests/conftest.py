"""Suite-wide collection: Newton tests share one xdist worker; long tests start first.

On a cold cache every worker that first builds a Newton model compiles the same
Warp kernels (tens of seconds); under ``--dist loadgroup`` (``make test``) the
``newton`` group runs on one worker, which compiles them once. xdist hands out
units (a group, or one test) in collection order, so the largest units go to the
front: the ``newton`` group first (minutes on one worker), then the long tests
(marked ``slow``, or in the modules that start processes and train); started
last, one of them would keep one worker busy while the other idles.
"""

from __future__ import annotations

import pytest

NEWTON_TESTS = ("envs/newton/", "rendering/test_render_newton.py", "experimental/")
# Modules whose tests start pathgrad processes that train (tens of seconds each).
LONG_TESTS = ("commands/test_sweep_faults.py", "commands/test_sweeps.py", "distributed/",
              "test_scripts.py", "test_docs.py")  # fmt: skip


def under(item: pytest.Item, parts: tuple[str, ...]) -> bool:
    """Whether ``item``'s file lies under one of ``parts`` of tests/."""
    path = item.path.as_posix()
    return any(f"/tests/{part}" in path for part in parts)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if under(item, NEWTON_TESTS):
            item.add_marker(pytest.mark.xdist_group("newton"))

    def start_order(item: pytest.Item) -> int:
        """0: the Newton group (the largest unit xdist hands out), 1: long, 2: the rest."""
        if under(item, NEWTON_TESTS):
            return 0
        if under(item, LONG_TESTS) or item.get_closest_marker("slow"):
            return 1
        return 2

    items.sort(key=start_order)  # stable: the order within each part is kept
