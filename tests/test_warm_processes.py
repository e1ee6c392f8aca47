"""tests/warm_processes.py behaves as a new interpreter would, where the tests rely on it."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time

import warm_processes

PYTHON = sys.executable


def test_exit_status_streams_arguments_directory_and_environment(tmp_path):
    code = textwrap.dedent(
        """
        import atexit, os, sys
        atexit.register(lambda: print("atexit ran"))
        print(sys.argv, os.getcwd(), os.environ["WARM_TEST"], repr(sys.path[0]))
        print("to stderr", file=sys.stderr)
        sys.exit(7)
        """
    )
    env = {**os.environ, "WARM_TEST": "yes"}
    result = warm_processes.run([PYTHON, "-c", code, "a", "b"], cwd=tmp_path, env=env)
    assert result.returncode == 7
    assert result.stdout == f"['-c', 'a', 'b'] {tmp_path} yes ''\natexit ran\n"
    assert result.stderr == "to stderr\n"


def test_a_script_sees_its_folder_first_and_pythonpath_next(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "shadowed.py").write_text("WHERE = 'lib'\n")
    script = tmp_path / "script.py"
    script.write_text("import sys, shadowed\nprint(sys.path[0], shadowed.WHERE, __name__)\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "lib")}
    result = warm_processes.run([PYTHON, str(script)], cwd="/", env=env)
    assert result.stdout == f"{tmp_path} lib __main__\n", result.stderr


def test_the_console_script_and_a_module_run_as_commands(tmp_path):
    result = warm_processes.run([warm_processes.PATHGRAD, "--help"], cwd=tmp_path)
    assert result.returncode == 0 and "usage: pathgrad" in result.stdout
    (tmp_path / "here_module.py").write_text("import sys; print(sys.path[0], __name__)\n")
    result = warm_processes.run([PYTHON, "-m", "here_module"], cwd=tmp_path)
    assert result.stdout == f"{tmp_path} __main__\n", result.stderr  # -m: the directory first


def test_an_uncaught_exception_prints_its_traceback_and_exits_1(tmp_path):
    result = warm_processes.run([PYTHON, "-c", "raise ValueError('broken')"], cwd=tmp_path)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "ValueError: broken" in result.stderr


def test_signals_reach_the_process_and_its_status_says_so(tmp_path):
    code = "import time; print('started', flush=True); time.sleep(60)"
    for signum in (signal.SIGKILL, signal.SIGTERM):
        process = warm_processes.start([PYTHON, "-c", code], cwd=tmp_path)
        deadline = time.monotonic() + 30
        while process.output()[0] != "started\n" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process.poll() is None and process.pid != os.getpid()
        process.send_signal(signum)
        assert process.wait(timeout=30) == -signum


def test_a_new_session_leads_its_own_group(tmp_path):
    code = "import os; print(os.getsid(0) == os.getpid())"
    process = warm_processes.start([PYTHON, "-c", code], cwd=tmp_path, start_new_session=True)
    assert process.communicate(timeout=30) == ("True\n", "")
