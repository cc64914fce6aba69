"""Speculation metrics per arm: drafted, accepted and acceptance rate summed over the turns that drafted
(a turn without draft fields does not blank the start); a metric only one arm has is reported per arm,
never as a ratio; a draft metric as the primary metric is refused when an arm launches no speculation."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from frankenstein.design.analysis import analyze, format_analysis
from frankenstein.design.kinds import kind_of
from frankenstein.design.model import load_design
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design
from frankenstein.measure.timings import aggregate, speculation
from frankenstein.errors import DesignError
from frankenstein.report.note import write_report

from helpers_campaign import make_campaign, make_workload, write_design

# turns as replay records them: llama-server leaves out the draft fields where nothing was drafted
ROWS = [
    {"idx": 0, "warmup": 1, "error": None, "generated_tokens": 16, "drafted": 50, "accepted": 50},
    {"idx": 1, "warmup": 0, "error": None, "generated_tokens": 16, "drafted": 12, "accepted": 6},
    {"idx": 2, "warmup": 0, "error": None, "generated_tokens": 16, "drafted": None, "accepted": None},
    {"idx": 3, "warmup": 0, "error": None, "generated_tokens": 16},
    {"idx": 4, "warmup": 0, "error": None, "generated_tokens": 16, "drafted": 8, "accepted": 2},
    {"idx": 5, "warmup": 0, "error": "timeout", "drafted": 99, "accepted": 99},
]


def test_speculation_is_summed_over_the_turns_that_drafted() -> None:
    assert speculation(ROWS) == {"drafted": 20.0, "accepted": 8.0, "acceptance_rate": 0.4, "drafting_turns": 2.0}
    no_drafts = [r for r in ROWS if r["idx"] in (2, 3)]
    assert speculation(no_drafts) == {"drafted": None, "accepted": None, "acceptance_rate": None, "drafting_turns": 0.0}


def test_the_start_metric_acceptance_rate_has_one_definition() -> None:
    """aggregate (what a start stores) folds acceptance_rate over the turns that drafted, as speculation does:
    a measured turn without draft fields does not blank the start's rate."""
    measured = [r for r in ROWS if not r["warmup"] and not r["error"]]
    assert aggregate(measured)["acceptance_rate"] == speculation(ROWS)["acceptance_rate"] == 0.4


BENCH = """\
import json, sys
out = {"verify_step_ms": float(sys.argv[1])}
if len(sys.argv) > 2:
    out.update(drafted=float(sys.argv[2]), accepted=float(sys.argv[3]), acceptance_rate=float(sys.argv[3]) / float(sys.argv[2]))
print(json.dumps(out))
"""

DESIGN = """\
name = "ngram"
kind = "speed"
hypothesis = "n-gram speculation shortens the step"
blocks = 5
primary_metric = "verify_step_ms"
secondary = ["acceptance_rate"]

[arms.served]
command = ["{py}", "{bench}", "2.0"]

[arms.candidate]
command = ["{py}", "{bench}", "1.5", "40", "10"]

[rule]
kind = "sign"
alpha = 0.05
"""


def test_a_metric_only_the_candidate_has_is_reported_per_arm(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    (c.root / "bench.py").write_text(BENCH)
    (c.root / "ngram.toml").write_text(DESIGN.format(py=sys.executable, bench=c.root / "bench.py"))
    reg = register(c, c.root / "ngram.toml")
    run_design(c, reg.design_id, echo=lambda s: None)
    a = analyze(c, reg.design_id)
    assert a.word == "confirmed"
    assert a.secondary["acceptance_rate"] == {
        "blocks": 0,
        "geomean_ratio": None,
        "per_arm": {"candidate": 0.25},
        "no_ratio": "only one arm has it",
    }
    assert a.speculation["candidate"] == {"drafted": 200.0, "accepted": 50.0, "acceptance_rate": 0.25, "starts": 5.0}
    assert a.speculation["served"]["starts"] == 0 and a.speculation["served"]["acceptance_rate"] is None
    text = format_analysis(a)
    assert "  acceptance_rate: only one arm has it, reported per arm (no ratio): candidate 0.2500" in text
    assert "  candidate: drafted 200, accepted 50, acceptance rate 0.2500 (5 starts)" in text
    assert "  served: no drafts recorded (it cannot produce an acceptance rate)" in text
    note = write_report(c, tmp_path / "out").read_text()
    assert "| `acceptance_rate` | — | — | — | — | — | only candidate 0.25 |" in note
    assert "candidate: drafted 200, accepted 50, acceptance rate 0.2500 (5 starts)" in note


def test_a_draft_primary_metric_is_refused_when_an_arm_cannot_draft(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    path = write_design(c.root / "acc.toml", candidate_parts='["draft"]')
    path.write_text(path.read_text().replace('primary_metric = "verify_step_ms"', 'primary_metric = "acceptance_rate"'))
    design = load_design(path)
    served, draft = c.recipe("base", []), c.recipe("base", ["draft"])
    with pytest.raises(
        DesignError,
        match=r"acc\.toml: primary_metric: arm served \(base\) launches no speculative "
        r"decoding, so it cannot produce acceptance_rate",
    ):
        kind_of("speed").check_recipes(design, {"served": served, "candidate": draft}, path)
    kind_of("speed").check_recipes(design, {"served": draft, "candidate": draft}, path)  # both draft: accepted


def test_registration_refuses_a_draft_primary_metric_an_arm_cannot_produce(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    (c.root / "workloads").mkdir(exist_ok=True)
    make_workload(c.root / "workloads" / "w.jsonl")
    path = write_design(c.root / "acc.toml", candidate_parts='["draft"]')
    path.write_text(path.read_text().replace('primary_metric = "verify_step_ms"', 'primary_metric = "acceptance_rate"'))
    with pytest.raises(DesignError, match=r"acc\.toml: primary_metric: arm served \(served\) launches no speculative"):
        register(c, path)
    assert "launches no speculative decoding" in c.store.refusals(None)[-1].reason
