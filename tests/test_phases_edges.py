"""Fast edges, measured: readiness is polled from 20 ms doubling to 250 ms, so a server is seen ready
within one poll interval of the moment it listens; a clean stop takes what the engine needs, and one
that ignores SIGTERM is killed at the adapter's grace and no later (recorded as SIGKILL), and
llama-server's grace is a margin over its measured clean stops (vLLM's: tests/test_phases_vllm.py). Real processes: a small
stdlib HTTP server as an ``openai`` engine that writes the moment it starts listening, and the real
llama-server."""

from __future__ import annotations

import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from frankenstein.config import ResolvedRecipe
from frankenstein.design import phases
from frankenstein.design.start import start_engine, stop_engine
from frankenstein.engines import adapter_for
from frankenstein.engines.llamacpp import LlamaCppEngine
from frankenstein.engines.process import READY_POLL_S
from frankenstein.errors import EngineStartError

SERVER = """\
import http.server, signal, sys, time
port, delay, stamp, ignore_term = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
if ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
time.sleep(delay)

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a):
        pass

server = http.server.HTTPServer(("127.0.0.1", port), H)  # bound and listening from here
open(stamp, "w").write(repr(time.time()))
server.serve_forever()
"""


def _engine(tmp_path: Path, delay: float, ignore_term: bool = False) -> tuple[object, Path]:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    stamp = tmp_path / f"listen-{time.time_ns()}"
    recipe = ResolvedRecipe(
        name="edge",
        engine="openai",
        model="",
        args=[],
        env={},
        command=[sys.executable, str(script), "{port}", str(delay), str(stamp), "1" if ignore_term else "0"],
        start_timeout_s=30,
    )
    return adapter_for(recipe, tmp_path / "logs"), stamp


def test_ready_is_seen_within_one_poll_interval(tmp_path: Path) -> None:
    latencies = []
    for delay in (0.0, 0.1, 0.3, 0.6, 1.0, 1.5):
        engine, stamp = _engine(tmp_path, delay)
        with phases.recording() as rec:
            try:
                start_engine(engine)
                seen = time.time()
            finally:
                stop_engine(engine)
        latencies.append(seen - float(stamp.read_text()))
        assert rec.notes["stopped_by"] == "SIGTERM" and rec.seconds["stop"] < 2.0
    print(f"\nready-detect latency (s): {[round(x, 3) for x in latencies]}, median {statistics.median(latencies):.3f}")
    largest = READY_POLL_S[2]
    assert max(latencies) < largest + 0.15  # one poll interval and the poll itself
    assert all(x >= 0 for x in latencies)


GRACE_MARGIN = 2.0
"""The stop grace must be at least this many times the slowest clean stop measured, plus one second."""
KILL_BOUND_S = 0.5
"""An engine that ignores SIGTERM is gone within its grace and this much more (the SIGKILL and the reap)."""


@pytest.mark.engine
def test_llama_server_grace_is_a_margin_over_its_measured_clean_stops(
    tiny_recipe: ResolvedRecipe, tmp_path: Path
) -> None:
    """Five real llama-server starts, each after serving a request: every stop is clean (SIGTERM) and
    the adapter's grace is at least GRACE_MARGIN × the slowest stop + 1 s."""
    stops = []
    for _ in range(5):
        engine = adapter_for(tiny_recipe, tmp_path / "logs")
        with phases.recording() as rec:
            try:
                start_engine(engine)
                body = json.dumps({"prompt": "def f(x):", "n_predict": 8}).encode()
                url = f"http://127.0.0.1:{engine.port}/completion"
                with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=60) as r:
                    assert r.status == 200
            finally:
                stop_engine(engine)
        assert rec.notes["stopped_by"] == "SIGTERM", rec.notes
        stops.append(rec.seconds["stop"])
    grace = LlamaCppEngine.stop_grace_s
    print(f"\nllama-server clean stop (s): {[round(s, 3) for s in stops]}, slowest {max(stops):.3f}, grace {grace}")
    assert grace >= GRACE_MARGIN * max(stops) + 1.0, (grace, stops)


@pytest.mark.parametrize("grace", [0.5, LlamaCppEngine.stop_grace_s])
def test_an_engine_that_ignores_sigterm_is_killed_at_the_grace_and_no_later(tmp_path: Path, grace: float) -> None:
    engine, _ = _engine(tmp_path, 0.0, ignore_term=True)
    engine.stop_grace_s = grace  # type: ignore[attr-defined]
    with phases.recording() as rec:
        try:
            start_engine(engine)
        finally:
            stop_engine(engine)
    took = rec.seconds["stop"]
    print(f"\nignores SIGTERM, grace {grace} s: stopped in {took:.3f} s")
    assert rec.notes["stopped_by"] == "SIGKILL" and rec.notes["stop_grace_s"] == grace
    assert grace <= took < grace + KILL_BOUND_S


def test_a_start_that_dies_before_ready_still_records_its_time(tmp_path: Path) -> None:
    script = tmp_path / "dies.py"
    script.write_text("import sys, time\ntime.sleep(0.3)\nsys.exit(3)\n")
    recipe = ResolvedRecipe(
        name="dies", engine="openai", model="", args=[], env={}, command=[sys.executable, str(script), "{port}"]
    )
    engine = adapter_for(recipe, tmp_path / "logs")
    with phases.recording() as rec, pytest.raises(EngineStartError, match="exited with code 3 during start"):
        try:
            start_engine(engine)
        finally:
            stop_engine(engine)
    assert rec.seconds["ready"] >= 0.3 and rec.seconds["launch"] == 0.0  # the wait for ready, not the spawn
    assert rec.notes["stopped_by"] == "exited"
