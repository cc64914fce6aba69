"""Importers: turn traces recorded elsewhere into frank traces (``frank workload import``).

- ``openai``: JSONL of request/response pairs ``{"request": {...}, "response": {...}}``, or the Batch
  API's files — input lines ``{"custom_id", "method", "url", "body"}`` joined by ``custom_id`` with
  output lines ``{"custom_id", "response": {"status_code", "body"}, "error"}`` (give both files, in
  any order, or one file holding both). Failed batch requests are skipped and counted.
- ``vllm``: ``vllm bench serve --dataset-name custom`` JSONL: ``{"prompt": str, "output_tokens": int}``
  (``output_tokens`` optional there when ``--custom-output-len`` is given; here ``--output-len``).
  vLLM applies the chat template to the prompt as one user message unless
  ``--skip-chat-template``, so the default endpoint is chat with one user message; ``completions``
  sends the raw prompt. There is no recorded text: the output holds only the length to generate.
- ``sharegpt``: a JSON list (or JSONL) of ``{"id", "conversations": [{"from", "value"}]}``; turn k's
  request is every message before the k-th assistant reply, its recorded output that reply.

Imported bodies hold no sampling settings beyond ``max_tokens`` where known; replay forces its own.
Every error names the file and the line (JSONL) or the conversation index (JSON list) and field.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from frankenstein.errors import TraceError
from frankenstein.engines.response import output_from_response, server_timings
from frankenstein.workload.trace import (
    CHAT,
    RecordedOutput,
    RecordedTimings,
    Turn,
    derive_session_id,
    make_turn_id,
    redact_request,
)

Source = Literal["openai", "vllm", "sharegpt"]
_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "model": "assistant",
    "system": "system",
    "tool": "tool",
    "observation": "tool",
    "function_response": "tool",
}


class ImportResult:
    """Turns built by an importer and how many input records were skipped (with why)."""

    def __init__(self, turns: list[Turn], skipped: list[str]) -> None:
        self.turns = turns
        self.skipped = skipped


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        lines = path.read_bytes().split(b"\n")
    except FileNotFoundError as exc:
        raise TraceError("file not found", path=path) from exc
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise TraceError(f"not valid JSON ({exc})", path=path, field=f"line {lineno}") from exc
        if not isinstance(obj, dict):
            raise TraceError(f"expected a JSON object, got {type(obj).__name__}", path=path, field=f"line {lineno}")
        yield lineno, obj


class _Numberer:
    """Gives each session its next turn index, in input order."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def turn(
        self,
        where: tuple[Path, str],
        session_id: str,
        endpoint: str,
        request: dict[str, Any],
        output: RecordedOutput,
        source: str,
        timings: RecordedTimings | None = None,
    ) -> Turn:
        index = self._next.get(session_id, 0)
        clean, redacted = redact_request(request)
        try:
            turn = Turn(
                turn_id=make_turn_id(session_id, index),
                session_id=session_id,
                turn_index=index,
                endpoint=endpoint,  # type: ignore[arg-type]
                request=clean,
                output=output,
                timings=timings or RecordedTimings(),
                source=source,
                redacted=redacted or None,
            )
        except ValidationError as exc:
            err = exc.errors()[0]
            field = ".".join(str(p) for p in err["loc"])
            raise TraceError(
                err["msg"].removeprefix("Value error, "), path=where[0], field=f"{where[1]}: {field}"
            ) from exc
        self._next[session_id] = index + 1
        return turn


# ---------------------------------------------------------------- OpenAI


def _endpoint_for(body: dict[str, Any], url: str | None) -> str:
    if url:
        path = "/" + url.split("://", 1)[-1].split("/", 1)[-1] if "://" in url else url
        if path.rstrip("/") in ("/v1/chat/completions", "/chat/completions"):
            return CHAT
        if path.rstrip("/") in ("/v1/completions", "/completions"):
            return "/v1/completions"
    return CHAT if "messages" in body else "/v1/completions"


def import_openai(paths: Sequence[str | Path]) -> ImportResult:
    """Pairs and Batch API files (see the module docstring)."""
    pairs: list[tuple[tuple[Path, str], dict[str, Any], dict[str, Any], str | None]] = []
    batch_in: dict[str, tuple[tuple[Path, str], dict[str, Any], str | None]] = {}
    batch_out: dict[str, tuple[tuple[Path, str], dict[str, Any]]] = {}
    for path in map(Path, paths):
        for lineno, obj in _jsonl(path):
            where = (path, f"line {lineno}")
            _sort_openai_line(obj, where, pairs, batch_in, batch_out)
    numberer, turns, skipped = _Numberer(), [], []
    for where, request, response, url in pairs:
        turns.append(_openai_turn(numberer, where, request, response, url))
    for cid, (where, obj) in batch_out.items():
        if cid not in batch_in:
            skipped.append(f"{where[0]}: {where[1]}: custom_id {cid!r} has no request line")
            continue
        resp = obj.get("response") or {}
        if obj.get("error") or resp.get("status_code") != 200:
            skipped.append(f"{where[0]}: {where[1]}: custom_id {cid!r} failed (status {resp.get('status_code')})")
            continue
        in_where, body, url = batch_in[cid]
        turns.append(_openai_turn(numberer, in_where, body, resp.get("body") or {}, url))
    skipped += [
        f"{w[0]}: {w[1]}: custom_id {cid!r} has no response line"
        for cid, (w, _, _) in batch_in.items()
        if cid not in batch_out
    ]
    return ImportResult(turns, skipped)


def _sort_openai_line(
    obj: dict[str, Any], where: tuple[Path, str], pairs: list[Any], batch_in: dict[str, Any], batch_out: dict[str, Any]
) -> None:
    if "request" in obj:
        if not isinstance(obj["request"], dict) or not isinstance(obj.get("response"), dict):
            raise TraceError(
                "a pair needs 'request' and 'response' objects", path=where[0], field=f"{where[1]}: response"
            )
        pairs.append((where, obj["request"], obj["response"], None))
    elif "custom_id" in obj and "body" in obj:
        batch_in[str(obj["custom_id"])] = (where, obj["body"], obj.get("url"))
    elif "custom_id" in obj and ("response" in obj or "error" in obj):
        batch_out[str(obj["custom_id"])] = (where, obj)
    else:
        raise TraceError(
            "not an OpenAI request/response pair nor a Batch API line (expected 'request' + "
            "'response', or 'custom_id' + 'body'/'response')",
            path=where[0],
            field=where[1],
        )


def _openai_turn(
    numberer: _Numberer, where: tuple[Path, str], request: dict[str, Any], response: dict[str, Any], url: str | None
) -> Turn:
    endpoint = _endpoint_for(request, url)
    meta = request.get("metadata")
    metadata: dict[str, Any] = meta if isinstance(meta, dict) else {}
    session = str(metadata.get("session_id") or derive_session_id(endpoint, request))
    output = output_from_response(endpoint, response)
    timings = RecordedTimings(server=server_timings(response))
    return numberer.turn(where, session, endpoint, request, output, "import:openai", timings)


# ---------------------------------------------------------------- vLLM custom dataset


def import_vllm(
    path: str | Path,
    *,
    output_len: int | None = None,
    endpoint: Literal["chat", "completions"] = "chat",
    model: str | None = None,
) -> ImportResult:
    """Each line is its own one-turn session ``line-N``; ``output_len`` overrides ``output_tokens``."""
    path, numberer, turns = Path(path), _Numberer(), []
    for lineno, obj in _jsonl(path):
        where = (path, f"line {lineno}")
        prompt, n = _vllm_fields(obj, where, output_len)
        body: dict[str, Any] = {"model": model} if model else {}
        if endpoint == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        body["max_tokens"] = n
        output = RecordedOutput(finish_reason="length", completion_tokens=n)
        ep = CHAT if endpoint == "chat" else "/v1/completions"
        turns.append(numberer.turn(where, f"line-{lineno}", ep, body, output, "import:vllm"))
    return ImportResult(turns, [])


def _vllm_fields(obj: dict[str, Any], where: tuple[Path, str], output_len: int | None) -> tuple[str, int]:
    prompt = obj.get("prompt")
    if not isinstance(prompt, str):
        raise TraceError("missing or not a string", path=where[0], field=f"{where[1]}: prompt")
    raw = output_len if output_len is not None else obj.get("output_tokens")
    if raw is None:
        raise TraceError("missing (or give --output-len N)", path=where[0], field=f"{where[1]}: output_tokens")
    try:
        n = int(raw)
    except (TypeError, ValueError) as exc:
        raise TraceError(f"not an integer: {raw!r}", path=where[0], field=f"{where[1]}: output_tokens") from exc
    if n < 1:
        raise TraceError(f"must be at least 1, got {n}", path=where[0], field=f"{where[1]}: output_tokens")
    return prompt, n


# ---------------------------------------------------------------- ShareGPT


def _sharegpt_records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise TraceError("file not found", path=path) from exc
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(f"not valid JSON ({exc})", path=path) from exc
        for i, rec in enumerate(data):
            if not isinstance(rec, dict):
                raise TraceError("expected an object", path=path, field=f"conversation {i}")
            yield f"conversation {i}", rec
    else:
        for lineno, rec in _jsonl(path):
            yield f"line {lineno}", rec


def import_sharegpt(path: str | Path, *, model: str | None = None) -> ImportResult:
    """One session per conversation (its ``id``, else its position); turns are the assistant replies
    that follow at least one non-assistant message."""
    path, numberer = Path(path), _Numberer()
    turns: list[Turn] = []
    skipped: list[str] = []
    for i, (where_s, rec) in enumerate(_sharegpt_records(path)):
        where = (path, where_s)
        messages = _sharegpt_messages(rec, where)
        session = str(rec.get("id") or f"conv-{i}")
        history: list[dict[str, str]] = []
        before = len(turns)
        for msg in messages:
            if msg["role"] == "assistant" and any(m["role"] in ("user", "tool") for m in history):
                body: dict[str, Any] = {"model": model} if model else {}
                body["messages"] = [dict(m) for m in history]
                output = RecordedOutput(text=msg["content"], finish_reason="stop")
                turns.append(numberer.turn(where, session, CHAT, body, output, "import:sharegpt"))
            history.append(msg)
        if len(turns) == before:
            skipped.append(f"{path}: {where_s}: no assistant reply after a user message")
    return ImportResult(turns, skipped)


def _sharegpt_messages(rec: dict[str, Any], where: tuple[Path, str]) -> list[dict[str, str]]:
    conv = rec.get("conversations", rec.get("conversation"))
    if not isinstance(conv, list):
        raise TraceError("missing or not a list", path=where[0], field=f"{where[1]}: conversations")
    out = []
    for j, m in enumerate(conv):
        field = f"{where[1]}: conversations.{j}"
        if not isinstance(m, dict) or not isinstance(m.get("value", m.get("content")), str):
            raise TraceError("needs 'from' and a string 'value'", path=where[0], field=field)
        who = str(m.get("from", m.get("role", "")))
        if who.lower() not in _ROLES:
            raise TraceError(
                f"unknown speaker {who!r} (known: {', '.join(sorted(_ROLES))})", path=where[0], field=f"{field}.from"
            )
        out.append({"role": _ROLES[who.lower()], "content": str(m.get("value", m.get("content")))})
    return out


def import_trace(source: Source, paths: Sequence[str | Path], **options: Any) -> ImportResult:
    """Dispatch to one importer; ``paths`` holds one file except for ``openai`` batch pairs."""
    if source == "openai":
        return import_openai(paths)
    if len(paths) != 1:
        raise TraceError(f"--from {source} reads exactly one file, got {len(paths)}", path=", ".join(map(str, paths)))
    if source == "vllm":
        return import_vllm(paths[0], **options)
    if source == "sharegpt":
        return import_sharegpt(paths[0], **{k: v for k, v in options.items() if k == "model"})
    raise TraceError(f"unknown source {source!r} (openai, vllm, sharegpt)", path="--from")
