"""One request, streamed or not, with client-side TTFT and end-to-end time.

Memory stays bounded for long streams: only text, token ids and tool-call deltas are kept, never
the raw chunks. The server's own numbers (``timings``, ``usage``, ``meta_info``) come from the last
event that carries them and are read by the adapter's ``step_timing``. Transport failures
(``OSError``, including a timeout, and ``http.client.HTTPException``) are left to the caller.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from frankenstein.engines.contract import Reply
from frankenstein.engines.http import open_request
from frankenstein.engines.sse import SseParser
from frankenstein.errors import EngineRequestError
from frankenstein.measure.timings import StepTiming

# Keys of a streamed event that carry the server's own numbers: llama.cpp ``timings``, OpenAI ``usage``,
# vLLM per-request ``metrics``, SGLang ``meta_info`` / ``sglext``.
SERVER_KEYS = ("timings", "usage", "meta_info", "metrics", "sglext")
READ_SIZE = 65536


def _delta(event: dict[str, Any]) -> tuple[str, list[int], list[dict[str, Any]], str | None]:
    """Text, token ids, tool-call deltas and finish reason carried by one event of any supported shape."""
    if "choices" in event and event["choices"]:
        ch = event["choices"][0]
        d = ch.get("delta") or {}
        text = d.get("content") or ch.get("text") or (ch.get("message") or {}).get("content") or ""
        calls = d.get("tool_calls") or (ch.get("message") or {}).get("tool_calls") or []
        ids = ch.get("token_ids") or []
        return text, list(ids), list(calls), ch.get("finish_reason")
    text = event.get("content") or event.get("text") or ""
    ids = event.get("tokens") or []
    stop = event.get("stop_type") if event.get("stop") else None
    return text, list(ids) if isinstance(ids, list) else [], [], stop


def _merge_calls(acc: list[dict[str, Any]], deltas: list[dict[str, Any]]) -> None:
    for d in deltas:
        i = d.get("index", len(acc))
        while len(acc) <= i:
            acc.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        c = acc[i]
        c["id"] = d.get("id") or c["id"]
        fn = d.get("function") or {}
        c["function"]["name"] += fn.get("name") or ""
        c["function"]["arguments"] += fn.get("arguments") or ""


class _Collected:
    def __init__(self) -> None:
        self.text: list[str] = []
        self.ids: list[int] = []
        self.calls: list[dict[str, Any]] = []
        self.finish: str | None = None
        self.last: dict[str, Any] = {}
        self.ttft: float | None = None


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
    got = _Collected()
    conn, r = open_request(host, port, "POST", path, body, timeout_s=timeout_s)
    try:
        if r.status >= 400:
            detail = r.read().decode(errors="replace")
            raise EngineRequestError(
                f"{kind} answered {r.status} to {path}: {detail[:300]}", turn_id=turn_id, status=r.status
            )
        if not streamed:
            got.last = json.loads(r.read())
            t, i, c, got.finish = _delta(got.last)
            got.text.append(t)
            got.ids.extend(i)
            got.calls.extend(c)
        else:
            _read_stream(r, got, t0, timeout_s, kind, turn_id)
    finally:
        conn.close()
    e2e = (time.perf_counter() - t0) * 1000.0
    return Reply(
        body=got.last,
        text="".join(got.text),
        token_ids=got.ids or None,
        finish_reason=got.finish,
        timing=step_timing(got.last),
        ttft_ms=got.ttft,
        e2e_ms=e2e,
        tool_calls=got.calls,
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
            t, i, c, f = _delta(event)
            if (t or i or c) and got.ttft is None:
                got.ttft = (time.perf_counter() - t0) * 1000.0
            got.text.append(t)
            got.ids.extend(i)
            _merge_calls(got.calls, c)
            got.finish = f or got.finish
            if any(k in event for k in SERVER_KEYS):
                got.last = {**got.last, **{k: v for k, v in event.items() if k in (*SERVER_KEYS, "id", "model")}}
