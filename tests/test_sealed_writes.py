"""Seal what was meant, and a head that survives a crash inside a commit.

A trigger planted in frank.db (as an untrusted part with write access to the campaign could) rewrites a start
between frank's INSERT and the seal: the database is refused by `verify`, by `run` and by the store itself
before anything is sealed; and the chain digests the record frank built in memory, so a start rewritten by a
trigger frank cannot see is still named after the trigger is dropped. A real SIGKILL between the pending head
line and the COMMIT (or just after the COMMIT) is repaired on the next open: `verify` passes and `run --resume`
finishes. A full disk is named as such, with nothing lost. Real SQLite, real CLI, command arms (no engine)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest

from frankenstein import chain
from frankenstein.campaign import open_campaign
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design
from frankenstein.errors import StoreError
from frankenstein.store import Store

from conftest import frank
from helpers_campaign import make_campaign
from helpers_cli import cli
from helpers_tamper import write_command_design

TRIGGER = (
    "CREATE TRIGGER rewrite AFTER INSERT ON starts BEGIN "
    'UPDATE starts SET metrics = \'{"verify_step_ms": 0.1, "tokens_per_step": 1.0}\' WHERE id = NEW.id; END'
)


def _campaign(tmp_path: Path, *, run: bool = True) -> tuple[Path, str]:
    c = make_campaign(tmp_path / "c")
    did = register(c, write_command_design(c.root, "kernel", blocks=2, alpha=0.5)).design_id
    if run:
        run_design(c, did, echo=lambda s: None)
    c.close()
    return c.root, did


def _raw(root: Path, sql: str) -> None:
    conn = sqlite3.connect(root / "frank.db")
    conn.execute(sql)
    conn.commit()
    conn.close()


def test_a_planted_trigger_is_refused_by_verify_run_and_the_store(tmp_path: Path, capsys) -> None:
    root, _ = _campaign(tmp_path)
    with open_campaign(root) as c:
        later = register(c, write_command_design(root, "later", blocks=2, alpha=0.5)).design_id
    _raw(root, TRIGGER)
    code, _, err = cli(capsys, "verify", "-c", str(root))
    assert code == 1 and "Traceback" not in err
    assert "frank.db: the database holds a trigger 'rewrite' on starts that frank did not create" in err, err
    code, _, err = cli(capsys, "run", later, "-c", str(root))
    assert code == 1 and "trigger 'rewrite' on starts" in err and "run refuses" in err, err
    with Store(root / "frank.db") as s:
        n = len(s.query("SELECT id FROM starts"))
        with pytest.raises(
            StoreError, match=r"trigger 'rewrite' on starts that frank did not create \(.*\); nothing was written"
        ):
            s.insert_start(arm="served", status="ok", started_at="2026-01-01T00:00:00.000Z", metrics={"x": 1.0})
        assert len(s.query("SELECT id FROM starts")) == n  # nothing written, nothing sealed
    _raw(root, "DROP TRIGGER rewrite")
    assert cli(capsys, "verify", "-c", str(root))[0] == 0


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE VIEW starts_ok AS SELECT * FROM starts WHERE status = 'ok'",
        "CREATE TABLE shadow (x)",
        "CREATE INDEX starts_arm ON starts (arm)",
        "ALTER TABLE starts ADD COLUMN note TEXT",
    ],
    ids=["view", "table", "index", "altered table"],
)
def test_any_schema_object_frank_did_not_create_is_refused(tmp_path: Path, capsys, sql: str) -> None:
    root, _ = _campaign(tmp_path, run=False)
    _raw(root, sql)
    code, _, err = cli(capsys, "verify", "-c", str(root))
    assert code == 1 and "Traceback" not in err
    assert "that frank did not create" in err or "is not the one frank created (it was altered" in err, err


def test_the_chain_seals_what_frank_meant_not_what_the_database_hands_back(tmp_path: Path, capsys) -> None:
    """A TEMP trigger on frank's own connection (a test double: a trigger the schema check cannot see, since
    temp objects live only in the connection that made them) rewrites the start inside frank's transaction.
    The digest is of the start frank built, so after DROP TRIGGER the rewritten start is still named."""
    root, did = _campaign(tmp_path, run=False)
    with Store(root / "frank.db") as s:
        s.conn.execute(
            TRIGGER.replace("CREATE TRIGGER", "CREATE TEMP TRIGGER").replace(" ON starts", " ON main.starts")
        )
        sid = s.insert_start(arm="served", status="ok", started_at="2026-01-01T00:00:00.000Z", metrics={"x": 1.0})
        assert s.query("SELECT metrics FROM starts WHERE id = ?", (sid,))[0][0].startswith('{"verify_step_ms": 0.1')
        s.conn.execute("DROP TRIGGER temp.rewrite")
    code, _, err = cli(capsys, "verify", "-c", str(root))
    assert code == 1
    assert f"start {sid} (no design, arm served): changed after it was recorded" in err, err


def _kill_during_first_start(root: Path, did: str, point: str) -> None:
    r = frank("run", did, "-c", str(root), env={"FRANK_TEST_KILL_AT": point})
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr)
    assert chain.pending_path(root / "frank.head").exists()


@pytest.mark.parametrize("point", ["before-commit", "after-commit"])
def test_a_kill_inside_a_commit_is_repaired_on_open(tmp_path: Path, point: str) -> None:
    root, did = _campaign(tmp_path, run=False)
    with Store(root / "frank.db") as s:
        before = len(s.chain_links())
    _kill_during_first_start(root, did, point)
    r = frank("verify", "-c", str(root))
    assert r.returncode == 0, r.stderr
    assert not chain.pending_path(root / "frank.head").exists()
    with Store(root / "frank.db") as s:
        starts = len(s.query("SELECT id FROM starts"))
        assert len(s.chain_links()) == before + starts
        assert starts == (1 if point == "after-commit" else 0)
        assert len(chain.read_head(root / "frank.head") or []) == before + starts
    r = frank("run", did, "-c", str(root), "--resume")
    assert r.returncode == 0, r.stderr
    assert f"{did}: {4 - starts} starts run, {starts} already recorded" in r.stdout, r.stdout
    r = frank("verify", "-c", str(root))
    assert r.returncode == 0, r.stderr


def test_a_full_disk_is_named_and_nothing_is_lost(tmp_path: Path) -> None:
    """``PRAGMA max_page_count`` is the test double of a full disk: SQLite answers SQLITE_FULL exactly as it does
    when the file system has no space left."""
    root, _ = _campaign(tmp_path)
    with Store(root / "frank.db") as s:
        n = len(s.chain_links())
        pages = s.query("PRAGMA page_count")[0][0]
        s.conn.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(StoreError, match="disk full") as info:
            s.insert_start(
                arm="served",
                status="ok",
                started_at="2026-01-01T00:00:00.000Z",
                metrics={},
                artifacts={"a": b"x" * 10**6},
            )
        assert "nothing of this record was written" in str(info.value)
        assert len(s.chain_links()) == n and s.verify() == n
        assert not chain.pending_path(root / "frank.head").exists()
        s.conn.execute("PRAGMA max_page_count = 1073741823")
        s.insert_start(arm="served", status="ok", started_at="2026-01-01T00:00:00.000Z", metrics={})
        assert s.verify() == n + 1


@pytest.fixture
def small_disk(tmp_path: Path):
    """A real 1 MiB file system (tmpfs): the disk fills for real, ENOSPC from the kernel."""
    where = tmp_path / "disk"
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {r.stderr.strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_really_full_disk_is_named_and_nothing_is_lost(small_disk: Path) -> None:
    with Store(small_disk / "frank.db") as s:
        written = 0
        with pytest.raises(StoreError, match="disk full") as info:
            for i in range(100):
                s.insert_start(
                    arm="served", status="ok", started_at=f"t{i}", metrics={}, artifacts={"a": os.urandom(50_000)}
                )
                written += 1
        assert 0 < written < 100 and "nothing of this record was written" in str(info.value)
        assert len(s.query("SELECT id FROM starts")) == written and s.verify() == written
        assert not chain.pending_path(small_disk / "frank.head").exists()
    with Store(small_disk / "frank.db") as s:  # opened again: everything committed is there and verifies
        assert s.verify() == written
