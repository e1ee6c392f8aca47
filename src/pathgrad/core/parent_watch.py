"""A supervised process ends as if told to when its supervisor dies, even by ``kill -9``.

A sweep's runs and a launcher's ranks are child processes. When their
supervisor is killed without a chance to pass the signal on, they would keep
training unsupervised (orphans). :func:`watch_parent` starts a daemon thread
that notices the parent is gone (the parent pid changes when the child is
re-parented) and sends this process SIGTERM: a run then ends as
``terminated`` with its final checkpoint, as after ``kill -TERM``.
"""

from __future__ import annotations

import os
import signal
import threading

__all__ = ["PARENT_PID_VARIABLE", "supervised_environment", "watch_parent"]

# Set by a supervisor (sweep, launcher) in its children's environment: its own pid.
PARENT_PID_VARIABLE = "PATHGRAD_PARENT_PID"
_POLL_SECONDS = 0.5
_watching = threading.Event()


def supervised_environment(environment: dict[str, str]) -> dict[str, str]:
    """``environment`` for a child that should end when this process dies."""
    return {**environment, PARENT_PID_VARIABLE: str(os.getpid())}


def watch_parent(parent_pid: int | None = None) -> bool:
    """Send SIGTERM to this process once its parent is gone; returns whether it watches.

    Args:
        parent_pid: The supervisor's pid; by default ``PATHGRAD_PARENT_PID`` of
            the environment, else nothing is watched. Watching starts once per
            process.
    """
    if parent_pid is None:
        value = os.environ.get(PARENT_PID_VARIABLE, "")
        if not value.isdigit():
            return False
        parent_pid = int(value)
    if _watching.is_set():
        return True
    _watching.set()
    if os.getppid() != parent_pid:  # already gone before the watch began
        os.kill(os.getpid(), signal.SIGTERM)
        return True

    def watch() -> None:
        stop = threading.Event()
        while not stop.wait(_POLL_SECONDS):
            if os.getppid() != parent_pid:
                os.kill(os.getpid(), signal.SIGTERM)
                return

    threading.Thread(target=watch, name="pathgrad-parent-watch", daemon=True).start()
    return True
