"""Command arms: a program that prints its metrics as JSON runs under the same blocks, randomization,
registration and rules as an engine arm (real subprocesses, real store)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from frankenstein.design.analysis import analyze
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design
from frankenstein.report import write_report

from helpers_campaign import make_campaign

BENCH = """\
import json, sys
value = float(sys.argv[1])
print("warming up")
print(json.dumps({"verify_step_ms": value, "tokens_per_step": 1.0}))
"""

DESIGN = """\
name = "kernel"
kind = "speed"
hypothesis = "the forked kernel's step is faster"
blocks = 5
primary_metric = "verify_step_ms"

[arms.served]
command = ["{py}", "{bench}", "{served}"]

[arms.candidate]
command = ["{py}", "{bench}", "{candidate}"]

[rule]
kind = "all_blocks_better"
alpha = 0.05
"""


def _design(root: Path, served: str, candidate: str) -> Path:
    bench = root / "bench.py"
    bench.write_text(BENCH)
    p = root / "kernel.toml"
    p.write_text(DESIGN.format(py=sys.executable, bench=bench, served=served, candidate=candidate))
    return p


def test_command_arms_run_under_the_registered_rule(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    reg = register(c, _design(c.root, "2.0", "1.5"))
    lines: list[str] = []
    run_design(c, reg.design_id, echo=lines.append)
    starts = c.store.query("SELECT arm, status, engine FROM starts ORDER BY block, position")
    assert len(starts) == 10 and all(s["status"] == "ok" and s["engine"] == "command" for s in starts)
    a = analyze(c, reg.design_id)
    assert a.verdict is not None and [r.ratio_minus_one for r in a.verdict.rows] == [pytest.approx(-0.25)] * 5
    assert a.word == "confirmed" and a.verdict.p == pytest.approx(1 / 32)
    text = write_report(c, tmp_path / "note").read_text()
    assert "- Tests: command arms.\n" in text and "command arms; command arms" not in text


def test_a_command_arm_that_prints_no_json_is_a_failed_start(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    reg = register(c, _design(c.root, "2.0", "oops"))
    run_design(c, reg.design_id, echo=lambda s: None)
    failed = c.store.query("SELECT reason FROM starts WHERE status = 'failed'")
    assert len(failed) == 5
    assert failed[0]["reason"].startswith("command exited 1: ")
    assert "ValueError" in failed[0]["reason"]
    assert analyze(c, reg.design_id).word == "invalid"  # every block dropped: no blocks left to test


def test_identical_command_arms_are_refused(tmp_path: Path) -> None:
    from frankenstein.errors import DesignError

    c = make_campaign(tmp_path / "c")
    with pytest.raises(DesignError, match=r"kernel.toml: arms: the two arms are identical"):
        register(c, _design(c.root, "2.0", "2.0"))


def test_curtail_stops_once_the_verdict_cannot_change(tmp_path: Path) -> None:
    """all_blocks_better can no longer confirm after one block favours the served arm: stop there."""
    c = make_campaign(tmp_path / "c")
    p = _design(c.root, "1.0", "1.5")
    p.write_text(p.read_text().replace("blocks = 5", 'blocks = 6\nstopping = "curtail"'))
    reg = register(c, p)
    lines: list[str] = []
    run_design(c, reg.design_id, echo=lines.append)
    assert len(c.store.query("SELECT id FROM starts")) == 2
    assert "curtailed before block 2: the registered verdict can no longer change" in lines
    assert analyze(c, reg.design_id).word == "not confirmed"


@pytest.mark.parametrize(
    ("printed", "why"),
    [
        ('{"verify_step_ms": true}', "verify_step_ms is true, not a number"),
        ('{"verify_step_ms": Infinity}', "verify_step_ms is inf, not a finite number"),
        ('{"verify_step_ms": NaN}', "verify_step_ms is nan, not a finite number"),
        ('{"verify_step_ms": 1e999}', "verify_step_ms is inf, not a finite number"),
        ('{"verify_step_ms": "2.0"}', 'verify_step_ms is "2.0", not a number'),
        ("{}", "not a JSON object with at least one metric"),
    ],
)
def test_a_command_arm_printing_no_finite_number_is_a_failed_start(tmp_path: Path, printed: str, why: str) -> None:
    """Booleans are not numbers (``true`` was read as 1.0 and confirmed), and ``Infinity``/``NaN``, which Python's
    JSON reader accepts, are refused where they are read: each start fails naming the metric."""
    c = make_campaign(tmp_path / "c")
    verbatim = c.root / "verbatim.py"
    verbatim.write_text("import sys\nprint(sys.argv[1])\n")
    p = c.root / "k.toml"
    text = DESIGN.format(py=sys.executable, bench=verbatim, served="SERVED", candidate="CANDIDATE")
    p.write_text(
        text.replace('"SERVED"', json.dumps('{"verify_step_ms": 2.0}')).replace('"CANDIDATE"', json.dumps(printed))
    )
    reg = register(c, p)
    run_design(c, reg.design_id, echo=lambda s: None)
    rows = c.store.query("SELECT arm, status, reason FROM starts")
    assert {r["arm"]: r["status"] for r in rows} == {"served": "ok", "candidate": "failed"}
    reasons = {r["reason"] for r in rows if r["status"] == "failed"}
    assert len(reasons) == 1 and why in reasons.pop()
    assert analyze(c, reg.design_id).word == "invalid"
