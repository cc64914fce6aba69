"""Evidence read once: analysing a design reads its starts from the store once, however many secondary metrics
it reports (before: 6 + S reads), and the kinds' values come from that one read."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from frankenstein.campaign import Campaign, open_campaign
from frankenstein.design.analysis import analyze
from frankenstein.design.kinds.base import Evidence, StartRow, block_values
from frankenstein.design.registry import get, register
from frankenstein.design.runner import run_design
from frankenstein.report.collect import design_report
from frankenstein.store import Store

from frankenstein.ledger import adopt

from helpers_campaign import make_campaign, make_workload
from helpers_ledger import CONFIRMED, stored_design
from test_memory_design import MEMORY

BENCH = """\
import json, sys
v = float(sys.argv[1])
print(json.dumps({"verify_step_ms": v, "tokens_per_step": 1.0, "e2e_ms": 10 * v, "drafted": 8.0, "accepted": 4.0}))
"""

DESIGN = """\
name = "ten"
kind = "speed"
hypothesis = "the candidate's step is shorter"
blocks = 10
primary_metric = "verify_step_ms"
secondary = ["tokens_per_step", "e2e_ms"]

[arms.served]
command = ["{py}", "{bench}", "2.0"]

[arms.candidate]
command = ["{py}", "{bench}", "1.5"]

[rule]
kind = "sign"
alpha = 0.05
"""


class CountingStore(Store):
    """The campaign's real store, counting how often a design's starts are read (a test instrument: every
    call goes through to the real read)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.starts_reads = 0

    def starts_of(self, design_id: str) -> list[StartRow]:
        self.starts_reads += 1
        return super().starts_of(design_id)


@pytest.fixture(scope="module")
def ten_blocks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    c = make_campaign(tmp_path_factory.mktemp("ev") / "c")
    (c.root / "bench.py").write_text(BENCH)
    (c.root / "ten.toml").write_text(DESIGN.format(py=sys.executable, bench=c.root / "bench.py"))
    reg = register(c, c.root / "ten.toml")
    run_design(c, reg.design_id, echo=lambda s: None)
    c.store.close()
    return c.root, reg.design_id


def _counting(root: Path, campaign: Campaign) -> Campaign:
    return Campaign(root=root, config=campaign.config, store=CountingStore(campaign.store.path))


def test_analysis_of_a_ten_block_design_reads_its_starts_once(ten_blocks: tuple[Path, str]) -> None:
    root, design_id = ten_blocks
    c = _counting(root, make_campaign_view(root))
    a = analyze(c, design_id)
    assert a.word == "confirmed" and a.blocks_done == 10
    assert set(a.per_block) == {"verify_step_ms", "tokens_per_step", "e2e_ms"}
    assert a.speculation["served"]["starts"] == 10.0 and a.time_spent is not None
    assert c.store.starts_reads == 1  # type: ignore[attr-defined]


def test_each_metric_is_computed_once_from_the_one_read(ten_blocks: tuple[Path, str]) -> None:
    root, design_id = ten_blocks
    c = _counting(root, make_campaign_view(root))
    ev = Evidence.read(c, get(c, design_id))
    first = ev.values("e2e_ms")
    assert ev.values("e2e_ms") is first  # computed once, then kept
    assert first[0][0] == {"served": 20.0, "candidate": 15.0} and first[1] == []
    assert ev.blocks() == block_values(c, ev.reg)  # the helper for one read gives the same values
    assert c.store.starts_reads == 2  # the evidence's one read and the helper's own


def make_campaign_view(root: Path) -> Campaign:
    """The campaign at ``root`` as ``frank`` opens it."""
    c = open_campaign(root)
    c.store.close()
    return c


def test_what_the_note_says_of_a_design_reads_its_starts_once(ten_blocks: tuple[Path, str]) -> None:
    """The note's design section (facts, block status, percentiles, analysis) from one read of the starts."""
    root, design_id = ten_blocks
    c = _counting(root, make_campaign_view(root))
    rep = design_report(c, get(c, design_id))
    assert rep.analysis is not None and rep.analysis.word == "confirmed"
    assert rep.facts.blocks_run == 10 and rep.facts.starts_ok == 20 and rep.facts.stopped is None
    assert set(rep.block_status.values()) == {"complete"}
    assert c.store.starts_reads == 1  # type: ignore[attr-defined]


class PerDesignCountingStore(Store):
    """The campaign's real store, counting reads of each design's starts (a test instrument)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.reads: dict[str, int] = {}

    def starts_of(self, design_id: str) -> list[StartRow]:
        self.reads[design_id] = self.reads.get(design_id, 0) + 1
        return super().starts_of(design_id)


def test_adopt_with_a_gate_reads_each_designs_starts_once(tmp_path: Path) -> None:
    """``adopt`` of a speed design that cites a memory design as its gate: the adopted design's starts are read
    once (for its facts and its analysis), the gate's once."""
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    (c.root / "mem.toml").write_text(
        MEMORY.format(
            name="mem",
            blocks=2,
            workload='workload = "workloads/w.jsonl"',
            served='recipe = "served"',
            candidate='recipe = "served"\nparts = ["draft"]',
            limit=4096,
        )
    )
    mem = register(c, c.root / "mem.toml")
    for b in range(2):
        for pos, arm in enumerate(mem.schedule[b]):
            c.store.insert_start(
                design_id=mem.design_id,
                block=b,
                position=pos,
                arm=arm,
                status="ok",
                started_at=f"2025-03-01T10:0{b}:0{pos}.000Z",
                metrics={},
                engine="llama-server",
                resources={"rss": {"rss_mib_peak": 100.0 if arm == "served" else 110.0}},
            )
    sp = stored_design(
        c, name="sp", served=CONFIRMED[0], candidate=CONFIRMED[1], extra=f'[gates]\nmemory = "{mem.design_id}"\n'
    )
    root, config = c.root, c.config
    c.store.close()
    counted = Campaign(root=root, config=config, store=PerDesignCountingStore(root / "frank.db"))
    try:
        step = adopt(counted, "draft", sp.design_id)
        assert step.part == "draft"
        assert counted.store.reads == {sp.design_id: 1, mem.design_id: 1}  # type: ignore[attr-defined]
    finally:
        counted.store.close()
