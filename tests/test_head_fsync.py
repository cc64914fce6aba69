"""A commit is on the disk in the order that lets a power cut leave only what a kill leaves: the pending file and
its folder, then the COMMIT (SQLite in WAL mode with ``synchronous=FULL``: the WAL is synced), then the head
line, then the mirror's line. Watched with ``strace`` on the real CLI: the fsyncs it makes, on which files, in
which order (a power cut itself cannot be made here; this shows the calls that make each write durable)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import frank
from helpers_campaign import TOML, make_campaign

STRACE = shutil.which("strace")
SYNC = re.compile(r"^\d+\s+(fsync|fdatasync)\(\d+<([^>]*)>\)\s+=\s+0")
UNLINK = re.compile(r'^\d+\s+unlink(?:at)?\((?:AT_FDCWD[^,]*, )?"([^"]*)"')

BENCH = """\
import json, sys
print(json.dumps({"verify_step_ms": float(sys.argv[1]), "tokens_per_step": 1.0}))
"""

DESIGN = """\
name = "fsynced"
kind = "speed"
blocks = 4
primary_metric = "verify_step_ms"

[arms.served]
command = {served}

[arms.candidate]
command = {candidate}

[rule]
kind = "all_blocks_better"
alpha = 0.1
"""


def _traced(tmp_path: Path, *args: str) -> list[tuple[str, str]]:
    """(call, path) of every fsync, fdatasync and unlink the real CLI makes (threads and children too)."""
    out = tmp_path / "strace.txt"
    cmd = [STRACE or "strace", "-f", "-y", "-e", "trace=fsync,fdatasync,unlink,unlinkat", "-o", str(out)]
    r = subprocess.run([*cmd, sys.executable, "-m", "frankenstein", *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    events = []
    for line in out.read_text().splitlines():
        if m := SYNC.match(line):
            events.append(("sync", m.group(2)))
        elif (m := UNLINK.match(line)) and "= 0" in line:
            events.append(("unlink", m.group(1)))
    return events


def _after(events: list[tuple[str, str]], start: int, event: tuple[str, str]) -> int:
    """The index of the first ``event`` at or after ``start`` (fails the test when there is none)."""
    found = next((i for i in range(start, len(events)) if events[i] == event), None)
    assert found is not None, f"{event} not after event {start}: {events[start:]}"
    return found


@pytest.mark.skipif(STRACE is None, reason="strace is not installed (make setup installs it)")
def test_each_commit_syncs_pending_then_commit_then_head_then_mirror(tmp_path: Path) -> None:
    mirror = tmp_path / "kept" / "head.txt"
    mirror.parent.mkdir()
    c = make_campaign(tmp_path / "c", TOML + f'\n[integrity]\nhead_mirror = "{mirror}"\n')
    c.close()
    bench = c.root / "bench.py"
    bench.write_text(BENCH)
    design = c.root / "d.toml"
    served, candidate = ([sys.executable, str(bench), x] for x in ("2.0", "1.5"))
    design.write_text(DESIGN.format(served=json.dumps(served), candidate=json.dumps(candidate)))

    r = frank("register", str(design), "-c", str(c.root))
    assert r.returncode == 0, r.stderr
    mirror.unlink()  # made again by the traced command, every head line in it: its folder must be synced

    events = _traced(tmp_path, "run", r.stdout.split()[1], "-c", str(c.root))  # 8 starts, 8 commits

    root, head = str(c.root), str(c.root / "frank.head")
    pending, wal = head + ".pending", str(c.root / "frank.db-wal")
    i = _after(events, 0, ("sync", str(mirror.parent)))  # the mirror made on open: its name is on the disk
    assert _after(events, i, ("sync", str(mirror))) > i
    commits = [n for n, e in enumerate(events) if e == ("unlink", pending)]
    assert len(commits) >= 8, events  # each start's commit (a fresh WAL's first commit is synced even without FULL)
    start = 0
    for end in commits:
        p = _after(events, start, ("sync", pending))
        d = _after(events, p, ("sync", root))  # the pending file's name
        w = _after(events, d, ("sync", wal))  # the COMMIT
        h = _after(events, w, ("sync", head))  # the head line, only after the COMMIT is durable
        assert h < end, f"the pending file went before the head line was synced: {events[start : end + 1]}"
        start = _after(events, end, ("sync", str(mirror))) + 1  # the mirror's line, after frank.head's
