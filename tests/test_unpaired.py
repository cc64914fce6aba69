"""Completely randomized designs (``layout = "unpaired"``): the exact two-sample permutation test against
brute-force enumeration and scipy, its interval by inversion, `analyze --blocks` with arm,value rows, and a
4 + 4 command-arm design through the real CLI that ends confirmed at p = 1/70."""

from __future__ import annotations

import itertools
import math
import re
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from frankenstein.design import twosample
from frankenstein.design.rules import evaluate_unpaired, parse_rule

from helpers_campaign import make_campaign
from helpers_cli import cli


def _brute(served: list[float], candidate: list[float], side: str) -> Fraction:
    """Every labelling of the pooled values with exactly len(candidate) candidates (a loop over all 2**N
    label vectors, not over combinations), the difference of means compared with the observed."""
    pooled, n_c = [*served, *candidate], len(candidate)
    obs = np.mean(candidate) - np.mean(served)
    hits = total = 0
    for labels in itertools.product((0, 1), repeat=len(pooled)):
        if sum(labels) != n_c:
            continue
        total += 1
        c = [x for x, lab in zip(pooled, labels) if lab]
        s = [x for x, lab in zip(pooled, labels) if not lab]
        d = np.mean(c) - np.mean(s)
        hits += bool(
            d >= obs - 1e-9 if side == "greater" else d <= obs + 1e-9 if side == "less" else abs(d) >= abs(obs) - 1e-9
        )
    return Fraction(hits, total)


CASES = [
    ([10.0, 11.0, 12.0, 13.0], [5.0, 6.0, 7.0, 8.0]),
    ([3.1, 2.7, 4.4, 3.9], [3.0, 2.2, 4.1, 2.5]),
    ([1.0, 5.0, 2.0], [4.0, 3.0, 6.0, 0.5]),
    ([2.0, 2.0, 3.0, 1.0, 4.0], [2.5, 1.5, 3.5]),
]


@pytest.mark.parametrize(("served", "candidate"), CASES)
@pytest.mark.parametrize("side", ["greater", "less", "two-sided"])
def test_p_is_the_brute_force_enumeration_of_every_split(
    served: list[float], candidate: list[float], side: str
) -> None:
    assert twosample.two_sample_p(served, candidate, side) == _brute(served, candidate, side)  # type: ignore[arg-type]


@pytest.mark.parametrize(("served", "candidate"), CASES)
def test_p_matches_scipy_permutation_test(served: list[float], candidate: list[float]) -> None:
    res = sps.permutation_test(
        (candidate, served),
        lambda x, y: np.mean(x) - np.mean(y),
        permutation_type="independent",
        n_resamples=np.inf,
        alternative="greater",
    )
    assert float(twosample.two_sample_p(served, candidate, "greater")) == pytest.approx(res.pvalue)


def test_four_and_four_with_every_candidate_start_better_gives_one_in_70() -> None:
    v = evaluate_unpaired(
        parse_rule("permutation"), [30.1, 29.8, 30.5, 30.0], [24.6, 24.9, 24.2, 25.0], "lower", "ratio"
    )
    assert v.word == "confirmed" and v.p == Fraction(1, 70)
    assert v.in_favour == 16 and v.against == 0 and v.layout == "unpaired"
    assert v.mean_difference == pytest.approx(-5.425)
    assert v.reason == "exact two-sample permutation test over all 70 splits of 4 + 4 starts: p = 1/70 <= alpha = 0.05"


def test_three_and_three_cannot_reach_five_percent_but_the_rule_says_so() -> None:
    v = evaluate_unpaired(parse_rule("permutation"), [3.0, 3.1, 3.2], [2.0, 2.1, 2.2], "lower", "ratio")
    assert v.p == Fraction(1, 20) and v.word == "confirmed"  # 1/20 <= 0.05: reachable, just
    v = evaluate_unpaired(parse_rule("permutation", alpha=0.04), [3.0, 3.1, 3.2], [2.0, 2.1, 2.2], "lower", "ratio")
    assert v.word == "invalid" and "smallest reachable p is 1/20" in v.reason


def test_a_rule_that_counts_blocks_is_refused() -> None:
    v = evaluate_unpaired(parse_rule("sign"), [3.0] * 4, [2.0] * 4, "lower", "ratio")
    assert v.word == "invalid" and "the sign rule counts blocks, and an unpaired design has none" in v.reason


@pytest.mark.parametrize(("served", "candidate"), CASES[:2])
def test_the_interval_is_the_inversion_of_the_test(served: list[float], candidate: list[float]) -> None:
    """Just inside each bound the one-sided test of that shift keeps it (p > tail); just outside it rejects."""
    tail = Fraction(1, 20)
    iv = twosample.shift_ci(served, candidate, tail)
    assert iv is not None and iv.coverage == 1 - Fraction(2 * math.floor(tail * 70), 70)

    def p(d: float, side: str) -> Fraction:
        return twosample.two_sample_p(served, [c - d for c in candidate], side)  # type: ignore[arg-type]

    eps = 1e-6
    assert p(iv.low + eps, "greater") > tail and p(iv.low - eps, "greater") <= tail
    assert p(iv.high - eps, "less") > tail and p(iv.high + eps, "less") <= tail


def test_unsupported_sizes_are_named() -> None:
    assert twosample.unsupported(10, 10) is None
    assert "more than the 200,000" in (twosample.unsupported(11, 11) or "")
    assert "needs starts of both arms" in (twosample.unsupported(0, 4) or "")


def test_analyze_blocks_takes_unpaired_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "draws.csv"
    rows = [("served", 61.2), ("candidate", 55.1), ("served", 60.4), ("candidate", 54.9)]
    rows += [("candidate", 55.8), ("served", 62.0), ("served", 60.9), ("candidate", 55.3)]
    p.write_text("arm,value\n" + "".join(f"{a},{v}\n" for a, v in rows))
    rc, out, err = cli(capsys, "analyze", "--blocks", str(p), "--rule", "permutation", "--direction", "lower")
    assert rc == 0, err
    assert (
        "starts: served 4, candidate 4 (unpaired, one random order); pairs of one start of each arm favouring the candidate: 16"
        in out
    )
    assert "mean difference (candidate - served): -5.85" in out
    assert "p = 1/70 = 0.01429" in out
    assert out.rstrip().endswith(
        "verdict: confirmed (exact two-sample permutation test over all 70 splits of 4 + 4 starts: p = 1/70 <= alpha = 0.05)"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("arm,value\nserved,1\nbase,2\n", "line 3, column arm: must be served or candidate, found 'base'"),
        ("arm,value\nserved,1\ncandidate,x\n", "line 3, column value: not a number: 'x'"),
        ("arm,value\n", "no starts after the header"),
        ("arm,value\nserved,1\nserved,2\n", "needs starts of both arms (served 2, candidate 0)"),
        ("arm,value\nserved,1\ncandidate,2\n", "1 + 1 starts cannot reach alpha = 0.05"),
    ],
)
def test_bad_unpaired_csv_is_one_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    p = tmp_path / "bad.csv"
    p.write_text(text)
    rc, _, err = cli(capsys, "analyze", "--blocks", str(p), "--rule", "permutation", "--direction", "lower")
    assert rc != 0 and f"{p}: " in err and message in err and "Traceback" not in err


BENCH = """\
import json, sys
print(json.dumps({"e2e_ms": float(sys.argv[1])}))
"""

DESIGN = """\
name = "regioncache"
kind = "speed"
layout = "unpaired"
blocks = 1
starts_per_arm = 4
primary_metric = "e2e_ms"

[arms.served]
command = ["{py}", "{bench}", "{served}"]

[arms.candidate]
command = ["{py}", "{bench}", "{candidate}"]

[rule]
kind = "permutation"
"""


def _design(root: Path, served: str = "61.2", candidate: str = "55.6", extra: str = "") -> Path:
    (root / "bench.py").write_text(BENCH)
    p = root / "cache.toml"
    p.write_text(DESIGN.format(py=sys.executable, bench=root / "bench.py", served=served, candidate=candidate) + extra)
    return p


def test_a_four_plus_four_command_arm_design_is_confirmed_at_one_in_70(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = make_campaign(tmp_path / "c")
    c.close()
    rc, out, err = cli(capsys, "register", str(_design(tmp_path / "c")), "-c", str(tmp_path / "c"))
    assert rc == 0, err
    design_id = re.match(r"registered (\S+) ", out).group(1)  # type: ignore[union-attr]
    rc, out, err = cli(capsys, "run", design_id, "-c", str(tmp_path / "c"))
    assert rc == 0, (out, err)
    rc, out, err = cli(capsys, "analyze", design_id, "-c", str(tmp_path / "c"))
    assert rc == 0, err
    assert "p = 1/70 = 0.01429" in out
    assert "verdict: confirmed (exact two-sample permutation test over all 70 splits of 4 + 4 starts" in out
    rc, _, err = cli(capsys, "report", "--out", str(tmp_path / "note"), "-c", str(tmp_path / "c"))
    assert rc == 0, err
    note = (tmp_path / "note" / "note.md").read_text()
    assert "16 of 16 pairs of one served and one candidate start favour the candidate, 0 the served arm" in note


@pytest.mark.parametrize(
    ("extra", "replace", "message"),
    [
        ("", ("blocks = 1", "blocks = 2"), "cache.toml: blocks: an unpaired design is one block"),
        ("", ('kind = "permutation"', 'kind = "sign"'), "cache.toml: rule.kind: the sign rule counts blocks"),
        ("", ("starts_per_arm = 4", "starts_per_arm = 2"), "cache.toml: starts_per_arm: 2 + 2 starts cannot reach"),
        ("", ('layout = "unpaired"', 'layout = "random"'), "cache.toml: layout"),
        ("", ("blocks = 1", 'blocks = 1\nstopping = "curtail"'), "cache.toml: stopping: an unpaired design runs every"),
    ],
)
def test_bad_unpaired_designs_are_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str, replace: tuple[str, str], message: str
) -> None:
    c = make_campaign(tmp_path / "c")
    c.close()
    p = _design(tmp_path / "c", extra=extra)
    p.write_text(p.read_text().replace(*replace))
    rc, _, err = cli(capsys, "register", str(p), "-c", str(tmp_path / "c"))
    assert rc != 0 and message in err and "Traceback" not in err
