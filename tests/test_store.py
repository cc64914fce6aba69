"""The store's typed reads and writes on a real SQLite file: per-turn metrics need no migration, a
version-1 store (fixed turn columns) stays readable, and the registry is verified once per open campaign."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from frankenstein.campaign import open_campaign
from frankenstein.design.registry import get, register
from frankenstein.errors import RegistryError, StoreError
from frankenstein.store import FORMAT_VERSION, Store
from helpers_campaign import make_campaign, make_workload, write_design


def test_a_new_turn_metric_is_stored_and_read_without_a_migration(tmp_path: Path) -> None:
    with Store(tmp_path / "frank.db") as s:
        sid = s.insert_start(
            arm="served",
            status="ok",
            started_at="2026-01-01T00:00:00.000Z",
            metrics={"x": 1.0},
            turns=[
                {"idx": 0, "turn_id": "t0", "warmup": 1, "error": None, "decode_ms": 5.5, "kv_cache_usage_perc": 0.25}
            ],
            resources={"gpu": None},
            capabilities={"fidelity_path": "p"},
        )
        [turn] = s.turns_of(sid)
        assert turn == {
            "idx": 0,
            "turn_id": "t0",
            "warmup": True,
            "error": None,
            "decode_ms": 5.5,
            "kv_cache_usage_perc": 0.25,
        }


def test_starts_of_decodes_json_once(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    c.store.insert_start(
        arm="candidate",
        status="failed",
        started_at="2026-01-01T00:00:00.000Z",
        metrics={},
        design_id="d-1",
        block=0,
        position=1,
        reason="engine exited 1",
        resources={"gpu": [{"index": 0, "memory_mib_peak": 10}]},
        artifacts={"a.bin": b"\x00\x01"},
    )
    [r] = c.store.starts_of("d-1")
    assert (r.arm, r.status, r.ok, r.reason, r.block, r.position) == (
        "candidate",
        "failed",
        False,
        "engine exited 1",
        0,
        1,
    )
    assert r.resources["gpu"][0]["memory_mib_peak"] == 10 and r.metrics == {} and r.recipe is None
    assert c.store.artifacts_of("d-1", "a.bin") == {r.id: b"\x00\x01"}
    assert c.store.artifacts_of("d-1", "other") == {}
    c.close()


def test_a_version_1_store_is_migrated_and_its_fixed_turn_columns_still_read(tmp_path: Path) -> None:
    db = tmp_path / "frank.db"
    with Store(db) as s:
        sid = s.insert_start(arm="served", status="ok", started_at="2026-01-01T00:00:00.000Z", metrics={})
    # A store written before migration 0003: the same tables, with the fixed turn columns only.
    old = tmp_path / "old.db"
    conn = sqlite3.connect(old)
    src = sqlite3.connect(db)
    for (sql,) in src.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name != 'turns' AND sql IS NOT NULL"
    ):
        conn.execute(sql)
    conn.execute(
        "CREATE TABLE turns (start_id INTEGER NOT NULL, idx INTEGER NOT NULL, turn_id TEXT NOT NULL, warmup INTEGER"
        " NOT NULL, prompt_tokens INTEGER, cached_tokens INTEGER, generated_tokens INTEGER, prompt_ms REAL,"
        " decode_ms REAL, target_steps INTEGER, drafted INTEGER, accepted INTEGER, ttft_ms REAL, e2e_ms REAL,"
        " error TEXT, PRIMARY KEY (start_id, idx))"
    )
    for table in ("meta", "migrations", "starts"):
        for row in src.execute(f"SELECT * FROM {table}"):
            conn.execute(f"INSERT INTO {table} VALUES ({','.join('?' * len(row))})", row)
    conn.execute(
        "INSERT INTO turns (start_id, idx, turn_id, warmup, generated_tokens, decode_ms) VALUES (?,0,'t0',0,17,3.5)",
        (sid,),
    )
    conn.execute("DELETE FROM migrations WHERE name = '0003_turn_metrics'")
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'format_version'")
    conn.commit()
    conn.close()
    src.close()
    with Store(old) as s:
        assert s.turns_of(sid) == [
            {"idx": 0, "turn_id": "t0", "warmup": False, "error": None, "generated_tokens": 17, "decode_ms": 3.5}
        ]
        assert s.query("SELECT value FROM meta WHERE key = 'format_version'")[0][0] == str(FORMAT_VERSION)


def test_a_newer_store_is_refused(tmp_path: Path) -> None:
    with Store(tmp_path / "frank.db") as s:
        with s.transaction() as c:
            c.execute("UPDATE meta SET value = ? WHERE key = 'format_version'", (str(FORMAT_VERSION + 1),))
    with pytest.raises(StoreError, match="newer than this Frankenstein understands"):
        Store(tmp_path / "frank.db")


def test_the_registry_is_verified_once_per_open_campaign(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl")
    register(c, write_design(c.root / "d.toml"))
    get(c, "d-1")
    copy = c.root / "designs" / "d-1.toml"
    copy.write_text(copy.read_text() + "\n# edited\n")
    assert get(c, "d-1").design_id == "d-1"  # verified already in this command
    c.close()
    with open_campaign(c.root) as again, pytest.raises(RegistryError, match="changed or removed after registration"):
        get(again, "d-1")  # the next command verifies again
