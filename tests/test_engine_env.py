"""Engine settings inherited from frank's shell are evidence: llama.cpp reads a ``LLAMA_ARG_*`` for every flag
(vLLM, CUDA and the BLAS libraries have theirs), so a variable left in the shell changes what runs without being
in the recipe or the design hash. Every start launched by frank records the ones it inherited (credentials
redacted, never stored), the note's machine table shows them, and a start whose inherited settings differ from
the design's other starts (a ``--resume`` from another shell) is flagged. Real processes: command arms that
read their environment, run through the runner as every kind is."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from frankenstein.design.registry import register
from frankenstein.design.runner import run_design
from frankenstein.design.start import machine_differences, start_label
from frankenstein.engines import engine_settings
from frankenstein.report.note import write_report

from helpers_campaign import make_campaign

SECRET = "hf_SECRET-0123456789abcdef"

# What the arm saw of its environment, written where the test reads it back: proof that the engine inherits it.
BENCH = """\
import json, os, sys
from pathlib import Path
Path(sys.argv[2]).write_text(os.environ.get("LLAMA_ARG_UBATCH", "unset"))
print(json.dumps({"verify_step_ms": float(sys.argv[1])}))
"""

DESIGN = """\
name = "envd"
kind = "speed"
blocks = 2
primary_metric = "verify_step_ms"

[arms.served]
command = ["{py}", "{bench}", "2.0", "{root}/served.saw"]

[arms.candidate]
command = ["{py}", "{bench}", "1.5", "{root}/candidate.saw"]

[rule]
kind = "all_blocks_better"
alpha = 0.25
"""


def test_inherited_engine_settings_are_recorded_shown_and_flagged(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("LLAMA_ARG_REPACK", raising=False)  # the session's machine workaround (conftest), if set
    monkeypatch.setenv("LLAMA_ARG_UBATCH", "128")
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("UNRELATED_VAR", "x")
    monkeypatch.setenv("LLAMA_CACHE", "/tmp/shell-cache")  # frank sets it to the arm's cache folder: not inherited
    c = make_campaign(tmp_path / "c")
    (c.root / "bench.py").write_text(BENCH)
    design = c.root / "envd.toml"
    design.write_text(DESIGN.format(py=sys.executable, bench=c.root / "bench.py", root=c.root))
    reg = register(c, design)
    run_design(c, reg.design_id, echo=lambda s: None)
    rows = c.store.starts_of(reg.design_id)
    assert len(rows) == 4 and all(r.ok for r in rows)
    assert (c.root / "served.saw").read_text() == "128"  # the arm really ran with it
    assert all(r.resources["engine_env"] == {"HF_TOKEN": "<redacted>", "LLAMA_ARG_UBATCH": "128"} for r in rows)
    db = (c.root / "frank.db").read_bytes()
    assert SECRET.encode() not in db  # a credential's value is never recorded

    note = write_report(c, tmp_path / "out").read_text()
    assert SECRET not in note
    header = next(x for x in note.splitlines() if x.startswith("| host |"))
    assert header.rstrip("| ").endswith("engine env | starts")
    assert "HF_TOKEN=<redacted>, LLAMA_ARG_UBATCH=128" in note

    # a resumed start whose shell lacked the variable is named, with what changed
    served = [r for r in rows if r.arm == "served"]
    moved = dataclasses.replace(served[1], resources={**served[1].resources, "engine_env": {}})
    flags = machine_differences([served[0], moved])
    assert flags == [
        f"{start_label(moved)} ran on a different machine: engine env inherited: "
        "HF_TOKEN=<redacted>, LLAMA_ARG_UBATCH=128 → none"
    ] or flags == [
        f"{start_label(served[0])} ran on a different machine: engine env inherited: "
        "none → HF_TOKEN=<redacted>, LLAMA_ARG_UBATCH=128"
    ]
    c.close()


@pytest.mark.parametrize("name", ["OPENAI_API_KEY_FOR_VLLM", "VLLM_API_KEY", "HF_AUTH_TOKEN", "NCCL_PASSWORD"])
def test_a_credential_named_any_way_is_redacted(name: str) -> None:
    got = engine_settings("openai", {}, {name: "s3cr3t", "PATH": "/bin"})  # a recipe command: every engine's
    assert "s3cr3t" not in repr(got) and "PATH" not in got
    assert got == ({name: "<redacted>"} if name.startswith(("VLLM_", "HF_", "NCCL_")) else {})


def test_a_variable_frank_sets_for_the_start_is_not_the_shells() -> None:
    got = engine_settings("llamacpp", {"LLAMA_CACHE": "/c/caches/x"}, {"LLAMA_CACHE": "/shell", "OMP_NUM_THREADS": "2"})
    assert got == {"OMP_NUM_THREADS": "2"}


def test_an_engines_settings_are_its_own_and_the_libraries() -> None:
    """Each adapter names its variables (``EngineTraits.settings``): a llama.cpp start records ``LLAMA_*`` and the
    libraries' (``OMP_*``), not vLLM's; a vLLM start the reverse; a server frank did not start records none of
    its own; a recipe command (program unknown) every adapter's."""
    shell = {"LLAMA_ARG_UBATCH": "64", "VLLM_USE_V1": "1", "SGL_X": "1", "OMP_NUM_THREADS": "2", "PATH": "/bin"}
    assert engine_settings("llamacpp", {}, shell) == {"LLAMA_ARG_UBATCH": "64", "OMP_NUM_THREADS": "2"}
    assert engine_settings("vllm", {}, shell) == {"VLLM_USE_V1": "1", "OMP_NUM_THREADS": "2"}
    assert engine_settings("sglang", {}, shell) == {"SGL_X": "1", "OMP_NUM_THREADS": "2"}
    assert engine_settings("external", {}, shell) == {"OMP_NUM_THREADS": "2"}
    assert engine_settings("openai", {}, shell) == {k: v for k, v in shell.items() if k != "PATH"}
