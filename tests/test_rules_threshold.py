"""Threshold rules: "better by at least X in every block" and "mean better by at least X", relative or in
the metric's unit; exact against brute-force enumeration, through `analyze --blocks` and a registered
command-arm design (real subprocesses, real store)."""

from __future__ import annotations

import itertools
import math
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from frankenstein.design.analysis import analyze
from frankenstein.design.registry import register
from frankenstein.design.rules import RULE_ADAPTER, decide, evaluate, evaluate_differences, parse_rule
from frankenstein.design.runner import run_design
from frankenstein.errors import AnalysisError, DesignError

from helpers_campaign import make_campaign
from helpers_cli import cli

AUDIT = [94.0, 96.0, 93.0, 94.5, 93.8]  # -6.0, -4.0, -7.0, -5.5, -6.2 % against a served 100


def test_the_audit_case_is_rejected_by_five_percent_in_every_block() -> None:
    rule = parse_rule("all_blocks_by", by=0.05)
    v = evaluate(rule, [100.0] * 5, AUDIT, "lower")
    assert v.word == "not confirmed"
    assert v.reason == "the threshold decided: block 2 is not better by at least 5 % (4 of 5 blocks are)"
    # the geometric-mean threshold confirms the same blocks: the rule the audit said frank lacked
    gm = evaluate(parse_rule("all_blocks_better", min_effect=0.05), [100.0] * 5, AUDIT, "lower")
    assert gm.word == "confirmed"


def test_six_percent_in_every_block_is_confirmed_at_one_in_32() -> None:
    v = evaluate(parse_rule("all_blocks_by", by=0.05), [100.0] * 5, [94.0] * 5, "lower")
    assert v.word == "confirmed" and v.p == Fraction(1, 32)
    assert "all 5 blocks better by at least 5 %" in v.reason


def test_higher_is_better_reads_the_threshold_upward() -> None:
    rule = parse_rule("all_blocks_by", by=0.05)
    assert evaluate(rule, [100.0] * 5, [105.5] * 5, "higher").word == "confirmed"
    assert evaluate(rule, [100.0] * 5, [104.5] * 5, "higher").word == "not confirmed"


def test_a_threshold_in_the_metrics_unit_reads_differences() -> None:
    """'A 0.079 ms per step saving required': 0.0625 ms saved in every block is not enough, 0.125 ms is."""
    rule = parse_rule("all_blocks_by", by=0.079, unit="metric")
    served = [15.5, 15.25, 15.75, 15.5, 15.5]
    short = evaluate(rule, served, [s - 0.0625 for s in served], "lower")
    assert short.word == "not confirmed" and short.data == "difference"
    assert "blocks 1, 2, 3, 4, 5 are not better by at least 0.079 in the metric's unit" in short.reason
    assert [r.served for r in short.rows] == served  # the arms' values stay in the table
    ok = evaluate(rule, served, [s - 0.125 for s in served], "lower")
    assert ok.word == "confirmed" and ok.p == Fraction(1, 32)


def test_mean_by_says_which_part_decided() -> None:
    rule = parse_rule("mean_by", by=0.05)
    short = evaluate(rule, [100.0] * 6, [97.0] * 6, "lower")
    assert short.word == "not confirmed" and short.reason.startswith("the threshold decided: the mean is not")
    noisy = evaluate(rule, [100.0] * 6, [80.0, 98.0, 99.0, 80.0, 98.0, 99.0], "lower")
    assert noisy.word == "not confirmed" and noisy.reason.startswith("the test decided")
    ok = evaluate(rule, [100.0] * 6, [90.0, 91.0, 89.0, 90.0, 92.0, 90.0], "lower")
    assert ok.word == "confirmed" and ok.p == Fraction(1, 64)


def _brute_sign_flip(d: list[float]) -> Fraction:
    """p over every assignment of signs to |d|: the share whose sum is at least the observed one."""
    observed = sum(d)
    hits = sum(
        1
        for signs in itertools.product((1, -1), repeat=len(d))
        if sum(s * abs(x) for s, x in zip(signs, d)) >= observed - 1e-9
    )
    return Fraction(hits, 2 ** len(d))


@pytest.mark.parametrize(
    "diffs",
    [[3.0, -1.0, 2.0, 5.0, 4.0, 1.0], [1.0, 1.0, 1.0, -1.0, 2.0, 3.0, 0.5], [0.5, 2.0, 1.5, 4.0, 3.0, -2.5]],
)
def test_mean_by_p_is_the_brute_force_enumeration_of_every_assignment(diffs: list[float]) -> None:
    """The gains beyond the threshold (here 0.5 in the metric's unit) are tested over all 2**n sign flips."""
    rule = parse_rule("mean_by", by=0.5, unit="metric", alpha=0.2)
    d = decide(rule, [-x for x in diffs], "lower", "difference")  # lower is better: the gain is -difference
    assert d.p == _brute_sign_flip([-x - 0.5 for x in diffs])


@pytest.mark.parametrize("n", [4, 5, 6])
def test_all_blocks_by_fires_on_exactly_one_assignment_in_2_to_the_n(n: int) -> None:
    """Under the registered null (each block's gain symmetric about the threshold), the rule fires on one
    sign assignment of 2**n: exactly its p, 1/2**n."""
    rule = parse_rule("all_blocks_by", by=1.0, unit="metric", alpha=0.1)
    t = 1.0
    sizes = [0.25 * (i + 1) for i in range(n)]
    fired = 0
    for signs in itertools.product((1, -1), repeat=n):
        g = [t + s * a for s, a in zip(signs, sizes)]
        fired += decide(rule, g, "higher", "difference").word == "confirmed"
    assert Fraction(fired, 2**n) == Fraction(1, 2**n) == rule.smallest_p(n)


def test_a_relative_threshold_refuses_differences() -> None:
    v = evaluate_differences(parse_rule("all_blocks_by", by=0.05), [1.0] * 5, "higher")
    assert v.word == "invalid" and 'give `by` in the metric\'s unit (unit = "metric")' in v.reason


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "all_blocks_by"}, "by"),
        ({"kind": "all_blocks_by", "by": 0.05, "min_effect": 0.05}, "takes no min_effect"),
        ({"kind": "mean_by", "by": 1.5}, "must be below 1"),
        ({"kind": "mean_by", "by": -1, "unit": "metric"}, "greater than 0"),
        ({"kind": "mean_by", "by": 0.1, "unit": "ms"}, "unit"),
    ],
)
def test_bad_threshold_rules_are_refused(data: dict[str, object], message: str) -> None:
    with pytest.raises(Exception, match=message):
        RULE_ADAPTER.validate_python(data)


def test_analyze_blocks_with_a_threshold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "audit.csv"
    p.write_text("block,served,candidate\n" + "".join(f"{i},100,{c}\n" for i, c in enumerate(AUDIT, 1)))
    rc, out, _ = cli(
        capsys, "analyze", "--blocks", str(p), "--rule", "all_blocks_by", "--by", "0.05", "--direction", "lower"
    )
    assert rc == 0
    assert (
        "rule: all_blocks_by (every block better by at least 5 % (exact: p = 1/2^n under that null); alpha = 0.05)"
        in out
    )
    assert out.rstrip().endswith(
        "verdict: not confirmed (the threshold decided: block 2 is not better by at least 5 % (4 of 5 blocks are))"
    )
    rc, _, err = cli(capsys, "analyze", "--blocks", str(p), "--rule", "sign", "--by", "0.05", "--direction", "lower")
    assert rc != 0 and "--by applies only to the all_blocks_by and mean_by rule, not 'sign'" in err
    rc, _, err = cli(capsys, "analyze", "--blocks", str(p), "--rule", "mean_by", "--direction", "lower")
    assert rc != 0 and "rule by: Field required" in err and "Traceback" not in err


BENCH = """\
import json, pathlib, sys
state = pathlib.Path(sys.argv[1])
values = [float(v) for v in sys.argv[2].split(",")]
i = int(state.read_text()) if state.exists() else 0
state.write_text(str(i + 1))
print(json.dumps({"verify_step_ms": values[i]}))
"""

DESIGN = """\
name = "pool"
kind = "screen"
blocks = 5
primary_metric = "verify_step_ms"

[arms.served]
command = ["{py}", "{bench}", "{root}/served.n", "{served}"]

[arms.candidate]
command = ["{py}", "{bench}", "{root}/candidate.n", "{candidate}"]

[rule]
kind = "all_blocks_by"
by = 0.05
"""


def _design(root: Path, candidate: list[float]) -> Path:
    (root / "bench.py").write_text(BENCH)
    p = root / "pool.toml"
    values = ",".join(str(v) for v in candidate)
    p.write_text(
        DESIGN.format(
            py=sys.executable, bench=root / "bench.py", root=root, served="100,100,100,100,100", candidate=values
        )
    )
    return p


@pytest.mark.parametrize(("candidate", "word"), [(AUDIT, "not confirmed"), ([94.0] * 5, "confirmed")])
def test_a_registered_command_arm_screen_at_five_percent_in_every_block(
    tmp_path: Path, candidate: list[float], word: str
) -> None:
    c = make_campaign(tmp_path / "c")
    reg = register(c, _design(c.root, candidate))
    run_design(c, reg.design_id, echo=lambda s: None)
    a = analyze(c, reg.design_id)
    assert a.word == word and a.verdict is not None
    assert [round(r.ratio_minus_one or math.nan, 4) for r in a.verdict.rows] == [
        round(x / 100 - 1, 4) for x in candidate
    ]


def test_registration_refuses_min_effect_on_a_threshold_rule(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    p = _design(c.root, [94.0] * 5)
    p.write_text(p.read_text() + "min_effect = 0.05\n")
    with pytest.raises(DesignError, match=r"pool.toml: rule.*takes no min_effect"):
        register(c, p)


def test_too_few_blocks_for_the_threshold_rule_are_refused(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    p = _design(c.root, [94.0] * 5)
    p.write_text(p.read_text().replace("blocks = 5", "blocks = 4"))
    with pytest.raises(DesignError, match=r"pool.toml: blocks: 4 blocks cannot reach alpha = 0.05"):
        register(c, p)


def test_parse_rule_names_the_flag() -> None:
    with pytest.raises(AnalysisError, match="--unit applies only to the all_blocks_by and mean_by rule"):
        parse_rule("permutation", unit="metric")
