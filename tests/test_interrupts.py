"""Interrupts (#32 item 5): a start cut by Ctrl-C is logged as discarded, not "ends after"; the start a
``frank run --resume`` runs in a block begun before is marked in analyze and the note with its delay.
Real ``frank run`` subprocesses on command arms, a real SIGINT."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from frankenstein.design.registry import register
from frankenstein.design.start import span

from conftest import frank
from helpers_campaign import make_campaign

ARM = """\
import json, sys, time
time.sleep(float(sys.argv[2]))
print(json.dumps({"verify_step_ms": float(sys.argv[1])}))
"""

DESIGN = """\
name = "cut"
kind = "speed"
blocks = 2
primary_metric = "verify_step_ms"

[arms.served]
command = ["{py}", "{arm}", "2.0", "1.2"]

[arms.candidate]
command = ["{py}", "{arm}", "1.5", "1.2"]

[rule]
kind = "all_blocks_better"
alpha = 0.25
"""


def _read(stream, into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line.rstrip("\n"))


def test_ctrl_c_discards_the_start_and_resume_marks_the_one_it_reruns(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    (c.root / "arm.py").write_text(ARM)
    design = c.root / "cut.toml"
    design.write_text(DESIGN.format(py=sys.executable, arm=c.root / "arm.py"))
    did = register(c, design).design_id
    c.close()
    p = subprocess.Popen(
        [sys.executable, "-m", "frankenstein", "run", did, "-c", str(c.root), "--heartbeat", "30"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    err: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=_read, args=(p.stderr, err), daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while not any("start 2/4 begins" in line for line in seen):  # the first start is recorded by now
            seen.append(err.get(timeout=max(deadline - time.monotonic(), 0.1)))
        time.sleep(0.3)  # inside the second start's 1.2 s
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=60) == 130
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    reader.join(timeout=10)
    while not err.empty():
        seen.append(err.get())
    text = "\n".join(seen)
    assert re.search(
        r"start 2/4 discarded after [0-9.]+ s \(interrupted; not recorded, `frank run --resume` runs it again\): block 1/2 · ",
        text,
    ), text
    assert "start 2/4 ends after" not in text

    resumed = frank("run", did, "-c", str(c.root), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines()[-1] == f"{did}: 3 starts run, 1 already recorded"
    a = frank("analyze", did, "-c", str(c.root))
    assert a.returncode == 0, a.stderr
    marked = [line for line in a.stdout.splitlines() if "ran after `frank run --resume`" in line]
    assert len(marked) == 1, a.stdout  # the rerun start of block 1 only: block 2 ran back to back
    assert re.match(
        r"warning: start \d+ \(block 1, (served|candidate)\) ran after `frank run --resume`, [0-9.]+ s after its "
        r"block's previous start \(\d+, (served|candidate)\) ended: the block's arms did not run back to back",
        marked[0],
    ), marked
    r = frank("report", "-c", str(c.root), "-o", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    note = (tmp_path / "out" / "note.md").read_text()
    assert "ran after `frank run --resume`" in note


def test_span_words() -> None:
    assert [span(x) for x in (4.46, 75, 7500, None)] == ["4.5 s", "1 min 15 s", "2 h 5 min", "an unknown time"]
