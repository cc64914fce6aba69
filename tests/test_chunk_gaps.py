"""Chunk gaps and the peer-shaped latency table end to end.

- A scripted SSE server (a test double standing in for an engine: no real engine can be told to hold an
  event back or send two in one write) shows what the client stamps: one gap per content event after
  the first, the wait before a write carried by its first event, near-zero gaps for events read together,
  and no gap for events without content.
- A real llama-server run of a design through the real CLI: the stored per-turn gaps, their sum against
  e2e − TTFT, the pooled ITL percentiles recomputed here with numpy, and pre_ms/post_ms rows in
  ``frank analyze`` and ``analyze --json``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from frankenstein.campaign import open_campaign
from frankenstein.engines.contract import Reply
from frankenstein.engines.stream import stream_request
from frankenstein.measure.timings import StepTiming

from helpers_campaign import make_campaign, make_workload, write_design
from helpers_cli import cli

HOLD_S = 0.08  # the scripted server's pause before its second write


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class Scripted(BaseHTTPRequestHandler):
    """Writes: role-only event + "a" | pause | "b" "c" in one write | pause | usage + [DONE]."""

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        asked = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if asked.get("stream") else "application/json")
        self.end_headers()
        if not asked.get("stream"):
            self.wfile.write(json.dumps({"choices": [{"index": 0, "message": {"content": "abc"}}]}).encode())
            return

        def delta(text: str | None) -> dict[str, Any]:
            d = {"role": "assistant"} if text is None else {"content": text}
            return {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}

        writes = [
            _event(delta(None)) + _event(delta("a")),  # the role event carries no content: no stamp
            _event(delta("b")) + _event(delta("c")),  # read together: the second gap is near zero
            _event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3}}) + b"data: [DONE]\n\n",
        ]
        for i, w in enumerate(writes):
            if i:
                time.sleep(HOLD_S)  # the stimulus: an engine taking its time, not a wait for the test
            self.wfile.write(w)
            self.wfile.flush()

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def scripted() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    t.join()


def _ask(port: int, stream: bool) -> Reply:
    body = json.dumps({"messages": [{"role": "user", "content": "x"}], "stream": stream}).encode()
    return stream_request(
        "127.0.0.1",
        port,
        "/v1/chat/completions",
        body,
        kind="scripted",
        step_timing=lambda _: StepTiming(),
        timeout_s=10,
    )


def test_gaps_are_stamped_per_content_event_and_coalesced_events_get_near_zero(scripted: int) -> None:
    r = _ask(scripted, stream=True)
    assert r.text == "abc" and r.ttft_ms is not None
    gaps = r.chunk_gaps_ms
    assert gaps is not None and len(gaps) == 2  # three content events; the role and usage events add none
    assert gaps[0] >= HOLD_S * 1000 * 0.9  # "b" waited for the pause
    assert gaps[1] < 5.0  # "c" came in the same read as "b"
    assert r.e2e_ms - r.ttft_ms >= sum(gaps)  # the tail (usage, [DONE]) is outside the gaps
    assert r.e2e_ms - r.ttft_ms - sum(gaps) >= HOLD_S * 1000 * 0.9


def test_a_request_that_is_not_streamed_has_no_gaps(scripted: int) -> None:
    """None, not []: a turn that was not streamed has no gaps, and its row no ``chunk_gaps_ms``."""
    r = _ask(scripted, stream=False)
    assert (r.text, r.ttft_ms, r.chunk_gaps_ms) == ("abc", None, None)


# ---------------------------------------------------------------- a real llama-server run


TAIL_MS = 25.0  # bound on the stream's tail read (timings event, [DONE], close); measured 0.1-0.5 ms on a loaded 2-core machine


@pytest.mark.engine
def test_stored_gaps_pooled_itl_and_pre_post_rows_from_a_real_run(
    llama_server_bin: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "workloads" / "w.jsonl", turns=4, tokens=12)
    c.close()
    d = write_design(tmp_path / "c" / "d.toml", blocks=5)
    d.write_text(
        d.read_text().replace(
            'secondary = ["tokens_per_step"]', 'secondary = ["tokens_per_step", "post_ms", "itl_ms", "tpot_ms"]'
        )
    )
    code, out, err = cli(capsys, "register", str(d), "-c", str(c.root))
    assert code == 0, err
    design_id = re.match(r"registered (\S+) ", out).group(1)  # type: ignore[union-attr]
    code, out, err = cli(capsys, "run", design_id, "-c", str(c.root))
    assert code == 0, (out, err)

    pooled: dict[str, list[float]] = {}
    tpot: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    with open_campaign(c.root) as camp:
        starts = camp.store.starts_of(design_id)
        assert len(starts) == 10 and all(s.ok for s in starts)
        for s in starts:
            measured = [t for t in camp.store.turns_of(s.id) if not t["warmup"]]
            start_gaps = [g for t in measured for g in t["chunk_gaps_ms"]]
            # the start-level forms, registrable: the mean gap, and TPOT as a ratio of sums
            assert s.metrics["itl_ms"] == pytest.approx(sum(start_gaps) / len(start_gaps), rel=1e-9)
            client = sum(t["e2e_ms"] - t["ttft_ms"] for t in measured)
            assert s.metrics["tpot_ms"] == pytest.approx(client / sum(t["generated_tokens"] - 1 for t in measured))
            for t in camp.store.turns_of(s.id):
                gaps = t["chunk_gaps_ms"]
                n = t["generated_tokens"]
                assert n == 12 and 0 < len(gaps) <= n - 1, (len(gaps), n)
                assert all(isinstance(g, float) and g >= 0 and round(g, 3) == g for g in gaps)
                client_decode = t["e2e_ms"] - t["ttft_ms"]
                # within the read tail: no more than e2e − TTFT (plus rounding), and not far less
                assert sum(gaps) <= client_decode + len(gaps) * 0.0005
                assert client_decode - sum(gaps) < TAIL_MS, (client_decode, sum(gaps))
                if t["warmup"]:
                    continue
                pooled.setdefault(s.arm, []).extend(gaps)
                tpot.setdefault(s.arm, []).append(client_decode / (n - 1))
                counts[s.arm] = counts.get(s.arm, 0) + 1

    code, out, err = cli(capsys, "analyze", design_id, "-c", str(c.root), "--json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["version"] == 2
    for arm in ("served", "candidate"):
        per = doc["percentiles"][arm]
        assert set(per) == {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "pre_ms", "post_ms"}
        assert per["itl_ms"]["n"] == len(pooled[arm]) > counts[arm] == 15  # gaps pooled, not turns
        for name, q in (("p50", 50), ("p90", 90), ("p99", 99)):
            assert per["itl_ms"][name] == pytest.approx(float(np.percentile(pooled[arm], q, method="linear")), rel=1e-9)
            assert per["tpot_ms"][name] == pytest.approx(float(np.percentile(tpot[arm], q, method="linear")), rel=1e-9)
        assert per["pre_ms"]["n"] == per["post_ms"]["n"] == counts[arm]
        assert per["pre_ms"]["p50"] > 0
        # the pooled ITL is not the per-turn mean under another name
        assert per["itl_ms"]["n"] != per["tpot_ms"]["n"]

    for metric in ("itl_ms", "tpot_ms"):  # registered as secondary: a ratio over every block
        assert doc["secondary"][metric]["blocks"] == 5 and doc["secondary"][metric]["geomean_ratio"] > 0
    code, text, err = cli(capsys, "analyze", design_id, "-c", str(c.root))
    assert code == 0, err
    assert re.search(r"itl_ms: geometric-mean ratio \d", text) and re.search(r"tpot_ms: geometric-mean ratio \d", text)
    assert "n: turns, pooled chunk gaps for itl_ms; post_ms can be negative):" in text
    for arm in ("served", "candidate"):
        for metric in ("pre_ms", "post_ms"):
            s = doc["percentiles"][arm][metric]
            p50 = re.escape(f"{s['p50']:.4g}")
            assert re.search(rf"^\s+{arm}\s+{metric}\s+{s['n']}\s+{p50}\s", text, re.M), text
