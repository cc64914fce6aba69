"""`frank --version`: package, Python and engine versions, found without starting an engine; a missing engine is a
line saying so, never an error."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

from conftest import frank
from frankenstein import __version__

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


def test_version_names_package_python_and_engines(tmp_path: Path) -> None:
    env = {"FRANK_VLLM_PYTHON": str(VLLM_PYTHON)} if VLLM_PYTHON.exists() else {}
    r = frank("--version", cwd=tmp_path, env=env)  # no campaign here: none is needed
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"frank {__version__}"
    assert lines[1] == f"Python {platform.python_version()} ({sys.executable})"
    assert lines[2].startswith("llama-server ") and "(build" in lines[2]  # the binary's own --version line
    assert lines[3].startswith("vLLM ")
    if env:
        assert lines[3].endswith(f"({VLLM_PYTHON}, from FRANK_VLLM_PYTHON)") and lines[3].split()[1][0].isdigit()
    assert r.stderr == ""


def test_missing_engines_are_lines_not_errors(tmp_path: Path) -> None:
    r = frank("--version", env={"FRANK_LLAMA_SERVER": str(tmp_path / "nope"), "FRANK_VLLM_PYTHON": "/nope/python"})
    assert r.returncode == 0 and r.stderr == ""
    assert f"llama-server: llama-server not found at {tmp_path / 'nope'} (from FRANK_LLAMA_SERVER)" in r.stdout
    assert "vLLM: vLLM python not found at /nope/python (from FRANK_VLLM_PYTHON)" in r.stdout
    r = frank("--version", "init", str(tmp_path / "c"))  # eager: prints and exits before any command runs
    assert r.returncode == 0 and r.stdout.startswith("frank ") and not (tmp_path / "c").exists()
