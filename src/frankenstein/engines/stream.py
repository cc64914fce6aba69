"""One request, streamed or not, with client-side TTFT and end-to-end time.

Memory stays bounded for long streams: only text, token ids and tool-call deltas are kept, never
the raw chunks. The server's own numbers (``timings``, ``usage``, ``meta_info``) come from the last
event that carries them and are read by the adapter's ``step_timing``.
"""

from __future__ import annotations

import http.client
import json
import time
from typing import TYPE_CHECKING, Any

from frankenstein.errors import EngineRequestError

if TYPE_CHECKING:
    from frankenstein.engines.base import Engine, Reply


# Keys of a streamed event that carry the server's own numbers: llama.cpp ``timings``, OpenAI ``usage``,
# vLLM per-request ``metrics``, SGLang ``meta_info`` / ``sglext``.
SERVER_KEYS = ("timings", "usage", "meta_info", "metrics", "sglext")


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


def _lines(resp: http.client.HTTPResponse):  # type: ignore[no-untyped-def]
    """Lines of a (possibly chunked) streamed body, decoded, without line ends."""
    while True:
        raw = resp.readline()
        if not raw:
            return
        yield raw.decode("utf-8").rstrip("\r\n")


def stream_request(engine: Engine, path: str, body: bytes, *, turn_id: str | None = None) -> Reply:
    """POST exact bytes over a fresh loopback connection (the stdlib client: a fraction of a
    millisecond per request, so the driver measures the engine and not itself)."""
    from frankenstein.engines.base import Reply

    streamed = bool(json.loads(body).get("stream"))
    engine._client()  # raises if the engine is not running
    conn = http.client.HTTPConnection(engine.host, engine.port, timeout=600)
    t0 = time.perf_counter()
    ttft: float | None = None
    text: list[str] = []
    ids: list[int] = []
    calls: list[dict[str, Any]] = []
    finish: str | None = None
    last: dict[str, Any] = {}
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json", "Connection": "close"})
        r = conn.getresponse()
        if r.status >= 400:
            detail = r.read().decode(errors="replace")
            raise EngineRequestError(
                f"{engine.kind} answered {r.status} to {path}: {detail[:300]}", turn_id=turn_id, status=r.status
            )
        if not streamed:
            last = json.loads(r.read())
            t, i, c, finish = _delta(last)
            text.append(t), ids.extend(i), calls.extend(c)
        else:
            for line in _lines(r):
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                event = json.loads(data)
                if "error" in event:
                    raise EngineRequestError(f"{engine.kind} stream error: {event['error']}", turn_id=turn_id)
                t, i, c, f = _delta(event)
                if (t or i or c) and ttft is None:
                    ttft = (time.perf_counter() - t0) * 1000.0
                text.append(t), ids.extend(i), _merge_calls(calls, c)
                finish = f or finish
                if any(k in event for k in SERVER_KEYS):
                    last = {**last, **{k: v for k, v in event.items() if k in (*SERVER_KEYS, "id", "model")}}
    except (OSError, http.client.HTTPException) as exc:
        raise engine._died(exc) from exc
    finally:
        conn.close()
    e2e = (time.perf_counter() - t0) * 1000.0
    return Reply(
        body=last, text="".join(text), token_ids=ids or None, finish_reason=finish,
        timing=engine.step_timing(last), ttft_ms=ttft, e2e_ms=e2e, tool_calls=calls,
    )
