"""Phases stored and printed for speed, fidelity and agent starts on the real vLLM CPU build
(``.venv-vllm``, the tiny Hugging Face Llama, ``-O0``). A vLLM start costs 30-100 s on this machine, so
the file runs four: a two-arm speed design through the real CLI (``frank run``, then ``frank analyze``,
``frank analyze --json`` and ``frank report``), and one start each of a fidelity and an agent design
through the runner's own per-slot code (``runner.run_slot``: phases, cache folders, prefetch) and
``runner.record_slot``. Every start must be ok and stop cleanly on SIGTERM (a SIGKILL is a failure)."""

from __future__ import annotations

import json
from collections.abc import Iterator
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import frank
from frankenstein.campaign import Campaign, init_campaign
from frankenstein.design import timespent
from frankenstein.design.caches import recipe_key
from frankenstein.design.registry import register
from frankenstein.design.runner import record_slot, run_slot
from frankenstein.report.phases import time_lines
from frankenstein.store import StartRow
from frankenstein.workload.trace import Turn, load_trace, write_trace

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--dtype", "float32", "--max-model-len", "1024", "--seed", "1", "-O0"]

TOML = """\
name = "vllm-phases"
served = "base"

[recipes.base]
engine = "vllm"
model = "{model}"
python = "{python}"
args = {args}
env = {{ VLLM_CPU_KVCACHE_SPACE = "1" }}
start_timeout_s = 600

[parts.seed2]
description = "another seed"
args = ["--seed", "2"]
"""

ARMS = """
[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["seed2"]
"""

DESIGNS = {
    "sp": 'name = "sp"\nkind = "speed"\nblocks = 1\nworkload = "workloads/w.jsonl"\n'
    '[rule]\nkind = "all_blocks_better"\nalpha = 0.5\n[replay]\nwarmup_turns = 1\n',
    "fq": 'name = "fq"\nkind = "fidelity"\nblocks = 1\nworkload = "workloads/w.jsonl"\n'
    '[rule]\nkind = "fidelity"\ntolerance = 0.02\n[fidelity]\ntop_k = 4\n',
    "ag": 'name = "ag"\nkind = "agent"\nblocks = 1\nprimary_metric = "passes"\n[rule]\nkind = "harm"\nalpha = 0.5\n'
    '[agent]\ntasks = ["spec-durations"]\ndraws = 1\nlimits = { turns = 1, output_tokens = 8 }\n',
}
EXPECTED = {"sp": {"warmup", "replay", "scrape"}, "fq": {"prepare", "force"}, "ag": {"tasks"}}


@pytest.fixture(scope="module")
def vllm_python() -> str:
    path = os.environ.get("FRANK_VLLM_PYTHON") or str(ROOT / ".venv-vllm" / "bin" / "python")
    if not Path(path).is_file():
        pytest.fail(
            f"no vLLM interpreter at {path}: run `make vllm-env` (see docs/engines.md) or set FRANK_VLLM_PYTHON"
        )
    return path


def _ok_and_clean(row: StartRow, expected: set[str]) -> timespent.StartPhases:
    """The start is ok, on vLLM, stopped by SIGTERM, with every expected phase stored."""
    assert row.engine == "vllm" and row.status == "ok", (row.status, row.reason)
    rec = timespent.read(row.phases)
    assert rec is not None, f"start {row.id} has no phases"
    assert {"launch", "ready", "stop", "caches", *expected} <= set(rec.phases), rec.phases
    assert rec.notes["stopped_by"] == "SIGTERM", rec.notes  # a SIGKILL means the grace was too short
    assert rec.phases["ready"] > 5 and rec.phases["stop"] < rec.notes["stop_grace_s"]
    assert sum(rec.phases.values()) == pytest.approx(rec.total_s, abs=0.01)
    assert rec.write_s is not None and 0 <= rec.write_s < 5
    return rec


@pytest.fixture(scope="module")
def camp(tmp_path_factory: pytest.TempPathFactory, vllm_python: str) -> Iterator[Campaign]:
    tmp_path = tmp_path_factory.mktemp("vllm-phases")
    model = tmp_path / "tiny-hf"
    script = ROOT / "scripts" / "make_tiny_hf_llama.py"
    subprocess.run([sys.executable, str(script), "--out", str(model)], check=True, capture_output=True, timeout=120)
    c = init_campaign(tmp_path / "c", toml=TOML.format(model=model, python=vllm_python, args=json.dumps(ARGS)))
    turns = [
        Turn(
            turn_id=f"s1-{i:04d}",
            session_id="s1",
            turn_index=i,
            endpoint="/v1/completions",
            request={"prompt": p},
            output={"text": " return x", "completion_tokens": 8},
            source="test",
        )
        for i, p in enumerate(["def parse(line):\n    ", "import json\n"])
    ]
    write_trace(c.root / "workloads" / "w.jsonl", turns)
    for name, text in DESIGNS.items():
        (c.root / f"{name}.toml").write_text(text + ARMS)
    yield c
    c.close()


def test_a_speed_design_run_by_frank_run_stores_and_prints_phases_per_arm(camp: Campaign, tmp_path: Path) -> None:
    root = str(camp.root)
    r = frank("register", str(camp.root / "sp.toml"), "-c", root)
    assert r.returncode == 0, r.stderr
    r = frank("run", "sp-1", "-c", root, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = camp.store.starts_of("sp-1")
    assert sorted(row.arm for row in rows) == ["candidate", "served"]
    recs = {row.arm: _ok_and_clean(row, EXPECTED["sp"]) for row in rows}
    keys = {row.arm: row.resources["caches"]["folder"] for row in rows}
    assert keys["served"] != keys["candidate"] and all(k.endswith(f"/{arm}/warm") for arm, k in keys.items())

    r = frank("analyze", "sp-1", "-c", root)
    assert r.returncode == 0, r.stderr
    text = r.stdout[r.stdout.index("where the time went") :]
    print("\n" + text)
    header, served, candidate = text.splitlines()[1:4]
    assert "launch → ready" in header and "replay" in header and "stop" in header and "write" in header
    for line, arm in ((served, "served"), (candidate, "candidate")):
        cells = line.split()
        assert cells[:2] == [arm, "1"]
        assert float(cells[-1]) == pytest.approx(recs[arm].total_s, abs=0.01)  # the arm's total, as stored
    assert "2 starts took" in text and "starting and stopping engines (launch, ready, stop)" in text

    r = frank("analyze", "sp-1", "-c", root, "--json")
    assert r.returncode == 0, r.stderr
    spent = json.loads(r.stdout)["time_spent"]
    per_start = {s["arm"]: s for s in spent["per_start"]}
    for arm, rec in recs.items():
        assert per_start[arm]["phases"] == pytest.approx(rec.phases) and per_start[arm]["write_s"] == rec.write_s
        assert per_start[arm]["notes"]["stopped_by"] == "SIGTERM" and per_start[arm]["status"] == "ok"

    r = frank("report", "-c", root, "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    note = next((tmp_path / "out").rglob("note.md")).read_text()
    section = note[note.index("### Where the time went") :]
    assert "| arm | starts |" in section and "| served | 1 |" in section and "| candidate | 1 |" in section
    assert "- Engine caches: warm" in section


@pytest.mark.parametrize("name", ["fq", "ag"])
def test_a_fidelity_and_an_agent_start_store_their_phases(camp: Campaign, name: str) -> None:
    """One start each (a vLLM start is slow here): the first slot, through the runner's per-slot code."""
    reg = register(camp, camp.root / f"{name}.toml")
    workload = load_trace(reg.frozen.workload_path) if reg.frozen.workload_path else None
    slot = reg.slots()[0]
    record_slot(camp, reg.design_id, slot, run_slot(camp, reg, slot, workload))
    (row,) = camp.store.starts_of(reg.design_id)
    _ok_and_clean(row, EXPECTED[name])
    key = recipe_key(reg.frozen.recipes[slot.arm])
    assert row.resources["caches"]["folder"] == f"caches/{key}/{slot.arm}/warm"
    lines = time_lines(timespent.summarize(camp.store.starts_of(reg.design_id)))
    print(f"\n{name}:\n" + "\n".join(lines))
    assert lines[1] == "where the time went (mean seconds per start, per arm):"
    assert lines[3].split()[:2] == [slot.arm, "1"] and "launch → ready" in lines[2]
