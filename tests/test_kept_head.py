"""``frank verify --expect-head``: a head kept outside the campaign catches what nothing inside it can — the
whole chain rewritten with frank.head rewritten to match, or the campaign's database and head file replaced by
fresh ones. Attacked here as a gaming script would, with our own hashing code and raw sqlite3."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from frankenstein import chain
from frankenstein.campaign import init_campaign, open_campaign
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design

from helpers_campaign import make_campaign
from helpers_cli import cli
from helpers_tamper import rewrite_chain_from, write_command_design


def _design(root: Path, name: str) -> str:
    with open_campaign(root) as c:
        did = register(c, write_command_design(root, name, blocks=2, alpha=0.5)).design_id
        run_design(c, did, echo=lambda s: None)
    return did


@pytest.fixture
def kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, str]:
    """A campaign with one design run, and the line ``frank verify`` printed for it (the head to keep)."""
    c = make_campaign(tmp_path / "c")
    c.close()
    _design(c.root, "kernel")
    code, out, err = cli(capsys, "verify", "-c", str(c.root))
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("evidence chain verified: "))
    return c.root, line


def _rewrite_everything(root: Path) -> int:
    """Change a start's value, recompute every chain row from it on, and rewrite frank.head to match."""
    conn = sqlite3.connect(root / "frank.db")
    conn.row_factory = sqlite3.Row
    sid = conn.execute("SELECT id FROM starts WHERE arm = 'candidate' ORDER BY id LIMIT 1").fetchone()[0]
    conn.execute("UPDATE starts SET metrics = json_set(metrics, '$.verify_step_ms', 9.0) WHERE id = ?", (sid,))
    first = int(conn.execute("SELECT seq FROM chain WHERE kind = 'start' AND ref = ?", (sid,)).fetchone()[0])
    rewrite_chain_from(conn, first)
    rows = conn.execute("SELECT seq, row_hash FROM chain ORDER BY seq").fetchall()
    conn.commit()
    conn.close()
    (root / "frank.head").write_text("".join(f"{s} {h}\n" for s, h in rows))
    return first


def test_the_kept_head_passes_and_still_passes_as_the_chain_grows(
    kept: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, line = kept
    seq = int(line.split()[3])
    code, out, err = cli(capsys, "verify", "-c", str(root), "--expect-head", line)
    assert code == 0, err
    assert f"kept head verified: chain record {seq} of {seq} is " in out
    _design(root, "later")  # more records appended since the head was kept
    code, out, err = cli(capsys, "verify", "-c", str(root), "--expect-head", line)
    assert code == 0, err
    assert f"kept head verified: chain record {seq} of " in out and f"of {seq} is" not in out
    copy = root.parent / "kept-frank.head"  # a copy of the head file as it was: its last line is the kept head
    copy.write_text("".join(f"{n} {h}\n" for n, h in (chain.read_head(root / "frank.head") or [])[:seq]))
    code, out, err = cli(capsys, "verify", "-c", str(root), "--expect-head", str(copy))
    assert code == 0, err


def test_a_whole_rewrite_with_its_head_file_passes_alone_and_fails_against_the_kept_head(
    kept: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    root, line = kept
    first = _rewrite_everything(root)
    code, _, err = cli(capsys, "verify", "-c", str(root))
    assert code == 0, err  # the gap a kept head closes: inside the folder everything agrees again
    code, out, err = cli(capsys, "verify", "-c", str(root), "--expect-head", line)
    assert code == 1 and "Traceback" not in err and "kept head verified" not in out
    seq = int(line.split()[3])
    assert f"chain record {seq} (" in err and "is not the kept head" in err and "the chain was rewritten" in err
    assert seq >= first


def test_a_replaced_campaign_fails_against_the_kept_head(
    kept: tuple[Path, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    root, line = kept
    (root / "frank.db").unlink()
    (root / "frank.head").unlink()
    init_campaign(tmp_path / "fresh").close()  # an empty campaign verifies as empty...
    code, out, err = cli(capsys, "verify", "-c", str(tmp_path / "fresh"))
    assert code == 0 and "registry verified: 0 designs" in out
    seq = int(line.split()[3])
    code, out, err = cli(capsys, "verify", "-c", str(tmp_path / "fresh"), "--expect-head", line)
    assert code == 1 and "Traceback" not in err  # ...but not as the campaign whose head was kept
    assert f"is chain record {seq}, but the chain has 0 records" in err
    code, out, err = cli(capsys, "verify", "-c", str(tmp_path / "fresh"), "--expect-head", line.split()[6])
    assert code == 1 and "is not in the chain" in err  # the bare hash, without its record number


def test_a_kept_head_that_holds_no_head_is_one_line(kept: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = kept
    code, _, err = cli(capsys, "verify", "-c", str(root), "--expect-head", "yesterday's head")
    assert code == 1 and "Traceback" not in err
    assert "--expect-head: no chain head in it" in err and len(err.strip().splitlines()) == 1
    empty = root.parent / "empty.txt"
    empty.write_text("")
    code, _, err = cli(capsys, "verify", "-c", str(root), "--expect-head", str(empty))
    assert code == 1 and f"{empty}: no chain head in it" in err
