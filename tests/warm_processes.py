"""Commands in processes of their own, forked from a warm server (torch and pathgrad imported).

A new interpreter spends about 3.5 CPU-seconds importing torch, torch._dynamo
(first touched by an optimizer), pathgrad, TensorBoard and matplotlib before a
command starts; the suite starts a few hundred. Here each command runs in a
process forked from a ``multiprocessing`` fork server that has imported them
once (per test worker): a process of its own, with its own pid, working
directory, environment, standard streams, exit status and signals, that starts
in milliseconds. What it cannot show, and so keeps a real interpreter
(``subprocess``): a fresh import, the installed console script itself,
OpenMP's start-up thread count, and commands read line by line while they run.

``run`` mirrors ``subprocess.run`` and ``start`` ``subprocess.Popen`` for the
commands ``[PATHGRAD, *args]`` (the console script), ``[python, "-m", module,
*args]``, ``[python, "-c", code, *args]`` and ``[python, script, *args]``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from pathgrad.commands.warm_start import ForkedProcess, exit_forked

__all__ = ["run", "start", "WarmProcess"]

PATHGRAD = str(Path(sys.executable).parent / "pathgrad")


def _exec(command: Sequence[str]) -> int:
    """Run ``command`` as its interpreter would in this (fresh) process; its exit status."""
    import runpy

    head, *rest = command
    # sys.path[0] as the interpreter sets it: the script's folder, the working
    # directory for -m, "" for -c (the server's own is "").
    if sys.path[:1] == [""]:
        sys.path.pop(0)
    try:
        if head == PATHGRAD or Path(head).name == "pathgrad":
            from pathgrad.cli import main

            sys.path.insert(0, str(Path(head).parent))
            sys.argv = [head, *rest]
            return int(main(rest) or 0)
        if rest[:1] == ["-m"]:
            sys.path.insert(0, os.getcwd())
            sys.argv = [rest[1], *rest[2:]]
            runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
            return 0
        if rest[:1] == ["-c"]:
            sys.path.insert(0, "")
            sys.argv = ["-c", *rest[2:]]
            exec(compile(rest[1], "<string>", "exec"), {"__name__": "__main__"})
            return 0
        sys.path.insert(0, str(Path(rest[0]).resolve().parent))
        sys.argv = list(rest)
        runpy.run_path(rest[0], run_name="__main__")
        return 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return int(stop.code or 0)
        print(stop.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        traceback.print_exc()
        return 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
        return 1


def _child(
    command: list[str],
    cwd: str,
    env: dict[str, str],
    stdout_path: str,
    stderr_path: str,
    new_session: bool,
) -> None:
    """The forked process: set up as a new interpreter would be, run, exit."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    if new_session:
        os.setsid()
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for entry in reversed(env.get("PYTHONPATH", "").split(os.pathsep)):
        if entry:
            sys.path.insert(0, entry)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, stdout_path), (2, stderr_path)):
        target = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.dup2(target, fd)
        os.close(target)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    exit_forked(_exec(command))


class WarmProcess(ForkedProcess):
    """A started command: the parts of ``subprocess.Popen`` the tests use."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        cwd: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        start_new_session: bool = False,
    ) -> None:
        folder = tempfile.mkdtemp(prefix="warm-")
        weakref.finalize(self, shutil.rmtree, folder, ignore_errors=True)
        self._out, self._err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        for path in (self._out, self._err):
            Path(path).touch()
        arguments = ([str(part) for part in command], str(cwd or os.getcwd()),
                     dict(os.environ if env is None else env), self._out, self._err,
                     start_new_session)  # fmt: skip
        super().__init__(_child, arguments)  # the server that sweeps fork their runs from
        self.args = arguments[0]

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def output(self) -> tuple[str, str]:
        """Everything the command has written to stdout and stderr so far."""
        return Path(self._out).read_text(), Path(self._err).read_text()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self.output()


def start(
    command: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    start_new_session: bool = False,
) -> WarmProcess:
    """``subprocess.Popen(command, ...)`` with stdout and stderr kept (``communicate``)."""
    return WarmProcess(command, cwd=cwd, env=env, start_new_session=start_new_session)


def run(
    command: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess:
    """``subprocess.run(command, capture_output=True, text=True, ...)`` in a warm process."""
    process = start(command, cwd=cwd, env=env)
    try:
        stdout, stderr = process.communicate(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
