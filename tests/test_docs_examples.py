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
EXPECTED = {
    "unpaired.toml": ("confirmed", Fraction(1, 70)),
    "threshold.toml": ("confirmed", Fraction(1, 32)),
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
    assert a.verdict is not None and (a.word, a.verdict.p) == EXPECTED[name], a.reason
