"""Candidate families: k candidates against the served arm in the same blocks, Holm over the exact
p-values; the family-wise error by enumeration of every assignment, and command-arm screens through the
real CLI (register, run, analyze, adopt, report) that confirm one candidate or end "no candidate"."""

from __future__ import annotations

import itertools
import re
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from frankenstein.design.rules import decide_family, holm, parse_rule

from helpers_campaign import make_campaign
from helpers_cli import cli


def test_holm_steps_down_and_stops_at_the_first_miss() -> None:
    ps = {"a": Fraction(1, 100), "b": Fraction(1, 40), "c": Fraction(1, 2), "d": None}
    out = holm(ps, Fraction(1, 20))
    assert out["a"] == (Fraction(1, 80), True)  # 1/100 <= 0.05/4
    assert out["b"] == (Fraction(1, 60), False)  # 1/40 > 0.05/3: Holm stops here
    assert out["c"] == (Fraction(1, 40), False) and out["d"] == (None, False)


@pytest.mark.parametrize(("k", "n", "alpha"), [(2, 4, Fraction(3, 20)), (3, 3, Fraction(1, 2))])
def test_the_family_wise_error_by_enumeration_of_every_assignment(k: int, n: int, alpha: Fraction) -> None:
    """Under the complete null every block's order of the k + 1 arms' values is equally likely. Every one of
    the ((k+1)!)**n assignments is run through decide_family: the share in which any candidate passes is the
    exact family-wise error, equal to inclusion-exclusion and at most alpha."""
    rule = parse_rule("all_blocks_better", alpha=float(alpha))
    arms = ["served", *(f"c{j}" for j in range(k))]
    per_block = list(itertools.permutations(range(k + 1)))
    hits = total = 0
    for blocks in itertools.product(per_block, repeat=n):
        values = {arm: [10.0 + ranks[i] for ranks in blocks] for i, arm in enumerate(arms)}
        served = values.pop("served")
        total += 1
        hits += decide_family(rule, served, values, "lower").word == "confirmed"
    exact = Fraction(hits, total)
    closed = sum((-1) ** (j + 1) * math_comb(k, j) * Fraction(1, j + 1) ** n for j in range(1, k + 1))
    assert exact == closed and exact <= alpha


def math_comb(n: int, r: int) -> int:
    return len(list(itertools.combinations(range(n), r)))


BENCH = """\
import json, pathlib, sys
state = pathlib.Path(sys.argv[1])
values = [float(v) for v in sys.argv[2].split(",")]
i = int(state.read_text()) if state.exists() else 0
state.write_text(str(i + 1))
print(json.dumps({"verify_step_ms": values[i]}))
"""

AUDIT = [94.0, 96.0, 93.0, 94.5, 93.8, 93.9]  # -6.0, -4.0, -7.0, -5.5, -6.2, -6.1 %


def _family(root: Path, candidates: dict[str, list[float]], blocks: int = 6, rule: str = "") -> Path:
    (root / "bench.py").write_text(BENCH)
    arms = {"served": [100.0] * blocks, **candidates}
    text = f'name = "pool"\nkind = "screen"\nblocks = {blocks}\nprimary_metric = "verify_step_ms"\n'
    for arm, values in arms.items():
        vals = ",".join(str(v) for v in values)
        text += f'\n[arms."{arm}"]\ncommand = ["{sys.executable}", "{root / "bench.py"}", "{root / arm}.n", "{vals}"]\n'
    text += rule or '\n[rule]\nkind = "all_blocks_by"\nby = 0.05\n'
    p = root / "pool.toml"
    p.write_text(text)
    return p


def _register_run_analyze(root: Path, design: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    rc, out, err = cli(capsys, "register", str(design), "-c", str(root))
    assert rc == 0, err
    design_id = re.match(r"registered (\S+) ", out).group(1)  # type: ignore[union-attr]
    rc, out, err = cli(capsys, "run", design_id, "-c", str(root))
    assert rc == 0, (out, err)
    rc, out, err = cli(capsys, "analyze", design_id, "-c", str(root))
    assert rc == 0, err
    return design_id, out


def test_a_three_candidate_screen_reproduces_the_audit_case_with_holm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "c"
    make_campaign(root).close()
    design = _family(root, {"audit": AUDIT, "six": [94.0] * 6, "slow": [101.0] * 6})
    design_id, out = _register_run_analyze(root, design, capsys)
    table = out[out.index("rank") :].splitlines()
    assert re.match(r"1\s+six\s+-6\.00%\s+6 of 6\s+1/64 = 0\.01562\s+1/60 = 0\.01667\s+confirmed\s+passes$", table[2])
    assert re.match(r"2\s+audit\s+.*\s+not confirmed\s+no$", table[3])
    assert re.match(r"3\s+slow\s+\+1\.00%\s+0 of 6\s+.*\s+not confirmed\s+no$", table[4])
    assert "audit: the threshold decided: block 2 is not better by at least 5 % (5 of 6 blocks are)" in out
    assert (
        "outcome: confirmed (3 candidates, Holm's step-down over the exact p-values (family-wise error <= "
        "alpha = 0.05): six passes)"
    ) in out
    rc, _, err = cli(capsys, "adopt", "draft", "--design", design_id, "-c", str(root))
    assert rc != 0 and f"design {design_id} screens a family of candidates (audit, six, slow)" in err
    rc, _, err = cli(capsys, "report", "--out", str(tmp_path / "note"), "-c", str(root))
    assert rc == 0, err
    note = (tmp_path / "note" / "note.md").read_text()
    assert "a family of 3 candidates (audit, six, slow)" in note and "six passes" in note


def test_the_five_audit_blocks_exactly_at_family_alpha_0_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The audit's five values themselves: with 3 candidates Holm's first level is 0.1/3 >= 1/32, so five
    blocks suffice at a family-wise alpha of 0.1 (at 0.05 registration asks for six, above)."""
    root = tmp_path / "c"
    make_campaign(root).close()
    rule = '\n[rule]\nkind = "all_blocks_by"\nby = 0.05\nalpha = 0.1\n'
    design = _family(root, {"audit": AUDIT[:5], "six": [94.0] * 5, "slow": [101.0] * 5}, blocks=5, rule=rule)
    _, out = _register_run_analyze(root, design, capsys)
    assert "audit: the threshold decided: block 2 is not better by at least 5 % (4 of 5 blocks are)" in out
    assert re.search(
        r"^1\s+six\s+-6\.00%\s+5 of 5\s+1/32 = 0\.03125\s+1/30 = 0\.03333\s+confirmed\s+passes$", out, re.M
    )
    assert "(family-wise error <= alpha = 0.1): six passes)" in out


def test_a_screen_where_none_passes_ends_no_candidate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "c"
    make_campaign(root).close()
    design = _family(root, {"t4": [96.0] * 6, "t8": AUDIT, "t16": [99.0] * 6})
    design_id, out = _register_run_analyze(root, design, capsys)
    assert (
        "outcome: no candidate (3 candidates, Holm's step-down over the exact p-values (family-wise error <= "
        "alpha = 0.05): no candidate passes)"
    ) in out
    rc, _, err = cli(capsys, "report", "--out", str(tmp_path / "note"), "-c", str(root))
    assert rc == 0, err
    note = (tmp_path / "note" / "note.md").read_text()
    didnt = note[note.index("## What didn't work") :]
    assert design_id in didnt and "no candidate" in didnt


@pytest.mark.parametrize(
    ("blocks", "rule", "arms", "message"),
    [
        (5, "", None, "pool.toml: blocks: with 3 candidates Holm tests the smallest p at alpha/3 = 0.01667: 5 blocks "
         "reach at best 1/32 = 0.03125 (it needs at least 6 blocks)"),
        (6, '\n[rule]\nkind = "harm"\n', None, "pool.toml: rule.kind: a family screens for candidates better"),
        (6, '\n[rule]\nkind = "permutation"\nside = "two-sided"\n', None, "pool.toml: rule.kind: a family screens"),
        (6, "", {"bad name": [94.0] * 6, "b": [94.0] * 6}, "pool.toml: arms.bad name: 'bad name' is not a name"),
        (6, "", {"a": [100.0] * 6, "b": [94.0] * 6}, "pool.toml: arms.a: candidate a is identical to the served arm"),
    ],
)  # fmt: skip
def test_bad_families_are_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], blocks: int, rule: str, arms: dict | None, message: str
) -> None:
    root = tmp_path / "c"
    make_campaign(root).close()
    candidates = arms or {"a": [94.0] * blocks, "b": [95.0] * blocks, "c": [96.0] * blocks}
    design = _family(root, candidates, blocks, rule)
    if arms and "a" in arms:  # the same command as served: same values and the same state file name
        design.write_text(design.read_text().replace(f"{root / 'a'}.n", f"{root / 'served'}.n"))
    rc, _, err = cli(capsys, "register", str(design), "-c", str(root))
    assert rc != 0 and message in err and "Traceback" not in err


def test_a_family_is_never_unpaired_or_curtailed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "c"
    make_campaign(root).close()
    design = _family(root, {"a": [94.0] * 6, "b": [95.0] * 6})
    text = design.read_text()
    design.write_text(text.replace("blocks = 6", 'blocks = 6\nstopping = "curtail"'))
    rc, _, err = cli(capsys, "register", str(design), "-c", str(root))
    assert rc != 0 and "pool.toml: stopping: a family of candidates runs every block" in err
    design.write_text(text.replace("blocks = 6", 'blocks = 1\nlayout = "unpaired"\nstarts_per_arm = 4'))
    rc, _, err = cli(capsys, "register", str(design), "-c", str(root))
    assert rc != 0 and "pool.toml: layout: a family of candidates runs in paired blocks" in err


FAMILY_OF_RECIPES = """\
name = "parts"
kind = "speed"
blocks = 5
workload = "workloads/w.jsonl"
primary_metric = "decode_ms_per_token"

[arms.served]
recipe = "served"

[arms.draft]
recipe = "served"
parts = ["draft"]

[arms.batch]
recipe = "served"
parts = ["threads1"]

[rule]
kind = "all_blocks_better"
alpha = 0.1

[replay]
warmup_turns = 1
"""


@pytest.mark.engine
def test_a_family_of_engine_arms_runs_every_arm_in_every_block(
    llama_server_bin: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two parts screened against the served recipe on real llama-server starts (tiny models)."""
    from helpers_campaign import make_workload

    root = tmp_path / "c"
    make_campaign(root).close()
    make_workload(root / "workloads" / "w.jsonl", turns=3, tokens=8)
    design = root / "parts.toml"
    design.write_text(FAMILY_OF_RECIPES)
    design_id, out = _register_run_analyze(root, design, capsys)
    from frankenstein.campaign import open_campaign

    with open_campaign(root) as c:
        starts = c.store.starts_of(design_id)
        orders = [[s.arm for s in starts if s.block == b] for b in range(5)]
    assert len(starts) == 15 and all(s.ok and s.engine == "llama-server" for s in starts)
    assert all(sorted(o) == ["batch", "draft", "served"] for o in orders)
    assert re.search(r"^1\s+(draft|batch)\s", out, re.M) and re.search(r"^2\s+(draft|batch)\s", out, re.M)
    assert re.search(r"outcome: (confirmed|no candidate) \(2 candidates, Holm's step-down", out)
