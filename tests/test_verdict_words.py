"""Words that say what happened (#32 item 2): a run short of its blocks is 'incomplete (k of n blocks)',
not 'invalid'; a clear loss is said beside 'not confirmed'; the rule's requirement at the registered
blocks is said when a design is registered and by ``frank run --dry-run``. Real store rows, real CLI."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from frankenstein.design.analysis import analyze_registered
from frankenstein.design.registry import register
from frankenstein.design.rules import RULE_ADAPTER
from frankenstein.report.note import write_report

from helpers_campaign import make_campaign, make_workload, write_design
from helpers_cli import cli
from helpers_ledger import CONFIRMED, MIXED, stored_design


@pytest.fixture
def camp(tmp_path: Path):
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    yield c
    c.close()


def verdict_lines(lines: list[str]) -> list[str]:
    i = next(i for i, line in enumerate(lines) if line.startswith("verdict:"))
    return lines[i : i + 2]


def test_mid_run_is_incomplete_not_invalid(camp) -> None:
    reg = stored_design(camp, name="mid", served=CONFIRMED[0][:2], candidate=CONFIRMED[1][:2], blocks=5)
    lines = analyze_registered(camp.root, reg.design_id)
    assert verdict_lines(lines)[0] == (
        "verdict: incomplete (2 of 5 blocks); the registered rule decides when every block is run"
    )
    assert not any("invalid" in line for line in lines)


def test_mid_run_says_what_the_rule_reads_so_far_once_it_reads_anything(camp) -> None:
    reg = stored_design(
        camp, name="mid", served=CONFIRMED[0][:5], candidate=CONFIRMED[1][:5], blocks=6, rule="permutation"
    )
    head, so_far = verdict_lines(analyze_registered(camp.root, reg.design_id))
    assert head.startswith("verdict: incomplete (5 of 6 blocks)")
    assert so_far.startswith("  over the blocks run so far it reads: confirmed (")


def test_a_finished_run_has_its_verdict(camp) -> None:
    reg = stored_design(camp, name="done", served=CONFIRMED[0], candidate=CONFIRMED[1])
    assert verdict_lines(analyze_registered(camp.root, reg.design_id))[0].startswith("verdict: confirmed (")


def test_a_clear_loss_is_said_beside_not_confirmed(camp) -> None:
    reg = stored_design(camp, name="loss", served=CONFIRMED[1], candidate=CONFIRMED[0])
    head, loss = verdict_lines(analyze_registered(camp.root, reg.design_id))
    assert head.startswith("verdict: not confirmed (")
    assert loss == (
        "  a clear loss: the candidate was worse in 6 of 6 blocks (a sign test for worse would give "
        "p = 1/64 = 0.01562); the rule tests only for better"
    )


def test_no_difference_is_not_called_a_loss(camp) -> None:
    reg = stored_design(camp, name="mixed", served=MIXED[0], candidate=MIXED[1])
    lines = analyze_registered(camp.root, reg.design_id)
    assert verdict_lines(lines)[0].startswith("verdict: not confirmed (")
    assert not any("clear loss" in line for line in lines)


def test_a_harm_rule_is_not_told_it_tests_only_for_better(camp) -> None:
    reg = stored_design(camp, name="harm", served=CONFIRMED[1], candidate=CONFIRMED[0], rule="harm")
    lines = analyze_registered(camp.root, reg.design_id)
    assert verdict_lines(lines)[0].startswith("verdict: harm shown (")
    assert not any("clear loss" in line for line in lines)


@pytest.mark.parametrize(
    ("rule", "n", "words"),
    [
        ({"kind": "sign"}, 5, "at 5 blocks this rule confirms only if all 5 favour the candidate"),
        ({"kind": "sign"}, 10, "at 10 blocks this rule confirms only if at least 9 of 10 favour the candidate"),
        ({"kind": "permutation"}, 6, "at 6 blocks this rule confirms only if at least 5 of 6 favour the candidate"),
        ({"kind": "all_blocks_better"}, 8, "at 8 blocks this rule confirms only if all 8 favour the candidate"),
        (
            {"kind": "harm", "test": "sign"},
            8,
            "at 8 blocks this rule shows harm only if at least 7 of 8 favour the served arm",
        ),
        ({"kind": "permutation", "side": "two-sided"}, 6, "at 6 blocks this rule fires only if all 6 favour one arm"),
        (
            {"kind": "all_blocks_by", "by": 0.05},
            6,
            "at 6 blocks this rule confirms only if all 6 favour the candidate by at least 5 %",
        ),
        ({"kind": "sign"}, 4, "at 4 blocks this rule can never confirm: its smallest p, 0.0625, is above alpha = 0.05"),
    ],
)
def test_requirement_in_words(rule: dict[str, object], n: int, words: str) -> None:
    assert RULE_ADAPTER.validate_python(rule).requirement(n) == words


@pytest.mark.parametrize("kind", ["sign", "permutation", "all_blocks_better", "mean_by", "all_blocks_by"])
@pytest.mark.parametrize("n", [5, 6, 8, 11])
def test_the_requirement_is_what_the_rule_decides(kind: str, n: int) -> None:
    """The fewest favourable blocks said in words is what the rule needs: with one block fewer (the rest
    against, the favourable ones as large as can be) it does not fire; with that many it can."""
    extra = {"by": 0.01} if kind.endswith("_by") else {}
    rule = RULE_ADAPTER.validate_python({"kind": kind, **extra})
    k = rule.fewest_favouring(n)
    assert k is not None

    def fires(j: int) -> bool:
        g = [10.0 * 2**i for i in range(j)] + [-0.001] * (n - j)
        return rule.run_test(rule.tested(g, "lower", "ratio"), False).fired == "better"

    assert fires(k) and (k == 0 or not fires(k - 1))


def test_register_and_dry_run_say_the_requirement(camp, capsys) -> None:
    design = write_design(camp.root / "d.toml", blocks=5)
    rc, out, _ = cli(capsys, "run", "--dry-run", str(design), "-c", str(camp.root))
    assert rc == 0 and "rule sign: at 5 blocks this rule confirms only if all 5 favour the candidate" in out
    rc, out, _ = cli(capsys, "register", str(design), "-c", str(camp.root))
    assert rc == 0 and out.splitlines()[-1] == (
        "rule sign: at 5 blocks this rule confirms only if all 5 favour the candidate"
    )


def test_the_note_says_a_clear_loss_beside_not_confirmed(camp, tmp_path: Path) -> None:
    stored_design(camp, name="loss", served=CONFIRMED[1], candidate=CONFIRMED[0])
    note = write_report(camp, tmp_path / "out").read_text()
    assert (
        "A clear loss: the candidate was worse in 6 of 6 blocks (a sign test for worse would give p = 1/64 = "
        "0.01562); the rule tests only for better." in note
    )


def test_an_agent_design_mid_run_is_incomplete(camp) -> None:
    design = camp.root / "ag.toml"
    design.write_text(
        'name = "ag"\nkind = "agent"\nblocks = 10\nprimary_metric = "passes"\n'
        f'[arms.served]\ncommand = ["{sys.executable}", "-c", "print(1)"]\n'
        f'[arms.candidate]\ncommand = ["{sys.executable}", "-c", "print(2)"]\n'
        '[rule]\nkind = "harm"\nalpha = 0.05\n'
    )
    reg = register(camp, design)
    for b in range(3):
        for pos, arm in enumerate(reg.schedule[b]):
            camp.store.insert_start(
                design_id=reg.design_id, block=b, position=pos, arm=arm, status="ok", reason=None,
                started_at=f"2025-03-01T10:{b:02d}:{pos * 30:02d}.000Z", metrics={"passes": 12.0, "episodes": 18.0},
                engine=None, engine_version=None, resources={},
            )  # fmt: skip
    head = verdict_lines(analyze_registered(camp.root, reg.design_id))[0]
    assert head == "verdict: incomplete (3 of 10 blocks); the registered rule decides when every block is run"
