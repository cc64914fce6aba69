"""Progress for logs: `frank run` with stdout and stderr as pipes writes a plain line on stderr as each
start begins and ends and a heartbeat with an ETA during a long start, as they happen; stdout keeps only
the result lines. Real subprocesses: `frank run` on command arms that take about a second each."""

from __future__ import annotations

import io
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from frankenstein.design.registry import register
from frankenstein.progress import HEARTBEAT_ENV, RunProgress, heartbeat_seconds

from helpers_campaign import make_campaign

SLOW_ARM = """\
import json, sys, time
time.sleep(float(sys.argv[2]))  # a start that takes a while (the engine's life, here)
print(json.dumps({"verify_step_ms": float(sys.argv[1])}))
"""

DESIGN = """\
name = "slow"
kind = "speed"
blocks = 2
primary_metric = "verify_step_ms"

[arms.served]
command = ["{py}", "{arm}", "2.0", "{secs}"]

[arms.candidate]
command = ["{py}", "{arm}", "1.5", "{secs}"]

[rule]
kind = "all_blocks_better"
alpha = 0.5
"""


def _lines(stream: io.TextIOBase, into: queue.Queue[tuple[float, str, str]], name: str) -> None:
    for line in stream:
        into.put((time.monotonic(), name, line.rstrip("\n")))


def test_run_in_a_pipe_prints_start_lines_and_heartbeats_as_they_happen(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    arm = c.root / "arm.py"
    arm.write_text(SLOW_ARM)
    design = c.root / "slow.toml"
    design.write_text(DESIGN.format(py=sys.executable, arm=arm, secs="0.9"))
    did = register(c, design).design_id
    c.close()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONUNBUFFERED", HEARTBEAT_ENV)}
    t0 = time.monotonic()
    p = subprocess.Popen(
        [sys.executable, "-m", "frankenstein", "run", did, "-c", str(c.root), "--heartbeat", "0.3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    got: queue.Queue[tuple[float, str, str]] = queue.Queue()
    readers = [
        threading.Thread(target=_lines, args=(p.stdout, got, "out"), daemon=True),
        threading.Thread(target=_lines, args=(p.stderr, got, "err"), daemon=True),
    ]
    for r in readers:
        r.start()
    try:
        first_at, _, first = got.get(timeout=20)  # the first line, while the first start is still running
        assert p.poll() is None
        assert first_at - t0 < 10, f"first progress line after {first_at - t0:.1f} s"
        assert first.startswith("frank run [0:00:0") and "start 1/4 begins: block 1/2 · " in first
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    for r in readers:
        r.join(timeout=10)
    seen = [first]
    while not got.empty():
        seen.append(got.get()[2])
    err = [line for line in seen if line.startswith("frank run [")]
    out = [line for line in seen if not line.startswith("frank run [")]
    begins = [line for line in err if " begins: " in line]
    ends = [line for line in err if " ends after " in line]
    beats = [line for line in err if " running for " in line]
    assert [b.split("] ")[1].split(":")[0] for b in begins] == [f"start {i}/4 begins" for i in range(1, 5)]
    assert len(ends) == 4 and "3 to go, ETA " in ends[0] and "to go" not in ends[-1]
    assert beats, "no heartbeat during 0.9 s starts with --heartbeat 0.3"
    assert any("ETA after the first start" in b for b in beats[:1])
    assert any("start 2/4 running for" in b and "; ETA " in b for b in beats)
    # stdout stays parseable: one result line per start and the summary, nothing of the progress
    assert len(out) == 5 and out[-1] == f"{did}: 4 starts run, 0 already recorded"
    assert all(": ok verify_step_ms=" in line for line in out[:4])


def test_heartbeat_interval_comes_from_the_option_then_the_environment() -> None:
    assert heartbeat_seconds(None, {}) == 30.0
    assert heartbeat_seconds(None, {HEARTBEAT_ENV: "5"}) == 5.0
    assert heartbeat_seconds(2.5, {HEARTBEAT_ENV: "5"}) == 2.5
    for bad in ("0", "-1", "inf", "nan", "soon"):
        with pytest.raises(ValueError, match=HEARTBEAT_ENV):
            heartbeat_seconds(None, {HEARTBEAT_ENV: bad})
    with pytest.raises(ValueError, match="--heartbeat"):
        heartbeat_seconds(0.0, {})


def test_bad_heartbeat_is_a_usage_error(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "frankenstein", "run", "x", "-c", str(tmp_path), "--heartbeat", "-2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "--heartbeat" in p.stderr and "Traceback" not in p.stderr


def test_plain_lines_carry_the_turns_done_and_an_eta_from_the_pace_so_far() -> None:
    out = io.StringIO()
    beat = threading.Event()
    now = [0.0]  # the progress clock, moved by hand; the heartbeat thread itself runs on real time

    class Spy(io.StringIO):
        def write(self, s: str) -> int:
            n = out.write(s)
            if " running for 5.0 s" in s:
                beat.set()
            return n

    with RunProgress(3, heartbeat_s=0.05, stream=Spy(), tty=False, clock=lambda: now[0]) as rp:
        with rp.slot("block 1/2 · served"):
            now[0] = 10.0
        with rp.slot("block 1/2 · candidate") as update:
            update(2, 6)
            now[0] = 15.0
            assert beat.wait(10)
            now[0] = 20.0
    text = out.getvalue().splitlines()
    heartbeat = next(line for line in text if " running for 5.0 s" in line)  # (one at 0.0 s may come first)
    assert heartbeat == "frank run [0:00:15] start 2/3 running for 5.0 s: block 1/2 · candidate, turn 2/6; ETA 15 s"
    text = [line for line in text if " running for " not in line]
    assert text[0] == "frank run [0:00:00] start 1/3 begins: block 1/2 · served"
    assert text[1] == "frank run [0:00:10] start 1/3 ends after 10 s: block 1/2 · served; 2 to go, ETA 20 s"
    assert text[2] == "frank run [0:00:10] start 2/3 begins: block 1/2 · candidate"
    assert text[-2] == "frank run [0:00:20] start 2/3 ends after 10 s: block 1/2 · candidate; 1 to go, ETA 10 s"
    assert text[-1] == "frank run [0:00:20] 2 start(s) in 20 s"


def test_starts_run_elsewhere_get_lines_as_they_come_back_and_a_heartbeat() -> None:
    """``frank run --ray``'s progress (the real cluster run is in test_cluster): lines for blocks sent and
    starts recorded with the ETA, and a heartbeat carrying the driver's status."""
    out = io.StringIO()
    now = [0.0]
    beat = threading.Event()

    class Spy(io.StringIO):
        def write(self, s: str) -> int:
            n = out.write(s)
            if "ETA 4.0 s" in s and "in flight" in s:
                beat.set()
            return n

    def status() -> str:
        return "1/2 starts recorded; in flight: block 1 on a"

    with RunProgress(2, heartbeat_s=0.05, stream=Spy(), tty=False, clock=lambda: now[0]) as rp:
        rp.note("block 1 (2 starts) sent to the cluster")
        with rp.heartbeat(status):
            now[0] = 4.0
            rp.recorded("block 1/1 · served [on a]")
            assert beat.wait(10)
            now[0] = 8.0
            rp.recorded("block 1/1 · candidate [on a]")
    text = out.getvalue().splitlines()
    assert any(line.endswith("1/2 starts recorded; in flight: block 1 on a; ETA 4.0 s") for line in text), text
    text = [line for line in text if "in flight" not in line]
    assert text[0] == "frank run [0:00:00] block 1 (2 starts) sent to the cluster"
    assert text[1] == "frank run [0:00:04] start 1/2 recorded: block 1/1 · served [on a]; 1 to go, ETA 4.0 s"
    assert text[-2] == "frank run [0:00:08] start 2/2 recorded: block 1/1 · candidate [on a]"
    assert text[-1] == "frank run [0:00:08] 2 start(s) in 8.0 s"

    term = io.StringIO()
    with RunProgress(1, stream=term, tty=True) as rp, rp.heartbeat(status):
        rp.note("block 1 runs on a")
        rp.recorded("block 1/1 · served [on a]")
    assert "block 1 runs on a" in term.getvalue() and rp.finished == 1


def test_on_a_terminal_bars_with_eta_and_stdout_left_alone() -> None:
    term = io.StringIO()
    stdout = sys.stdout
    with RunProgress(2, stream=term, tty=True) as rp:
        assert sys.stdout is stdout  # stdout is not a terminal here: results are not drawn into the bars
        for label in ("block 1/1 · served", "block 1/1 · candidate"):
            with rp.slot(label) as update:
                update(3, 6)
    assert "ETA" in term.getvalue() and "frank run [" not in term.getvalue()
    assert rp.finished == 2


def test_run_with_stderr_on_a_terminal_draws_bars_and_keeps_stdout_for_results(tmp_path: Path) -> None:
    """stderr on a pseudo-terminal, stdout a pipe (``frank run ... > results.txt`` at a terminal)."""
    c = make_campaign(tmp_path / "c")
    arm = c.root / "arm.py"
    arm.write_text(SLOW_ARM)
    design = c.root / "slow.toml"
    design.write_text(DESIGN.format(py=sys.executable, arm=arm, secs="0.3"))
    did = register(c, design).design_id
    c.close()
    master, slave = os.openpty()
    drawn: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                return
            if not chunk:
                return
            drawn.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    p = subprocess.run(
        [sys.executable, "-m", "frankenstein", "run", did, "-c", str(c.root)],
        stdout=subprocess.PIPE,
        stderr=slave,
        text=True,
        timeout=120,
    )
    os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    assert p.returncode == 0
    lines = p.stdout.splitlines()
    assert len(lines) == 5 and lines[-1] == f"{did}: 4 starts run, 0 already recorded"
    terminal = b"".join(drawn).decode(errors="replace")
    assert "ETA" in terminal and "starts" in terminal and "frank run [" not in terminal
