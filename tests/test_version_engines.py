"""`frank --version` finds vLLM where its adapter would (``./.venv-vllm`` without ``$FRANK_VLLM_PYTHON``) and
reports SGLang, through the real CLI.

vLLM is the real one (``.venv-vllm``, made by ``make vllm-env``). SGLang cannot be installed on these machines
(it needs CUDA), so its installed case uses a STAND-IN package: a folder ``sglang/`` with SGLang's own
``version.py`` layout (``__version__ = "..."``) on a real interpreter's path; the not-installed cases are real.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import frank
from frankenstein.config import ResolvedRecipe
from frankenstein.engines.vllm import VllmEngine, find_vllm_python
from frankenstein.errors import BinaryNotFoundError

ROOT = Path(__file__).resolve().parents[1]
VLLM_VENV = ROOT / ".venv-vllm"


@pytest.fixture(scope="module")
def vllm_version() -> str:
    """vLLM's version as its own distribution metadata states it (another source than the file frank reads)."""
    python = VLLM_VENV / "bin" / "python"
    if not python.is_file():  # `make test` builds it first: missing is a failure, never a skip
        pytest.fail(f"no vLLM interpreter at {python}: run `make vllm-env` (docs/engines.md)")
    probe = "import importlib.metadata as m; print(next(m.version(d) for d in m.packages_distributions()['vllm']))"
    return subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True).stdout.strip()


def _env_without(*names: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in names}


def _version(cwd: Path, env: dict[str, str]) -> list[str]:
    r = subprocess.run(
        [sys.executable, "-m", "frankenstein", "--version"], capture_output=True, text=True, cwd=cwd, env=env
    )
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return r.stdout.splitlines()


def test_vllm_found_in_dot_venv_vllm_without_the_variable(tmp_path: Path, vllm_version: str) -> None:
    (tmp_path / ".venv-vllm").symlink_to(VLLM_VENV, target_is_directory=True)
    lines = _version(tmp_path, _env_without("FRANK_VLLM_PYTHON", "FRANK_SGLANG_PYTHON"))
    vllm = next(x for x in lines if x.startswith("vLLM"))
    assert vllm == f"vLLM {vllm_version} ({tmp_path / '.venv-vllm' / 'bin' / 'python'}, from ./.venv-vllm)"
    assert vllm_version[0].isdigit()


def test_without_a_dot_venv_vllm_or_the_variable_vllm_is_a_line_saying_so(tmp_path: Path) -> None:
    lines = _version(tmp_path, _env_without("FRANK_VLLM_PYTHON"))
    assert "vLLM: no Python interpreter with vLLM is configured" in lines


def test_the_adapter_launches_the_interpreter_version_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vllm_version: str
) -> None:
    """One lookup for both: the adapter of a recipe without ``python`` picks ``./.venv-vllm`` too."""
    (tmp_path / ".venv-vllm").symlink_to(VLLM_VENV, target_is_directory=True)
    monkeypatch.delenv("FRANK_VLLM_PYTHON", raising=False)
    monkeypatch.chdir(tmp_path)
    python = str(tmp_path / ".venv-vllm" / "bin" / "python")
    assert find_vllm_python() == python
    engine = VllmEngine(ResolvedRecipe(name="v", engine="vllm", model="/models/x", args=[], env={}), tmp_path)
    engine.check_recipe()
    assert engine.python == python and engine.package["version"] == vllm_version
    monkeypatch.setenv("FRANK_VLLM_PYTHON", "/nope/python")  # a variable that is set wins, and must exist
    with pytest.raises(BinaryNotFoundError, match=r"vLLM python not found at /nope/python \(from FRANK_VLLM_PYTHON\)"):
        find_vllm_python()


def test_sglang_line_not_installed(tmp_path: Path) -> None:
    lines = _version(tmp_path, _env_without("FRANK_SGLANG_PYTHON"))
    assert lines[4] == "SGLang: not installed (no Python interpreter with SGLang is configured)"
    r = frank("--version", cwd=tmp_path, env={"FRANK_SGLANG_PYTHON": sys.executable})  # real, without sglang
    assert r.returncode == 0 and r.stderr == ""
    assert f"SGLang: not installed ({sys.executable} has no `sglang` package)" in r.stdout.splitlines()
    r = frank("--version", cwd=tmp_path, env={"FRANK_SGLANG_PYTHON": str(tmp_path / "nope")})
    assert f"SGLang: not installed (SGLang python not found at {tmp_path / 'nope'} (from FRANK_SGLANG_PYTHON))" in (
        r.stdout.splitlines()
    )


def test_sglang_version_read_from_its_installed_source(tmp_path: Path) -> None:
    """The STAND-IN package: SGLang's version.py layout, found by the probe in the interpreter
    $FRANK_SGLANG_PYTHON names (never imported: its __init__ would fail if it were)."""
    pkg = tmp_path / "site" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('imported: frank must only read version.py')\n")
    (pkg / "version.py").write_text('__version__ = "0.5.3rc0"\n')
    env = {"FRANK_SGLANG_PYTHON": sys.executable, "PYTHONPATH": str(tmp_path / "site")}
    lines = _version(tmp_path, {**os.environ, **env})
    assert lines[4] == f"SGLang 0.5.3rc0 ({sys.executable}, from FRANK_SGLANG_PYTHON)"
