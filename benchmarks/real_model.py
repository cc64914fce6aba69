"""Helpers for the benchmarks on the real model (SmolLM2-135M-Instruct Q4_1, `make real-model`): where it is,
and the llama-server arguments this machine needs to load it.

``cpu_args`` follows tests/conftest.py ``real_model_cpu_args``: where the CPU advertises AMX tiles, one real
llama-server load of the model is tried; if it dies by SIGILL (a VM that traps AMX; the ``-march=native``
build repacks Q4_1 weights for AMX at load), the workaround is ``--no-repack``. Not a benchmark itself.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from frankenstein.engines.process import free_port


def model_path() -> Path:
    p = Path(os.environ.get("FRANK_REAL_MODEL") or Path.home() / ".cache/frankenstein/SmolLM2-135M-Instruct.Q4_1.gguf")
    if not p.is_file():
        raise SystemExit(f"{p}: the real model is missing (make real-model, or set FRANK_REAL_MODEL)")
    return p


def _amx() -> bool:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(line.startswith("flags") and "amx_tile" in line.split() for line in text.splitlines())


def cpu_args(server: str, model: Path) -> tuple[list[str], str]:
    """(extra llama-server args, why) for loading ``model`` on this machine."""
    if not _amx():
        return [], "no AMX tiles advertised: no extra args"
    cmd = [server, "-m", str(model), "--host", "127.0.0.1", "--port", str(free_port()), "-t", "1", "-c", "256"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "model loaded" in line or "listening on" in line:
                return [], "AMX tiles advertised and the probe load worked: no extra args"
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
        proc.wait(timeout=30)
    if code == -4:
        return ["--no-repack"], "the probe load died by SIGILL (AMX tiles advertised but trapped): --no-repack"
    raise SystemExit(f"llama-server could not load {model} (exit {code}): {' '.join(cmd)}")


def server_args(server: str, model: Path, given: list[str] | None) -> tuple[list[str], str]:
    """``given`` (from ``--server-arg``, used as they are) or the probed :func:`cpu_args`."""
    if given is not None:
        return given, "given by --server-arg"
    return cpu_args(server, model)
