"""The real `frank` commands served, adopt, revert and report, run as subprocesses on a stored campaign."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import frank
from helpers_campaign import make_campaign, make_workload
from helpers_ledger import CONFIRMED, MIXED, is_png, stored_design


@pytest.fixture
def camp(tmp_path: Path):
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    stored_design(c, name="good", served=CONFIRMED[0], candidate=CONFIRMED[1])
    stored_design(c, name="mixed", parts='["threads1"]', served=MIXED[0], candidate=MIXED[1])
    yield c
    c.close()


def test_adopt_served_revert_report(camp, tmp_path: Path) -> None:
    root = str(camp.root)
    r = frank("served", "-c", root)
    assert r.returncode == 0 and r.stdout.splitlines()[0] == "served: base"
    assert "history: no steps yet (the served recipe is the base recipe)" in r.stdout

    r = frank("adopt", "draft", "--design", "good-1", "-c", root)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "step 1: adopted draft on design good-1; served: base + draft"

    r = frank("adopt", "threads1", "--design", "mixed-1", "-c", root)
    assert r.returncode == 1
    assert r.stderr.strip() == (
        "frank: error: refused: adopt 'threads1' on design mixed-1: its verdict is "
        "'not confirmed', not 'confirmed' (p > alpha = 0.05); it was registered when the served "
        "recipe was base, and it is now base + draft: register the design again"
    )

    r = frank("adopt", "threads1", "--design", "mixed-1", "--force", "-c", root)
    assert r.returncode == 1
    assert r.stderr.strip() == "frank: error: --force needs --why TEXT: a forced adoption is recorded with its reason"

    r = frank("revert", "-c", root, "--why", "checking revert")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "step 2: undid step 1 (adopt draft); served: base"

    out = tmp_path / "note"
    r = frank("report", "--out", str(out), "--since", "2000-01-01", "-c", root)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(out / "note.md")
    text = (out / "note.md").read_text()
    assert (
        "- **reverted** `draft` (step 2, undoes step 1: adopt); why: checking revert; served parts after it: none"
        in text
    )
    assert is_png(out / "good-1-blocks.png")


def test_bad_since_is_a_usage_error(camp, tmp_path: Path) -> None:
    r = frank("report", "--out", str(tmp_path / "n"), "--since", "2025-13-01", "-c", str(camp.root))
    assert r.returncode == 2 and "--since" in r.stderr and not (tmp_path / "n").exists()


def test_help_has_an_example() -> None:
    """Help is read in-process through typer's runner (the same app the `frank` script runs)."""
    from typer.testing import CliRunner

    from frankenstein.cli import app

    for command in ("served", "adopt", "revert", "report"):
        r = CliRunner().invoke(app, [command, "--help"], terminal_width=200)
        assert r.exit_code == 0 and f"Example: frank {command}" in r.output, command
