"""A decision rule is one module: a test-only rule registered here is accepted in a design file and decides.

Nothing else is touched: design/model.py's field looks the kind up in the rule table when it validates,
and evaluate / decide / curtailed ask the rule, never its kind.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Literal

import pytest

from frankenstein.design import rules, stats
from frankenstein.design.model import DesignFile, load_design
from frankenstein.design.rules import BlockRule, Fired, RuleResult, register_rule
from frankenstein.errors import DesignError


class TwoThirds(BlockRule):
    """Test only: confirmed when at least ``share`` of the blocks favour the candidate and the sign test
    gives p <= alpha."""

    kind: Literal["two_thirds"] = "two_thirds"
    share: float = 2 / 3
    summary = "test only: a share of blocks in favour, and the sign test"

    def run_test(self, g: Sequence[float], cross_check: bool) -> RuleResult:
        up = sum(1 for x in g if x > 0)
        st = stats.sign_test(up, len(g), cross_check=cross_check)
        ok = up >= self.share * len(g) and st.p <= stats.exact_fraction(self.alpha)
        fired: Fired = "better" if ok else None
        return RuleResult(st.p, fired, None, f"{up} of {len(g)} blocks favour the candidate")

    def outcomes(self, done: Sequence[float], remaining: int) -> frozenset[Fired]:
        if remaining == 0:
            return frozenset({self.run_test(done, False).fired})
        return frozenset({"better", None})


@pytest.fixture()
def two_thirds() -> Iterator[type[TwoThirds]]:
    register_rule(TwoThirds)
    yield TwoThirds
    rules.RULES.pop("two_thirds")


DESIGN = {
    "name": "plugin",
    "kind": "speed",
    "blocks": 6,
    "arms": {"served": {"command": ["true"]}, "candidate": {"command": ["true"]}},
    "rule": {"kind": "two_thirds", "alpha": 0.05, "share": 0.8},
}


def test_a_registered_rule_validates_in_a_design_and_decides(two_thirds: type[TwoThirds]) -> None:
    design = DesignFile.model_validate(DESIGN)
    assert isinstance(design.rule, two_thirds) and design.rule.share == 0.8
    v = rules.evaluate(design.rule, [10.0] * 6, [9.0, 9.1, 9.2, 9.3, 9.4, 9.5], "lower")
    assert (v.word, v.says, v.p) == ("confirmed", "confirmed", Fraction(1, 64))
    assert rules.evaluate(design.rule, [10.0] * 6, [9.0, 9.1, 9.2, 9.3, 11.0, 11.0], "lower").word == "not confirmed"
    back = rules.Verdict.model_validate_json(v.model_dump_json())
    assert back == v and isinstance(back.rule, two_thirds)
    assert DesignFile.model_validate_json(design.model_dump_json()) == design
    assert rules.curtailed(design.rule, [0.1] * 5, 1) is None  # its own outcomes: a sixth block could tie


def test_a_registered_rule_from_a_toml_design_and_its_field_errors(two_thirds: type[TwoThirds], tmp_path: Path) -> None:
    path = tmp_path / "d.toml"
    body = (
        'name = "plugin"\nblocks = 6\n[arms.served]\ncommand = ["true"]\n[arms.candidate]\ncommand = ["true"]\n'
        '[rule]\nkind = "two_thirds"\n'
    )
    path.write_text(body)
    assert isinstance(load_design(path).rule, two_thirds)
    path.write_text(body + 'share = "most"\n')
    with pytest.raises(DesignError, match=r"rule\.share"):
        load_design(path)


def test_an_unregistered_kind_is_refused_naming_the_kinds(tmp_path: Path) -> None:
    with pytest.raises(
        Exception,
        match="kind must be one of all_blocks_better, harm, order_adjusted, permutation, sign, all_blocks_by, mean_by, fidelity, memory, got 'two_thirds'",
    ):
        DesignFile.model_validate(DESIGN)
