"""One request, streamed or not, with client-side TTFT, the gaps between streamed chunks, and end-to-end time.

Memory stays bounded for long streams: only text, token ids, tool-call deltas (decoded by the one decoder,
:mod:`.response`) and one float per content-bearing event are kept, never the raw chunks. The server's own
numbers (``timings``, ``usage``, ``meta_info``) come from the last event that carries them and are read by
the adapter's ``step_timing``. Transport failures (``OSError``, including a timeout, and
``http.client.HTTPException``) are left to the caller.

Chunk gaps (``Reply.chunk_gaps_ms``): every content-bearing event (text, token ids or a tool-call
delta) after the first is timestamped with ``perf_counter`` as the parser yields it, and the gap to
the previous content-bearing event is kept in ms — what vLLM bench keeps as a request's ``itl`` list
(``backend_request_func.py`` / ``endpoint_request_func.py``: ``output.itl.append(timestamp -
most_recent_timestamp)``) and AIPerf calls ``inter_chunk_latency``. The timestamp is taken when the
event is parsed, not when its bytes left the server: several events that arrive in one read get
near-zero gaps (as in vLLM bench, whose stamps are also taken as the client reads), and the gap
before them carries their wait. A stream of n content events has n − 1 gaps; the gaps sum to the time
from the first content event to the last, i.e. e2e − TTFT less the read of the stream's tail (the
usage/timings event and ``[DONE]``). A non-streamed request has none (``None``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from frankenstein.engines.contract import Reply
from frankenstein.engines.http import header_dict, open_request
from frankenstein.engines.response import StreamAssembler, canonical_endpoint, output_from_response
from frankenstein.engines.sse import SseParser
from frankenstein.errors import EngineRequestError
from frankenstein.measure.timings import StepTiming
from frankenstein.workload.trace import RecordedOutput

# Keys of a streamed event that carry the server's own numbers: llama.cpp ``timings``, OpenAI ``usage``,
# vLLM per-request ``metrics``, SGLang ``meta_info`` / ``sglext``.
SERVER_KEYS = ("timings", "usage", "meta_info", "metrics", "sglext")
READ_SIZE = 65536


class _Collected:
    def __init__(self, endpoint: str) -> None:
        self.asm = StreamAssembler(endpoint)  # the one decoder (:mod:`.response`)
        self.last: dict[str, Any] = {}
        self.ttft: float | None = None
        self.gaps: list[float] = []  # ms between successive content-bearing events
        self.last_content: float | None = None  # perf_counter of the previous content-bearing event


def _calls(output: RecordedOutput) -> list[dict[str, Any]]:
    return [
        {"id": c.id or None, "type": c.type, "function": {"name": c.name, "arguments": c.arguments}}
        for c in output.tool_calls
    ]


def stream_request(
    host: str,
    port: int,
    path: str,
    body: bytes,
    *,
    kind: str,
    step_timing: Callable[[dict[str, Any]], StepTiming],
    timeout_s: float,
    turn_id: str | None = None,
) -> Reply:
    """POST exact bytes over a fresh loopback connection (the stdlib client: a fraction of a
    millisecond per request, so the driver measures the engine and not itself). ``timeout_s``
    bounds each wait for bytes from the engine."""
    streamed = bool(json.loads(body).get("stream"))
    t0 = time.perf_counter()
    got = _Collected(canonical_endpoint(path) or path)
    conn, r = open_request(host, port, "POST", path, body, timeout_s=timeout_s)
    headers = header_dict(r)
    try:
        if r.status >= 400:
            detail = r.read().decode(errors="replace")
            raise EngineRequestError(
                f"{kind} answered {r.status} to {path}: {detail[:300]}", turn_id=turn_id, status=r.status
            )
        if not streamed:
            got.last = json.loads(r.read())
            output = output_from_response(got.asm.endpoint, got.last)
        else:
            _read_stream(r, got, t0, timeout_s, kind, turn_id)
            output = got.asm.output()
    finally:
        conn.close()
    e2e = (time.perf_counter() - t0) * 1000.0
    return Reply(
        body=got.last,
        text=output.text,
        token_ids=output.token_ids or None,
        finish_reason=output.finish_reason,
        timing=step_timing(got.last),
        ttft_ms=got.ttft,
        e2e_ms=e2e,
        tool_calls=_calls(output),
        chunk_gaps_ms=got.gaps if streamed else None,
        headers=headers,
    )


def _read_stream(r: Any, got: _Collected, t0: float, timeout_s: float, kind: str, turn_id: str | None) -> None:
    parser = SseParser()
    while chunk := r.read1(READ_SIZE):
        if time.perf_counter() - t0 > timeout_s:  # a stream that trickles past the whole bound
            raise TimeoutError(f"stream still running after {timeout_s:.1f} s")
        for ev in parser.feed(chunk):
            if ev.done:
                return
            if ev.malformed is not None:
                raise EngineRequestError(f"{kind} sent a malformed stream event: {ev.malformed!r}", turn_id=turn_id)
            event = ev.data or {}
            if "error" in event:
                raise EngineRequestError(f"{kind} stream error: {event['error']}", turn_id=turn_id)
            if got.asm.event(event):
                _stamp(got, t0)
            if any(k in event for k in SERVER_KEYS):
                got.last = {**got.last, **{k: v for k, v in event.items() if k in (*SERVER_KEYS, "id", "model")}}


def _stamp(got: _Collected, t0: float) -> None:
    """Time one content-bearing event: the first sets TTFT, every later one adds its gap (module docstring)."""
    now = time.perf_counter()
    if got.last_content is None:
        got.ttft = (now - t0) * 1000.0
    else:
        got.gaps.append((now - got.last_content) * 1000.0)
    got.last_content = now
