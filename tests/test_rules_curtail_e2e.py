"""End to end with command arms (#13 must show): a 10-block all_blocks_better design with
``stopping = "curtail"`` whose candidate wins every block runs all ten blocks and ends "confirmed".

Before the fix (5ad44c2) the curtailment bound treated the rule as a sign test: after 9 of 10
favourable blocks p was at most 11/1024 whatever came, so it stopped and judged a completion with a
tie: "not confirmed". Real
subprocesses, real store, the real runner.
"""

from __future__ import annotations

import sys
from pathlib import Path

from frankenstein.design.analysis import analyze
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design

from helpers_campaign import make_campaign

BENCH = """\
import json, sys
print(json.dumps({"verify_step_ms": float(sys.argv[1]), "tokens_per_step": 1.0}))
"""

DESIGN = """\
name = "kernel"
kind = "speed"
hypothesis = "the forked kernel's step is faster"
blocks = 10
stopping = "curtail"
primary_metric = "verify_step_ms"

[arms.served]
command = ["{py}", "{bench}", "1.5"]

[arms.candidate]
command = ["{py}", "{bench}", "1.0"]

[rule]
kind = "all_blocks_better"
alpha = 0.05
"""


def test_all_blocks_better_with_curtail_confirms_after_every_block(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    bench = c.root / "bench.py"
    bench.write_text(BENCH)
    p = c.root / "kernel.toml"
    p.write_text(DESIGN.format(py=sys.executable, bench=bench))
    reg = register(c, p)
    lines: list[str] = []
    run_design(c, reg.design_id, echo=lines.append)
    assert len(c.store.query("SELECT id FROM starts")) == 20
    assert not any("curtailed" in line for line in lines)
    assert analyze(c, reg.design_id).word == "confirmed"


def test_a_run_curtailed_for_futility_prints_not_confirmed(tmp_path: Path) -> None:
    """The candidate loses the first block of an all_blocks_better design: no completion can confirm, so the
    run stops, and the printed verdict is every completion's word, "not confirmed" (never "invalid", the
    word of the one block run alone)."""
    from frankenstein.design.analysis import format_analysis

    c = make_campaign(tmp_path / "c")
    bench = c.root / "bench.py"
    bench.write_text(BENCH)
    p = c.root / "kernel.toml"
    p.write_text(DESIGN.format(py=sys.executable, bench=bench).replace('"1.0"]', '"2.0"]'))
    reg = register(c, p)
    run_design(c, reg.design_id, echo=lambda _: None)
    assert len(c.store.query("SELECT id FROM starts")) == 2
    a = analyze(c, reg.design_id)
    assert a.word == "not confirmed"
    verdict = [line for line in format_analysis(a) if line.startswith("verdict: ")]
    assert verdict and verdict[0].startswith("verdict: not confirmed (curtailed after 1 of 10 blocks"), verdict
