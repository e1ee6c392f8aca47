"""A sweep's runs start as ``pathgrad`` commands forked from a warm server, or fresh."""

from __future__ import annotations

import os
import subprocess

import pytest

from pathgrad.commands.warm_start import FRESH_PROCESSES_VARIABLE, start_command


@pytest.mark.parametrize("fresh", ["0", "1"], ids=["forked", "fresh"])
def test_a_started_command_has_the_status_streams_and_folder_of_its_own(
    tmp_path, monkeypatch, fresh
):
    monkeypatch.setenv(FRESH_PROCESSES_VARIABLE, fresh)
    monkeypatch.chdir(tmp_path)
    log = tmp_path / "stderr.log"
    log.write_text("kept\n")
    environment = {**os.environ, "PATHGRAD_TEST_MARK": "seen"}
    process = start_command(["train", "missing.yaml", "--quiet"], env=environment, stderr_path=log)
    assert isinstance(process, subprocess.Popen) == (fresh == "1")  # forked where asked
    assert process.wait(timeout=120) == 2 and process.poll() == 2  # bad input: usage error
    lines = log.read_text().splitlines()
    assert lines[0] == "kept" and "cannot read config file 'missing.yaml'" in lines[1], lines
    assert list(tmp_path.iterdir()) == [log]  # nothing else written where it ran
