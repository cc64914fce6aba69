"""Shared fixtures: the real llama-server binary, the shipped tiny models, an isolated runtime dir."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from frankenstein.config import ResolvedRecipe
from frankenstein.shipped import data_path

BASE_ARGS = ["--ctx-size", "4096", "--threads", "2", "--parallel", "1", "--seed", "1", "--jinja"]
DRAFT_ARGS = ["-md", str(data_path("tiny-draft.gguf")), "--spec-type", "draft-simple", "--spec-draft-n-max", "8"]


@pytest.fixture(autouse=True)
def _runtime_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own engine pid-file directory (inherited by `frank` subprocesses)."""
    d = tmp_path_factory.mktemp("runtime")
    monkeypatch.setenv("FRANK_RUNTIME_DIR", str(d))
    return d


@pytest.fixture(scope="session")
def llama_server_bin() -> str:
    from frankenstein.engines.llamacpp import find_llama_server

    return find_llama_server()


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {f for line in text.splitlines() if line.startswith("flags") for f in line.split(":", 1)[1].split()}


CPU_WORKAROUNDS: list[str] = []
"""What the session had to change on this machine, printed at the end of the run (never silent)."""


@pytest.fixture(scope="session", autouse=True)
def _llama_cpu_workaround() -> Iterator[None]:
    """``LLAMA_ARG_REPACK=false`` for the session where this machine's llama-server dies by SIGILL loading
    Q8_0 weights: the CPU advertises AMX tiles and llama.cpp's repacking for them traps (seen in Firecracker
    VMs; Q4_1 too, the real model). Probed once with the real binary and the shipped Q8_0 model; every
    llama-server the tests start (by frank, which records the inherited variable in each start, or directly)
    inherits it. Printed in the terminal summary, never silent; without AMX flags nothing is probed."""
    if "amx_tile" not in _cpu_flags() or "LLAMA_ARG_REPACK" in os.environ:
        yield
        return
    from frankenstein.engines.llamacpp import find_llama_server
    from frankenstein.engines.process import free_port

    model = data_path("tiny-target-q8.gguf")
    cmd = [find_llama_server(), "-m", str(model), "--host", "127.0.0.1", "--port", str(free_port()), "-t", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    code = None
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the load either traps within a second or reaches "model loaded"
            if "model loaded" in line or "listening on" in line:
                break
        else:
            code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
        proc.wait(timeout=30)
    if code != -4:  # not SIGILL
        yield
        return
    CPU_WORKAROUNDS.append(
        "llama-server died with SIGILL loading Q8_0 weights (AMX tiles advertised but trapped on this CPU): "
        "tests run with LLAMA_ARG_REPACK=false"
    )
    os.environ["LLAMA_ARG_REPACK"] = "false"
    try:
        yield
    finally:
        del os.environ["LLAMA_ARG_REPACK"]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in CPU_WORKAROUNDS:
        terminalreporter.write_line(f"machine workaround: {line}")


@pytest.fixture
def tiny_recipe(llama_server_bin: str) -> ResolvedRecipe:
    return ResolvedRecipe(
        name="tiny",
        engine="llamacpp",
        model=str(data_path("tiny-target.gguf")),
        args=list(BASE_ARGS),
        env={},
        start_timeout_s=120,
    )


@pytest.fixture
def tiny_spec_recipe(llama_server_bin: str) -> ResolvedRecipe:
    return ResolvedRecipe(
        name="tiny+draft",
        engine="llamacpp",
        model=str(data_path("tiny-target.gguf")),
        args=[*BASE_ARGS, *DRAFT_ARGS],
        env={},
        parts=["draft"],
        start_timeout_s=120,
    )


def frank(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run the real `frank` CLI in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "frankenstein", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


def pids_of(pattern: str) -> list[int]:
    """Live (non-zombie) processes whose command line contains ``pattern``."""
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if pattern in cmd and state != "Z":
            out.append(int(p.name))
    return out


@pytest.fixture
def no_leftover_engines(tmp_path: Path) -> Iterator[None]:
    """Asserts after the test that no llama-server started for this test's tmp_path is alive."""
    yield
    assert pids_of(str(tmp_path)) == [], "an engine outlived its test"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "real: runs on the real model fetched by `make real-model` (SmolLM2-135M)")
