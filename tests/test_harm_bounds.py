"""Harm bounds a reader can use (issue 29, defect 3 and build 2): the largest harm the data exclude at the
registered level, an optional registered non-inferiority margin the verdict states, and failed agent
starts counted as their episodes failed (unless the failure is the harness's own), said in the note.

Agent designs here use command arms (real subprocesses, real store, the real runner): a program that
prints its passes as JSON, and crashes on the calls the test names, as a part that crashes the engine."""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import pytest

from frankenstein.design import rules
from frankenstein.design.analysis import analyze, format_analysis
from frankenstein.design.kinds.agent import start_passes
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design
from frankenstein.design.table import harm_text
from frankenstein.report import write_report
from frankenstein.store import StartRow

from helpers_campaign import make_campaign
from helpers_cli import cli

SEED_PASSES = [0, -3, 1, 0, -1, 1, 0, 2, 2, -2]  # the campaign note: schedule 2 minus 1, passes of 18 per start

# passes, counter file, the calls that crash (comma-separated, may be empty)
AGENT = """\
import json, sys
from pathlib import Path
passes, counter, crash = float(sys.argv[1]), Path(sys.argv[2]), {{int(x) for x in sys.argv[3].split(",") if x}}
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
if n in crash:
    sys.exit("the engine died: call %d" % n)
print(json.dumps({{"passes": passes, "episodes": 18.0}}))
"""

DESIGN = """\
name = "schedule"
kind = "agent"
hypothesis = "schedule 2 does not lose passes"
blocks = {blocks}
primary_metric = "passes"

[arms.served]
command = ["{py}", "{agent}", "12", "{root}/served.n", ""]

[arms.candidate]
command = ["{py}", "{agent}", "12", "{root}/candidate.n", "{crash}"]

[rule]
kind = "harm"
alpha = 0.05
{margin}
"""


def _agent_design(root: Path, blocks: int = 10, crash: str = "", margin: str = "") -> Path:
    agent = root / "agent.py"
    agent.write_text(AGENT.format())
    p = root / "schedule.toml"
    p.write_text(DESIGN.format(blocks=blocks, py=sys.executable, agent=agent, root=root, crash=crash, margin=margin))
    return p


def test_a_candidate_that_crashes_cannot_hide_its_harm(tmp_path: Path) -> None:
    """Both arms pass 12 of 18 whenever they run; the candidate's engine dies in 5 of 10 blocks. Dropping
    those blocks (before) left 5 ties and "no harm shown"; counted as their episodes failed, harm is shown."""
    c = make_campaign(tmp_path / "c")
    reg = register(c, _agent_design(c.root, crash="1,3,5,7,9"))
    run_design(c, reg.design_id, echo=lambda _: None)
    a = analyze(c, reg.design_id)
    assert a.verdict is not None and a.blocks_done == 10
    assert sorted(r.difference for r in a.verdict.rows) == [-12.0] * 5 + [0.0] * 5
    assert (a.word, a.verdict.p) == ("harm shown", Fraction(1, 32))
    assert a.dropped[-1] == "failed starts: 5 counted as their episodes failed, 0 the harness's own (block dropped)"
    assert a.dropped[0].startswith("block ") and "candidate start failed (" in a.dropped[0]
    assert a.dropped[0].endswith(
        "counted: the 0 pass(es) it recorded before the failure stand, every other episode of the start counts as failed"
    )
    lines = format_analysis(a)
    assert "note: failed starts: 5 counted as their episodes failed, 0 the harness's own (block dropped)" in lines
    note = write_report(c, c.root / "reports" / "note").read_text()
    assert "Failed starts: 5 counted as their episodes failed, 0 the harness's own (block dropped)." in note
    assert "Largest harm excluded: " in note


def test_the_harness_own_failure_drops_its_block_and_is_named() -> None:
    def row(block: int, arm: str, status: str, metrics: dict, reason: str | None = None) -> StartRow:
        return StartRow(
            id=0,
            design_id="d",
            block=block,
            position=0,
            arm=arm,
            rep=0,
            status=status,
            reason=reason,
            started_at="",
            finished_at="",
            engine=None,
            engine_version=None,
            recipe=None,
            metrics=metrics,
            resources={},
            capabilities={},
        )

    rows = [
        row(0, "served", "ok", {"passes": 12.0}),
        row(0, "candidate", "failed", {"passes": 4.0, "episodes": 7.0}, "engine exited 139"),
        row(1, "served", "ok", {"passes": 12.0}),
        row(1, "candidate", "failed", {"harness_failure": 1.0}, "the harness's own failure: sandbox: no bwrap"),
    ]
    values, counted, harness = start_passes(rows)
    assert values[0] == {"served": 12.0, "candidate": 4.0}  # the 4 passes before the crash stand
    assert [r.block for r in counted] == [0] and [(f.block, f.arm) for f in harness] == [(1, "candidate")]


def test_frank_analyze_blocks_on_the_seed_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The campaign note's table: whole-number differences that sum to 0. An exact mean of 0, the registered
    test's exact p (37/64 = 0.578 over 1,024 assignments) and the largest harm excluded at one-sided 95 %."""
    p = tmp_path / "passes.csv"
    p.write_text("block,difference\n" + "".join(f"{i},{d}\n" for i, d in enumerate(SEED_PASSES, 1)))
    rc, out, err = cli(capsys, "analyze", "--blocks", str(p), "--rule", "harm", "--direction", "higher")
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    assert "mean difference (candidate - served): 0 (no difference)" in lines
    assert "p = 37/64 = 0.5781 (scipy, the same test: 0.578125)" in lines
    assert "harm bound: a loss of more than 1 is excluded at one-sided 95% (the permutation test inverted)" in lines
    assert lines[-1] == "verdict: no harm shown (p > alpha = 0.05)"


def test_the_harm_bound_is_the_inversion_of_the_registered_test() -> None:
    """A loss L is excluded exactly when the registered test of 'the loss is L' (the differences shifted
    by L, side greater) rejects at alpha: just beyond the bound it rejects, at the bound it does not."""
    for test in ("permutation", "sign"):
        rule = rules.RULE_ADAPTER.validate_python({"kind": "harm", "test": test})
        v = rules.evaluate_differences(rule, SEED_PASSES, "higher")
        assert v.harm_bound is not None
        loss = -v.harm_bound
        for shift, rejects in ((loss + 1e-6, True), (loss, False)):
            p = (
                rules.stats.sign_flip_p([d + shift for d in SEED_PASSES], "greater")
                if test == "permutation"
                else rules.stats.sign_test(sum(d + shift > 0 for d in SEED_PASSES), 10, cross_check=False).p
            )
            assert (p <= Fraction(1, 20)) == rejects, (test, shift, p)
    v = rules.evaluate_differences(rules.parse_rule("harm"), SEED_PASSES, "higher")
    assert harm_text(v, "pass/passes per start") == (
        "a loss of more than 1 pass per start is excluded at one-sided 95% (the permutation test inverted)"
    )


def test_a_registered_non_inferiority_margin_is_stated(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    reg = register(c, _agent_design(c.root, margin="margin = 2"))
    run_design(c, reg.design_id, echo=lambda _: None)
    a = analyze(c, reg.design_id)
    assert a.verdict is not None and a.verdict.non_inferior is True and a.verdict.p_non_inferior == Fraction(1, 1024)
    assert a.verdict.reason == (
        "p > alpha = 0.05; non-inferiority at margin 2: a harm of 2 or more is excluded "
        "(one-sided p = 1/1024 <= alpha = 0.05)"
    )
    assert any(
        line == "largest harm excluded: every loss is excluded at one-sided 95% (candidate - served bound 0; "
        "the permutation test inverted)"
        for line in a.lines
    ), a.lines
    v = rules.evaluate_differences(
        rules.RULE_ADAPTER.validate_python({"kind": "harm", "margin": 1}), SEED_PASSES, "higher"
    )
    assert v.non_inferior is False and v.reason.endswith(
        "a harm of 1 or more is not excluded (one-sided p = 1/16 > alpha = 0.05)"
    )


def test_frank_plan_harm_gives_the_blocks_to_exclude_a_loss(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With the seed's spread (sd 1.63 passes per start) and no true difference, excluding a loss of 1 pass
    per start at one-sided 95 % with 80 % power takes 19 blocks; at the 10-block pilot's upper bound, 39."""
    p = tmp_path / "passes.csv"
    p.write_text("block,difference\n" + "".join(f"{i},{d}\n" for i, d in enumerate(SEED_PASSES, 1)))
    rc, out, err = cli(capsys, "plan", "--harm", "1", "--pilot", str(p))
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"pilot: {p}: 10 blocks; sd of the block difference 1.633 (90% upper bound 2.4)"
    assert lines[1].startswith("harm to exclude: a loss of more than 1 per block, at one-sided 95% ")
    assert any(line.startswith("harm   0.05      19  81.8% (>= 80.3%)") for line in lines), lines
    assert lines[-1] == "recommended: 39 blocks (planned at the pilot sd's upper bound)"
    rc, _, err = cli(capsys, "plan", "--harm", "1", "--sd", "1", "--effect", "0.1")
    assert rc == 2 and "--harm plans the harm rule on per-block differences" in err


def test_the_harm_planner_counts_what_the_verdict_decides() -> None:
    """The planner's power is the share of simulated designs whose verdict shows non-inferiority at the
    margin: the same test, through evaluate_differences with a registered margin of the harm."""
    import numpy as np

    from frankenstein.design import plan

    rule = rules.RULE_ADAPTER.validate_python({"kind": "harm", "margin": 1})
    draws = np.random.default_rng(3).standard_normal((200, 12))
    pw = plan.harm_power(rule, 12, 1.6, 1.0, draws=draws)
    shown = sum(bool(rules.evaluate_differences(rule, list(1.6 * row), "higher").non_inferior) for row in draws)
    assert pw.value == shown / 200


def test_analyze_blocks_states_a_margin_given_for_the_harm_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "passes.csv"
    p.write_text("block,difference\n" + "".join(f"{i},{d}\n" for i, d in enumerate(SEED_PASSES, 1)))
    rc, out, err = cli(
        capsys, "analyze", "--blocks", str(p), "--rule", "harm", "--direction", "higher", "--margin", "2"
    )
    assert (rc, err) == (0, "")
    assert out.splitlines()[-1] == (
        "verdict: no harm shown (p > alpha = 0.05; non-inferiority at margin 2: a harm of 2 or more is excluded "
        "(one-sided p = 3/512 <= alpha = 0.05))"
    )
    rc, out, err = cli(
        capsys, "analyze", "--blocks", str(p), "--rule", "sign", "--direction", "higher", "--margin", "2"
    )
    assert (rc, out, err) == (1, "", "frank: error: --margin applies only to the harm rule, not 'sign'\n")
