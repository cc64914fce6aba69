"""Memory designs (design/kinds/memory.py) and gates that cite them: each start records its peak memory (the
process tree's RSS from /proc, each GPU's peak where NVML sees one); a speed design's ``[gates] memory = ID``
then decides its adoption. Real processes: command arms that allocate, and real llama-server starts."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import frank
from frankenstein.design.analysis import analyze
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design
from frankenstein.errors import DesignError, LedgerError
from frankenstein.ledger import adopt
from frankenstein.measure.memory import RssSampler

from helpers_campaign import TOML, make_campaign, make_workload
from helpers_ledger import CONFIRMED, gpu, stored_design

ALLOC = """\
import json, sys, time
block = bytearray(int(sys.argv[1]) << 20)  # touched: every page is resident
time.sleep(0.4)
print(json.dumps({"verify_step_ms": 1.0}))
"""

MEMORY = """\
name = "{name}"
kind = "memory"
hypothesis = "the part's peak memory stays within the allowance"
blocks = {blocks}
{workload}
[arms.served]
{served}

[arms.candidate]
{candidate}

[rule]
kind = "memory"
max_increase_mib = {limit}

[replay]
warmup_turns = 1
"""


def _command_memory(root: Path, served_mib: int, candidate_mib: int, limit: float, extra: str = "") -> Path:
    prog = root / "alloc.py"
    prog.write_text(ALLOC)
    p = root / "mem.toml"
    p.write_text(
        MEMORY.format(
            name="alloc",
            blocks=2,
            workload="",
            served=f'command = ["{sys.executable}", "{prog}", "{served_mib}"]',
            candidate=f'command = ["{sys.executable}", "{prog}", "{candidate_mib}"]',
            limit=limit,
        )
        + extra
    )
    return p


def test_rss_sampler_sees_a_process_tree_allocate() -> None:
    """A parent and its child in one process group: the peak is the sum of both, not either alone."""
    code = "import subprocess, sys, time; b = bytearray(40 << 20); "
    code += "subprocess.run([sys.executable, '-c', 'import time; b = bytearray(60 << 20); time.sleep(0.6)'])"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    sampler = RssSampler()
    sampler.start(proc.pid)
    proc.wait()
    rec = sampler.stop()
    assert rec["processes"] == 2 and rec["samples"] >= 3
    assert 100 + 2 * 5 <= rec["rss_mib_peak"] < 100 + 2 * 60, rec  # 40 + 60 MiB, plus two interpreters
    assert RssSampler().stop()["status"] == "not sampled"


def test_a_command_arm_memory_design_measures_peak_rss_and_decides(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    reg = register(c, _command_memory(c.root, 10, 90, limit=50))
    lines: list[str] = []
    run_design(c, reg.design_id, echo=lines.append)
    assert any("RSS_peak_mib=" in line for line in lines), lines
    a = analyze(c, reg.design_id)
    inc = float(re.search(r"increase of peak memory is \+([\d.]+) MiB \(RSS\)", a.why or "").group(1))  # type: ignore[union-attr]
    assert 75 <= inc <= 85, a.why  # 90 - 10 MiB allocated, the interpreter alike in both arms
    assert a.word == "failed" and "over the 50 MiB allowed" in (a.why or "")
    rows = c.store.starts_of(reg.design_id)
    assert all(r.resources["rss"]["processes"] == 1 for r in rows)  # the guard is left out
    assert "rule: memory (candidate at most 50 MiB above served)" in a.lines


def test_memory_designs_refuse_what_they_cannot_decide(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    p = _command_memory(c.root, 10, 20, limit=50)
    p.write_text(p.read_text().replace('kind = "memory"\nmax_increase_mib = 50', 'kind = "sign"\nalpha = 0.05'))
    with pytest.raises(DesignError, match=r'mem.toml: rule.kind: a memory design needs rule.kind = "memory"'):
        register(c, p)
    p = _command_memory(c.root, 10, 20, limit=50, extra='[[vetoes]]\nmetric = "tpot_ms"\nrule = "not_worse"\n')
    with pytest.raises(DesignError, match=r"mem.toml: vetoes: a memory design takes no vetoes"):
        register(c, p)
    p = _command_memory(c.root, 10, 20, limit=-1)
    with pytest.raises(DesignError, match=r"mem.toml: rule.max_increase_mib: Input should be greater than or equal"):
        register(c, p)


BIGCTX = (
    TOML
    + """
[parts.bigctx]
description = "a 16x longer context: a bigger KV cache"
args = ["--ctx-size", "32768"]
"""
)


def _engine_memory(c, name: str, limit: float) -> str:  # type: ignore[no-untyped-def]
    p = c.root / f"{name}.toml"
    p.write_text(
        MEMORY.format(
            name=name,
            blocks=1,
            workload='workload = "workloads/w.jsonl"',
            served='recipe = "served"',
            candidate='recipe = "served"\nparts = ["bigctx"]',
            limit=limit,
        )
    )
    return register(c, p).design_id


@pytest.mark.usefixtures("llama_server_bin", "no_leftover_engines")
def test_a_memory_design_cited_as_a_gate_decides_the_adoption(tmp_path: Path) -> None:
    """Real llama-server starts measure the part's peak RSS (its KV cache); two speed designs cite it as a
    gate through two memory designs of different allowances: one adoption is refused naming the gate, the
    other goes through with the gate's sentence in its scope."""
    c = make_campaign(tmp_path / "c", toml=BIGCTX)
    make_workload(c.root / "workloads" / "w.jsonl")
    strict, loose = _engine_memory(c, "mem-strict", 8), _engine_memory(c, "mem-loose", 4096)
    for did in (strict, loose):
        run_design(c, did, echo=lambda s: None)
    a = analyze(c, strict)
    inc = float(re.search(r"increase of peak memory is \+([\d.]+) MiB", a.why or "").group(1))  # type: ignore[union-attr]
    assert inc > 8, a.lines  # 4 layers x 96 KV dims x 2 x 2 bytes x 30720 more positions = 45 MiB of cache
    assert a.word == "failed" and analyze(c, loose).word == "passed"
    for name, gate in (("speed-strict", strict), ("speed-loose", loose)):
        stored_design(
            c,
            name=name,
            parts='["bigctx"]',
            served=CONFIRMED[0],
            candidate=CONFIRMED[1],
            extra=f'[gates]\nmemory = "{gate}"\n',
        )
    root = str(c.root)
    c.close()
    r = frank("adopt", "bigctx", "--design", "speed-strict-1", "-c", root)
    assert r.returncode == 1
    assert f"memory gate {strict}: failed (the largest increase of peak memory is +" in r.stderr
    assert "over the 8 MiB allowed)" in r.stderr
    r = frank("adopt", "bigctx", "--design", "speed-loose-1", "-c", root)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("step 1: adopted bigctx on design speed-loose-1; served: base + bigctx")
    r = frank("analyze", strict, "-c", root)
    assert r.returncode == 0 and "peak memory per arm (largest over its ok starts, MiB):" in r.stdout, r.stderr
    assert "primary metric:" not in r.stdout  # a memory design tests no primary metric
    out = tmp_path / "note"
    assert frank("report", "--out", str(out), "-c", root).returncode == 0
    didnt = (out / "note.md").read_text().split("## What didn't work", 1)[1]
    assert f"- `{strict}` (memory, part `bigctx`): failed: the largest increase of peak memory is +" in didnt
    assert f"- adoption of `bigctx` on design `speed-strict-1` refused: memory gate {strict}: failed" in didnt


def test_a_memory_gate_citing_another_kind_or_another_part_is_refused(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c", toml=BIGCTX)
    make_workload(c.root / "workloads" / "w.jsonl")
    other = stored_design(c, name="other", served=CONFIRMED[0], candidate=CONFIRMED[1])  # a speed design of draft
    for name, gate in (("cites-speed", other.design_id), ("cites-nothing", "mem-9")):
        stored_design(
            c,
            name=name,
            parts='["bigctx"]',
            served=CONFIRMED[0],
            candidate=CONFIRMED[1],
            extra=f'[gates]\nmemory = "{gate}"\n',
        )
    with pytest.raises(LedgerError, match=r"memory gate other-1: a speed design, not a memory design"):
        adopt(c, "bigctx", "cites-speed-1")
    with pytest.raises(LedgerError, match=r"memory gate mem-9: no registered design 'mem-9'"):
        adopt(c, "bigctx", "cites-nothing-1")
    # a memory design of another part (draft) cannot gate an adoption of bigctx
    p = c.root / "mem-draft.toml"
    p.write_text(
        MEMORY.format(
            name="mem-draft",
            blocks=1,
            workload='workload = "workloads/w.jsonl"',
            served='recipe = "served"',
            candidate='recipe = "served"\nparts = ["draft"]',
            limit=4096,
        )
    )
    mem = register(c, p).design_id
    stored_design(
        c,
        name="cites-draft",
        parts='["bigctx"]',
        served=CONFIRMED[0],
        candidate=CONFIRMED[1],
        extra=f'[gates]\nmemory = "{mem}"\n',
    )
    with pytest.raises(
        LedgerError, match=rf"memory gate {mem}: it tested parts \['draft'\] against \[\], not \+ bigctx"
    ):
        adopt(c, "bigctx", "cites-draft-1")


def test_gpu_peaks_decide_where_a_gpu_was_sampled(tmp_path: Path) -> None:
    """Per GPU, as the NVML sampler records it (stored rows of a design): the largest increase over RSS and
    every GPU decides; here GPU 1's +1620 MiB (the note's "1,620 MiB more per GPU")."""
    c = make_campaign(tmp_path / "c")
    reg = register(c, _command_memory(c.root, 10, 20, limit=8))
    peaks = {"served": (100.0, 30000.0, 30000.0), "candidate": (101.0, 30004.0, 31620.0)}
    for b in range(2):
        for pos, arm in enumerate(reg.schedule[b]):
            rss, g0, g1 = peaks[arm]
            resources = {
                "gpu": [gpu(g0, 300.0, 0)["gpu"][0], gpu(g1, 300.0, 1)["gpu"][0]],
                "rss": {"rss_mib_peak": rss},
            }
            c.store.insert_start(
                design_id=reg.design_id,
                block=b,
                position=pos,
                arm=arm,
                status="ok",
                started_at=f"2025-03-01T10:0{b}:0{pos}.000Z",
                metrics={},
                engine="command",
                resources=resources,
            )
    a = analyze(c, reg.design_id)
    assert a.word == "failed" and a.why == (
        "the largest increase of peak memory is +1620.0 MiB (GPU 1), over the 8 MiB allowed"
    )
    assert "  GPU 0: served 30000.0, candidate 30004.0, increase +4.0" in a.lines
    assert "  RSS: served 100.0, candidate 101.0, increase +1.0" in a.lines
