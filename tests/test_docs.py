"""The documentation's code: the getting-started page and the Python API's examples run as
written, every other ``pathgrad`` command parsed, every Python block compiled."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pathgrad.cli import _parser
from pathgrad.runs.builtin_configs import builtin_config_names

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"```bash\n(.*?)```", re.DOTALL)
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def bash_blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text(encoding="utf-8"))


def command_lines(page: Path) -> list[str]:
    """``pathgrad ...`` lines of a page's bash blocks, continuation lines joined."""
    lines = []
    for block in bash_blocks(page):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("pathgrad "):
                lines.append(line)
    return lines


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_documented_pathgrad_command_parses(page):
    parser = _parser()
    for line in command_lines(page):
        tokens = [t for t in shlex.split(line)[1:] if not re.search(r"[\[\]|]", t)]
        try:
            args, extra = parser.parse_known_args(tokens)
        except SystemExit:
            pytest.fail(f"{page.name}: `{line}` does not parse")
        unknown = [t for t in extra if t.startswith("-")]
        assert not unknown, f"{page.name}: `{line}` has unknown options {unknown}"
        assert args.command != "train" or all(
            "=" in item or item.endswith(".yaml") or item in builtin_config_names()
            for item in [*args.overrides, *extra]
        ), line


@pytest.mark.slow
def test_the_getting_started_page_runs_as_written(tmp_path):
    blocks = bash_blocks(ROOT / "docs" / "getting_started.md")
    assert "pip install" in blocks[0]  # the install: what make does on every CI run
    # from a folder that is not the clone: the configs it names ship with the package
    environment = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    for block in blocks[1:]:
        result = subprocess.run(["bash", "-e", "-c", block], cwd=tmp_path, env=environment,
                                capture_output=True, text=True)  # fmt: skip
        assert result.returncode == 0, f"{block}\n{result.stderr[-2000:]}"
    (run_dir,) = (tmp_path / "quickstart").iterdir()
    assert (run_dir / "summary.json").is_file() and (run_dir / "provenance.json").is_file()
    for name in ("rollout.gif", "policy.pt2", "policy.onnx"):
        assert (tmp_path / name).stat().st_size > 1000, name


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_python_block_compiles(page):
    for number, block in enumerate(PYTHON_BLOCK.findall(page.read_text(encoding="utf-8"))):
        compile(block, f"{page.name}, python block {number}", "exec")


@pytest.mark.slow
@pytest.mark.parametrize("page", ["README.md"])
def test_the_python_examples_run_as_written(page, tmp_path):
    """From a folder that is not the clone: the configs they name ship with the package.

    (docs/python_api.md's examples run in tests/test_scripts.py, their outputs checked.)"""
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    for block in PYTHON_BLOCK.findall((ROOT / page).read_text(encoding="utf-8")):
        result = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=environment,
                                capture_output=True, text=True, timeout=600)  # fmt: skip
        assert result.returncode == 0, f"{page}:\n{block}\n{result.stderr[-2000:]}"


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    """``make docs``: a broken link, a missing page or a docstring the API reference
    cannot read fails the build (mkdocs --strict)."""
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    environment = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(tmp_path)],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "api" / "index.html").is_file() and (tmp_path / "index.html").is_file()
