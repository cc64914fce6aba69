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

from helpers_campaign import TOML, make_campaign
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


# ---------------------------------------------------------------- FRANK_EXPECT_HEAD: every command that verifies


def _rollback_both(root: Path, saved: Path) -> None:
    """Put back the database and head file as they were when ``saved`` was taken (a restore from backup)."""
    for name in ("frank.db", "frank.head"):
        (root / name).write_bytes((saved / name).read_bytes())
    for extra in ("frank.db-wal", "frank.db-shm"):
        (root / extra).unlink(missing_ok=True)


def _save(root: Path, to: Path) -> None:
    with open_campaign(root) as c:
        c.store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    to.mkdir()
    for name in ("frank.db", "frank.head"):
        (to / name).write_bytes((root / name).read_bytes())


def _cut_tail(root: Path, n: int) -> None:
    """Delete the last ``n`` records (starts, with their turns) and their chain rows, and cut frank.head to match."""
    conn = sqlite3.connect(root / "frank.db")
    for seq, kind, ref in conn.execute("SELECT seq, kind, ref FROM chain ORDER BY seq DESC LIMIT ?", (n,)).fetchall():
        assert kind == "start"
        conn.execute("DELETE FROM starts WHERE id = ?", (ref,))
        conn.execute("DELETE FROM chain WHERE seq = ?", (seq,))
    conn.commit()
    conn.close()
    lines = (root / "frank.head").read_text().splitlines()[:-n]
    (root / "frank.head").write_text("".join(f"{x}\n" for x in lines))


@pytest.mark.parametrize("attack", ["rewrite", "rollback", "cut tail"])
def test_analyze_and_adopt_refuse_what_only_the_kept_head_catches(
    kept: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, attack: str
) -> None:
    root, _ = kept
    if attack == "rollback":
        _save(root, root.parent / "backup")
        _design(root, "later")  # the chain grows; its head is the one kept
    code, out, _ = cli(capsys, "verify", "-c", str(root))
    line = next(x for x in out.splitlines() if x.startswith("evidence chain verified: "))
    if attack == "rewrite":
        _rewrite_everything(root)
    elif attack == "rollback":
        _rollback_both(root, root.parent / "backup")
    else:
        _cut_tail(root, 2)
    assert cli(capsys, "verify", "-c", str(root))[0] == 0  # inside the folder everything agrees
    kept_file = root.parent / "kept.txt"
    kept_file.write_text(line + "\n")
    for value in (line, str(kept_file)):
        monkeypatch.setenv("FRANK_EXPECT_HEAD", value)
        for args in (
            ["analyze", "kernel-1"],
            ["adopt", "draft", "--design", "kernel-1"],
            ["run", "kernel-1", "--resume"],
            ["served"],
        ):
            code, _, err = cli(capsys, *args, "-c", str(root))
            assert code == 1 and "Traceback" not in err, (args, err)
            assert "FRANK_EXPECT_HEAD" in err and "refuses to work from a campaign that fails verification" in err, err
        code, _, err = cli(capsys, "verify", "-c", str(root))
        assert code == 1 and "FRANK_EXPECT_HEAD" in err


def test_the_kept_head_in_the_environment_passes_an_untouched_campaign(
    kept: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, line = kept
    monkeypatch.setenv("FRANK_EXPECT_HEAD", line)
    code, out, err = cli(capsys, "analyze", "kernel-1", "-c", str(root))
    assert code == 0, err
    code, out, err = cli(capsys, "served", "-c", str(root))
    assert code == 0 and out.startswith("served: "), err
    code, out, err = cli(capsys, "verify", "-c", str(root))
    seq = int(line.split()[3])
    assert code == 0 and f"kept head verified (FRANK_EXPECT_HEAD): chain record {seq} of {seq} is " in out, out
    monkeypatch.setenv("FRANK_EXPECT_HEAD", "not a head")
    code, _, err = cli(capsys, "analyze", "kernel-1", "-c", str(root))
    assert code == 1 and "FRANK_EXPECT_HEAD: no chain head in it" in err and "Traceback" not in err


# ---------------------------------------------------------------- [integrity] head_mirror


@pytest.mark.parametrize("attack", ["rewrite", "rollback", "cut tail"])
def test_a_head_mirror_outside_the_campaign_catches_each_attack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], attack: str
) -> None:
    mirror = tmp_path / "elsewhere" / "camp.head"
    mirror.parent.mkdir()
    c = make_campaign(tmp_path / "c", TOML + f'\n[integrity]\nhead_mirror = "{mirror}"\n')
    c.close()
    root = c.root
    _design(root, "kernel")
    if attack == "rollback":
        _save(root, tmp_path / "backup")
        _design(root, "later")
    assert mirror.read_text() == (root / "frank.head").read_text()  # every commit's line, appended there too
    code, out, err = cli(capsys, "verify", "-c", str(root))
    assert code == 0, err
    if attack == "rewrite":
        _rewrite_everything(root)
    elif attack == "rollback":
        _rollback_both(root, tmp_path / "backup")
    else:
        _cut_tail(root, 2)
    for args in (["verify"], ["analyze", "kernel-1"], ["adopt", "draft", "--design", "kernel-1"]):
        code, _, err = cli(capsys, *args, "-c", str(root))
        assert code == 1 and "Traceback" not in err, (args, err)
        assert f"[integrity] head_mirror {mirror}" in err, err


def test_a_head_mirror_inside_the_campaign_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    c = make_campaign(tmp_path / "c")
    c.close()
    toml = c.root / "frank.toml"
    toml.write_text(toml.read_text() + '\n[integrity]\nhead_mirror = "logs/head"\n')
    code, _, err = cli(capsys, "verify", "-c", str(c.root))
    assert code == 1 and "Traceback" not in err
    assert f"{toml}: integrity.head_mirror: 'logs/head' is inside the campaign folder" in err, err
