"""``pathgrad`` commands in processes forked from one warm server: a sweep's runs start at once.

A new interpreter spends 4-5 CPU-seconds importing torch, ``torch._dynamo``
(which the first optimizer touches), pathgrad and TensorBoard before a run's
first update. A sweep starts its runs instead from a ``multiprocessing`` fork
server that has imported them once (:func:`start_command`): each run is still a
process of its own (its pid, session, working directory, environment, standard
streams, exit status and signals), started in milliseconds; the server costs
one interpreter per sweep. Off Linux (macOS's system libraries are not safe
to use in a forked child; Windows has no fork), or where
``PATHGRAD_FRESH_PROCESSES=1`` asks for it, each command gets a new
interpreter (``python -m pathgrad``), as before.

A forked run's parent is the server, which exits when the sweep does (even
after ``kill -9``), so the run's parent watch (:mod:`pathgrad.core.parent_watch`)
ends it then as it ends a run whose sweep died. ``OMP_NUM_THREADS`` of the run's
environment sets its torch threads (OpenMP read the server's at start-up).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import traceback
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from pathgrad.core.parent_watch import PARENT_PID_VARIABLE

__all__ = [
    "FRESH_PROCESSES_VARIABLE",
    "CommandProcess",
    "ForkedProcess",
    "exit_forked",
    "start_command",
]

FRESH_PROCESSES_VARIABLE = "PATHGRAD_FRESH_PROCESSES"
# What a run imports (torch._dynamo: its optimizer's first call; plotting: its last curve).
_PRELOAD = ["torch", "torch._dynamo", "torch.utils.tensorboard", "pathgrad.cli",
            "pathgrad.commands.training", "pathgrad.runs.plotting"]  # fmt: skip
_context: Any = None


class CommandProcess(Protocol):
    """What a supervisor uses of a started command (a part of ``subprocess.Popen``)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def start_command(
    arguments: Sequence[str], *, env: Mapping[str, str], stderr_path: Path
) -> CommandProcess:
    """``pathgrad ARGUMENTS`` in a new session, stdin and stdout on ``/dev/null``, stderr
    appended to ``stderr_path``; a forked warm process where the platform allows."""
    if os.environ.get(FRESH_PROCESSES_VARIABLE) == "1" or not _forkserver_available():
        with open(stderr_path, "ab") as log:
            return subprocess.Popen([sys.executable, "-m", "pathgrad", *arguments], env=dict(env),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=log, start_new_session=True)  # fmt: skip
    return ForkedProcess(_run_command, (list(arguments), os.getcwd(), dict(env), str(stderr_path)))


def _forkserver_available() -> bool:
    """Linux only: macOS's system libraries are not safe to use in a forked child."""
    return (
        sys.platform.startswith("linux") and "forkserver" in multiprocessing.get_all_start_methods()
    )


def _server() -> Any:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(_PRELOAD)
    return _context


class ForkedProcess:
    """``target(*args)`` in a process forked from the warm server (a part of ``Popen``)."""

    def __init__(self, target: Any, args: tuple) -> None:
        self.args = args
        self._process = _server().Process(target=target, args=args, daemon=False)
        # The child must not import this process's __main__ (a user's script that starts
        # a sweep) as multiprocessing does for its children: it runs only ``target``.
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            self._process.start()
        finally:
            sys.modules["__main__"] = main
        self.pid: int = self._process.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not self._process.is_alive():
            self._process.join()
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode  # type: ignore[return-value]


def _run_command(arguments: list[str], cwd: str, env: dict[str, str], stderr_path: str) -> None:
    """The forked process: set up as ``python -m pathgrad ARGUMENTS`` would be, run, exit."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    os.setsid()  # its own session: a terminal's Ctrl-C reaches the supervisor alone
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    _let_the_server_end_with_the_supervisor()
    if PARENT_PID_VARIABLE in env:  # its parent is the server, which ends with the supervisor
        os.environ[PARENT_PID_VARIABLE] = str(os.getppid())
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    log = os.open(stderr_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 2)
    os.close(log)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    code = 1
    try:
        import torch

        threads = env.get("OMP_NUM_THREADS", "")
        if threads.isdigit() and int(threads) > 0:
            torch.set_num_threads(int(threads))
        sys.argv = ["-m", *arguments]  # as ``python -m pathgrad`` sets it (argv[0] below)
        runpy.run_module("pathgrad", run_name="__main__", alter_sys=True)  # exits with the status
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except KeyboardInterrupt:
        code = 128 + signal.SIGINT
    except BaseException:  # noqa: BLE001 - as an interpreter would: the traceback, status 1
        traceback.print_exc()
    finally:
        exit_forked(code)


def exit_forked(code: int) -> None:
    """End a forked process as an interpreter ends: exit handlers, streams flushed, ``code``."""
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code & 0xFF if code >= 0 else 1)


def _let_the_server_end_with_the_supervisor() -> None:
    """Close this process's copies of the server's "alive" pipe and the resource tracker's.

    The server exits when every holder of the pipe's write end has closed it; a
    forked child inherits one, which would keep the server, and so the child's
    parent, alive after the supervisor died, and its parent watch would never fire.
    """
    from multiprocessing import forkserver, resource_tracker

    for owner, name in ((forkserver._forkserver, "_forkserver_alive_fd"),
                        (resource_tracker._resource_tracker, "_fd")):  # fmt: skip
        fd = getattr(owner, name, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
            setattr(owner, name, None)
