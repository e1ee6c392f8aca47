"""Suite-wide collection: Newton tests share one xdist worker; long tests start first.

On a cold cache every worker that first builds a Newton model compiles the same
Warp kernels (tens of seconds); under ``--dist loadgroup`` (``make test``) the
``newton`` group runs on one worker, which compiles them once. xdist hands out
the other tests in collection order, so the long ones (marked ``slow``, or in
the modules that start processes and train) are moved to the front: started
last, one of them would keep one worker busy while the other idles.
"""

from __future__ import annotations

import pytest

NEWTON_TESTS = ("envs/newton/", "rendering/test_render_newton.py")
# Modules whose tests start pathgrad processes that train (tens of seconds each).
LONG_TESTS = ("commands/test_sweep_faults.py", "commands/test_sweeps.py", "distributed/",
              "test_scripts.py", "test_docs.py")  # fmt: skip


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path.as_posix()
        if any(f"/tests/{part}" in path for part in NEWTON_TESTS):
            item.add_marker(pytest.mark.xdist_group("newton"))

    def starts_late(item: pytest.Item) -> bool:
        in_long_module = any(f"/tests/{part}" in item.path.as_posix() for part in LONG_TESTS)
        return not (in_long_module or item.get_closest_marker("slow"))

    items.sort(key=starts_late)  # stable: the order within each part is kept
