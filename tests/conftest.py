"""Suite-wide collection: Newton tests in two groups of about equal time; long tests first.

On a cold cache every worker that first builds a Newton model compiles the same
Warp kernels (tens of seconds); under ``--dist loadgroup`` (``make test``) each
Newton group runs on one worker. One group of all of them took 12 minutes of the
suite's 15 on one worker (measured with both cores busy) while the other worker ran
out of work; two halves let both compile once and share the work. xdist hands out
units (a group, or one test) in collection order, so the largest units go to the
front: the two Newton groups first, then the long tests (marked ``slow``, or in the
modules that start processes and train); started last, one of them would keep one
worker busy while the other idles.
"""

from __future__ import annotations

import pytest

NEWTON_TESTS = ("envs/newton/", "rendering/test_render_newton.py", "experimental/")
# The second Newton group: these modules took 365 of the group's 725 s (--durations=0).
SECOND_NEWTON_GROUP = tuple(f"envs/newton/test_{name}.py" for name in (
    "body_contact_jacobians", "gradient_check_start", "diffrl_humanoid", "contact_signal",
    "mujoco_meaning"))  # fmt: skip
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
        if under(item, SECOND_NEWTON_GROUP):
            item.add_marker(pytest.mark.xdist_group("newton_second"))
        elif under(item, NEWTON_TESTS):
            item.add_marker(pytest.mark.xdist_group("newton"))

    def start_order(item: pytest.Item) -> int:
        """0: the Newton groups (the largest units xdist hands out), 1: long, 2: the rest."""
        if under(item, NEWTON_TESTS):
            return 0
        if under(item, LONG_TESTS) or item.get_closest_marker("slow"):
            return 1
        return 2

    items.sort(key=start_order)  # stable: the order within each part is kept
