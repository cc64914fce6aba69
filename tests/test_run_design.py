"""End to end on the real llama-server: register, run, kill -9 mid-run, resume, analyze."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from frankenstein.campaign import open_campaign
from frankenstein.design.runner import run_lock
from frankenstein.errors import RunLockedError

from conftest import frank, pids_of
from helpers_campaign import make_campaign, make_workload, write_design

pytestmark = pytest.mark.engine


def _starts(root: Path) -> list[tuple[int, int, str, str]]:
    import sqlite3

    with sqlite3.connect(root / "frank.db") as db:
        return db.execute("SELECT block, position, arm, status FROM starts ORDER BY block, position").fetchall()


def test_register_run_kill_resume_analyze(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl", turns=4, tokens=16)
    design = write_design(c.root / "d.toml", blocks=5, candidate_parts='["draft"]')
    c.close()
    assert frank("register", str(design), "-c", str(c.root)).returncode == 0

    # Start the run, kill -9 it as soon as its second start is recorded.
    p = subprocess.Popen(
        [sys.executable, "-m", "frankenstein", "run", "d-1", "-c", str(c.root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert p.stdout is not None
    lines = [p.stdout.readline(), p.stdout.readline()]
    assert all(line.startswith("block 1/5") for line in lines), lines
    p.kill()
    p.wait()
    partial = _starts(c.root)
    assert 2 <= len(partial) < 10

    again = frank("run", "d-1", "-c", str(c.root))
    assert again.returncode == 1
    assert "already has" in again.stderr and "--resume" in again.stderr

    r = frank("run", "d-1", "-c", str(c.root), "--resume")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith(f"{10 - len(partial)} starts run, {len(partial)} already recorded")
    starts = _starts(c.root)
    assert len(starts) == 10 and len({(b, p) for b, p, _, _ in starts}) == 10
    assert sorted(a for _, _, a, _ in starts) == ["candidate"] * 5 + ["served"] * 5
    assert all(s == "ok" for *_, s in starts)
    assert pids_of(str(tmp_path)) == []
    with open_campaign(c.root) as camp:  # every start's turns, with the server's numbers, read back typed
        rows = camp.store.starts_of("d-1")
        turns = [camp.store.turns_of(r.id) for r in rows]
    assert [len(t) for t in turns] == [4] * 10
    assert all(
        t[0]["warmup"] and not t[1]["warmup"] and t[1]["generated_tokens"] == 16 and t[1]["decode_ms"] > 0
        for t in turns
    )

    a = frank("analyze", "d-1", "-c", str(c.root))
    assert a.returncode == 0, a.stderr
    assert "verdict: " in a.stdout and "p = " in a.stdout
    assert "secondary metrics (reported, not tested):" in a.stdout
    assert "tokens_per_step: geometric-mean ratio" in a.stdout


def test_second_runner_is_refused(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl", turns=2)
    design = write_design(c.root / "d.toml", blocks=5)
    assert frank("register", str(design), "-c", str(c.root)).returncode == 0
    with run_lock(c):
        r = frank("run", "d-1", "-c", str(c.root))
    assert r.returncode == 1
    assert f"another runner (pid {__import__('os').getpid()}) is working on campaign" in r.stderr
    with open_campaign(c.root) as again, run_lock(again):
        pass
    with pytest.raises(RunLockedError), run_lock(c), run_lock(c):
        pass
