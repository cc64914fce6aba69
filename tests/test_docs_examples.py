"""Every example design file of docs/examples registers, runs and decides as its docs say (command arms,
real subprocesses, real store): the files the docs show are the files this test registers."""

from __future__ import annotations

import shutil
from fractions import Fraction
from pathlib import Path

import pytest

from frankenstein.design.analysis import analyze
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design

from helpers_campaign import make_campaign

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"
EXPECTED: dict[str, tuple[str, Fraction | None]] = {
    "unpaired.toml": ("confirmed", Fraction(1, 70)),
    "threshold.toml": ("confirmed", Fraction(1, 32)),
    "family.toml": ("confirmed", None),  # a family has a verdict per candidate: threads-8 passes at 1/64
    "order_adjusted.toml": ("confirmed", Fraction(1, 32)),
    "veto.toml": ("confirmed", Fraction(1, 32)),  # confirmed, but its veto failed: not adoptable
    "memory.toml": ("passed", None),  # about +32 MiB of peak RSS, within 64
}


def test_every_example_is_listed() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.toml")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_an_example_design_registers_runs_and_decides(tmp_path: Path, name: str) -> None:
    c = make_campaign(tmp_path / "c")
    path = shutil.copy(EXAMPLES / name, c.root / name)
    reg = register(c, path)
    run_design(c, reg.design_id, echo=lambda s: None)
    a = analyze(c, reg.design_id)
    assert (a.word, a.verdict.p if a.verdict else None) == EXPECTED[name], a.reason
    if name == "veto.toml":
        assert [v.sentence() for v in a.failed_vetoes] == [
            "veto 'decode_ms_per_token lower in at least 4 of 5 blocks' failed: lower in 0 of 5 blocks, "
            "geometric-mean ratio 1.0050 (+0.50%)"
        ]
    if name == "memory.toml":
        assert "(RSS), within the 64 MiB allowed" in (a.why or "")
    if name == "family.toml":
        assert "threads-8 passes" in a.reason and any(line.startswith("1     threads-8") for line in a.lines)
