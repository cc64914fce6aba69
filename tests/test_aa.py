"""A/A on the real llama-server: the same recipe in both arms; the rule must not fire."""

from __future__ import annotations

from pathlib import Path

import pytest

from frankenstein.design.analysis import analyze
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design

from helpers_campaign import make_campaign, make_workload, write_design

pytestmark = pytest.mark.engine


def test_aa_design_does_not_fire(tmp_path: Path) -> None:
    """tokens_per_step is deterministic on this engine (greedy, same draft): every A/A block is an exact
    tie, so no exact rule can fire. (Timing metrics are noisy; their A/A false-positive rate is measured
    over many designs in benchmarks/aa_llamacpp.py, not asserted in a test.)"""
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl", turns=3, tokens=16)
    path = write_design(c.root / "aa.toml", name="aa", kind="aa", candidate_parts='["draft"]', rule="sign")
    path.write_text(
        path.read_text()
        .replace('primary_metric = "verify_step_ms"', 'primary_metric = "tokens_per_step"')
        .replace('secondary = ["tokens_per_step"]', 'secondary = ["verify_step_ms"]')
        .replace('[arms.served]\nrecipe = "served"', '[arms.served]\nrecipe = "served"\nparts = ["draft"]')
    )
    reg = register(c, path)
    run_design(c, reg.design_id, echo=lambda s: None)
    a = analyze(c, reg.design_id)
    assert a.verdict is not None
    assert [r.ratio_minus_one for r in a.verdict.rows] == [0.0] * 5
    assert a.verdict.ties == 5 and a.verdict.in_favour == 0
    assert a.word == "not confirmed"
    assert a.verdict.p == 1
