"""The one decoder of an engine's answers: a JSON response or an SSE stream, in any of the shapes frank
records and replays (OpenAI chat and completions, llama.cpp ``/completion``), into a
:class:`~frankenstein.workload.trace.RecordedOutput` (text, reasoning, token ids, tool calls, finish reason,
token counts) and the engine's own timings.

Shared by replay (:mod:`.stream`), the recording proxy (:mod:`frankenstein.workload.record`), the importers
and the agent loop:

    output_from_response("/v1/chat/completions", answer)   -> RecordedOutput
    asm = StreamAssembler("/v1/completions"); asm.feed(chunk) ...; asm.output()
    asm.event(data) -> True when the event carried output (text, token ids or a tool-call delta)

Memory stays bounded: only the partial last line of a stream, text pieces, token ids and tool-call
fragments are kept, never the raw chunks.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from frankenstein.engines.sse import SseParser
from frankenstein.workload.trace import CHAT, RecordedOutput

_ALIASES = {
    "/v1/chat/completions": "/v1/chat/completions",
    "/chat/completions": "/v1/chat/completions",
    "/v1/completions": "/v1/completions",
    "/completions": "/v1/completions",
    "/completion": "/completion",
}
_LLAMA_STOP = {"eos": "stop", "word": "stop", "limit": "length"}


def canonical_endpoint(path: str) -> str | None:
    """The recorded endpoint for a request path (query ignored), or None for pass-through paths."""
    return _ALIASES.get(urlsplit(path).path.rstrip("/") or "/")


# ---------------------------------------------------------------- pure: answers → RecordedOutput


def _usage(resp: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(prompt, completion) tokens: OpenAI ``usage``, llama.cpp ``/completion`` counts, else
    llama.cpp ``timings`` (a streamed chat without ``stream_options.include_usage`` has only those)."""
    usage = resp.get("usage") or {}
    prompt = usage.get("prompt_tokens", resp.get("tokens_evaluated"))
    completion = usage.get("completion_tokens", resp.get("tokens_predicted"))
    return _from_timings(prompt, completion, resp.get("timings") or {})


def _from_timings(
    prompt: int | None, completion: int | None, timings: Mapping[str, Any]
) -> tuple[int | None, int | None]:
    if prompt is None and isinstance(timings.get("prompt_n"), int):
        prompt = timings["prompt_n"] + int(timings.get("cache_n") or 0)
    if completion is None and isinstance(timings.get("predicted_n"), int):
        completion = timings["predicted_n"]
    return prompt, completion


def server_timings(resp: Mapping[str, Any]) -> dict[str, Any]:
    """The engine's own timings: llama.cpp ``timings``, vLLM ``metrics``, SGLang ``meta_info``."""
    for key in ("timings", "metrics", "meta_info"):
        value = resp.get(key)
        if isinstance(value, dict) and value:
            return {k: v for k, v in value.items() if isinstance(v, (int, float, str, bool)) or v is None}
    return {}


def _tool_calls(raw: Any) -> list[dict[str, Any]]:
    return [
        {
            "id": c.get("id") or "",
            "type": c.get("type") or "function",
            "name": (c.get("function") or {}).get("name") or "",
            "arguments": (c.get("function") or {}).get("arguments") or "",
        }
        for c in raw or []
    ]


def output_from_response(endpoint: str, resp: Mapping[str, Any]) -> RecordedOutput:
    """Choice 0 of a non-streamed answer (chat, completions, or llama.cpp ``/completion``)."""
    return RecordedOutput(**output_fields(endpoint, resp))


def output_fields(endpoint: str, resp: Mapping[str, Any]) -> dict[str, Any]:
    """The :class:`RecordedOutput` fields of choice 0 of a non-streamed answer, as the answer gives them (not
    yet checked; tool calls as dicts): ``RecordedOutput(**output_fields(...))`` is :func:`output_from_response`."""
    prompt, completion = _usage(resp)
    if endpoint == "/completion" or "choices" not in resp:  # llama.cpp's shape, or a native one (SGLang /generate)
        stop = resp.get("stop_type")
        text = resp.get("content") or resp.get("text") or ""
        return _fields(text, "", resp.get("tokens") or None, [], _LLAMA_STOP.get(str(stop), stop), prompt, completion)
    choice = (resp.get("choices") or [{}])[0]
    ids, finish = choice.get("token_ids") or None, choice.get("finish_reason")
    if endpoint == CHAT:
        msg = choice.get("message") or {}
        text, reasoning, calls = msg.get("content") or "", msg.get("reasoning_content") or "", msg.get("tool_calls")
        return _fields(text, reasoning, ids, _tool_calls(calls), finish, prompt, completion)
    return _fields(choice.get("text") or "", "", ids, [], finish, prompt, completion)


def _fields(
    text: Any, reasoning: Any, ids: Any, calls: list[dict[str, Any]], finish: Any, prompt: Any, completion: Any
) -> dict[str, Any]:
    return {
        "text": text,
        "reasoning": reasoning,
        "token_ids": ids,
        "tool_calls": calls,
        "finish_reason": finish,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
    }


@dataclass
class StreamAssembler:
    """Builds a :class:`RecordedOutput` from SSE bytes fed as they arrive.

    Keeps only the partial last line, the text/reasoning pieces, token ids, tool-call fragments,
    the finish reason, usage and timings — never the raw chunks.
    """

    endpoint: str
    _parser: SseParser = field(default_factory=SseParser)
    _text: list[str] = field(default_factory=list)
    _reasoning: list[str] = field(default_factory=list)
    _ids: list[int] = field(default_factory=list)
    _calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)
    done: bool = False
    error: str | None = None
    has_output: bool = False
    _tool_deltas: int = 0

    @property
    def buffered(self) -> int:
        """Bytes of the stream held (the partial last line)."""
        return self._parser.pending

    def feed(self, data: bytes) -> None:
        for event in self._parser.feed(data):
            if event.done:
                self.done = True
            elif event.malformed is not None:
                self.error = f"malformed stream chunk: {event.malformed!r}"
            elif event.data is not None:
                self._chunk(event.data)

    def event(self, data: dict[str, Any]) -> bool:
        """Take one parsed event; True when it carried output (text, token ids or a tool-call delta; reasoning
        alone does not count: replay times the first output and the gaps between outputs by it)."""
        before = (len(self._text), len(self._ids), self._tool_deltas)
        self._chunk(data)
        return (len(self._text), len(self._ids), self._tool_deltas) != before

    def _chunk(self, chunk: dict[str, Any]) -> None:
        if "error" in chunk:
            self.error = json.dumps(chunk["error"])[:300]
            return
        if chunk.get("usage"):
            self.usage = {
                "prompt_tokens": chunk["usage"].get("prompt_tokens"),
                "completion_tokens": chunk["usage"].get("completion_tokens"),
            }
        if timings := server_timings(chunk):
            self.timings = timings
        if self.endpoint == "/completion" or "choices" not in chunk:  # llama.cpp's, or a native shape
            self._llama_chunk(chunk)
        else:
            for choice in chunk.get("choices") or []:
                if choice.get("index", 0) == 0:
                    self._choice(choice)

    def _llama_chunk(self, chunk: dict[str, Any]) -> None:
        self._add_text(chunk.get("content") or chunk.get("text") or "", self._text)
        self._ids.extend(chunk.get("tokens") or [])
        if chunk.get("stop"):
            stop = chunk.get("stop_type")
            self.finish_reason = _LLAMA_STOP.get(str(stop), stop) or "stop"
            self.usage = {
                "prompt_tokens": chunk.get("tokens_evaluated"),
                "completion_tokens": chunk.get("tokens_predicted"),
            }
            self.done = True

    def _choice(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta") or {}
        text = delta.get("content") or choice.get("text") or (choice.get("message") or {}).get("content")
        self._add_text(text or "", self._text)
        self._add_text(delta.get("reasoning_content") or "", self._reasoning)
        self._ids.extend(choice.get("token_ids") or delta.get("token_ids") or [])
        for tc in delta.get("tool_calls") or []:
            self._tool_delta(tc)
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def _add_text(self, piece: str, into: list[str]) -> None:
        if piece:
            into.append(piece)
            self.has_output = True

    def _tool_delta(self, tc: dict[str, Any]) -> None:
        self.has_output = True
        self._tool_deltas += 1
        slot = self._calls.setdefault(int(tc.get("index", 0)), {"id": "", "type": "function", "name": "", "args": []})
        slot["id"] = tc.get("id") or slot["id"]
        slot["type"] = tc.get("type") or slot["type"]
        fn = tc.get("function") or {}
        slot["name"] += fn.get("name") or ""
        if fn.get("arguments"):
            slot["args"].append(fn["arguments"])

    @property
    def finished(self) -> bool:
        """The upstream said it finished (a finish reason, llama.cpp ``stop``) and sent no error."""
        return self.error is None and self.finish_reason is not None

    def output(self) -> RecordedOutput:
        return RecordedOutput(**self.fields())

    def fields(self) -> dict[str, Any]:
        """The :class:`RecordedOutput` fields of what was fed, not yet checked (tool calls as dicts)."""
        calls = [
            {"id": c["id"], "type": c["type"], "name": c["name"], "arguments": "".join(c["args"])}
            for _, c in sorted(self._calls.items())
        ]
        prompt, completion = _from_timings(
            self.usage.get("prompt_tokens"), self.usage.get("completion_tokens"), self.timings
        )
        if completion is None and self._ids:
            completion = len(self._ids)
        text, reasoning, ids = "".join(self._text), "".join(self._reasoning), list(self._ids) or None
        return _fields(text, reasoning, ids, calls, self.finish_reason, prompt, completion)
