"""Exporters: write a frank workload in a peer benchmark's input format (``frank workload export``).

- ``aiperf``: AIPerf's ``mooncake_trace`` custom dataset (``aiperf/dataset/loader/models.py``,
  ``MooncakeTrace``), one JSON object per turn: ``{"session_id": ..., "payload": {...}}``. ``payload`` is
  the complete request body, which AIPerf sends verbatim (context mode ``message_array_with_responses``:
  history comes from the file, never from the live engine, as in frank's replay). Lines of one
  session are sent in file order. The body is exactly what frank's replay sends
  (:func:`frankenstein.workload.replay.replay_body` with the given settings), or, with
  ``as_recorded``, the recorded body untouched.
- ``vllm``: ``vllm bench serve --dataset-name custom`` JSONL (``vllm/benchmarks/datasets/datasets.py``,
  ``CustomDataset``): ``{"prompt": str, "output_tokens": int}``. It holds one prompt per line, so only
  turns that are one prompt are exported: a completions turn with a text prompt, or a chat turn whose
  messages are one user message with text content. Every other turn (history, a system message, a
  token-id prompt) is skipped with its reason; the other fields of the body (tools, stop, ...) are not
  carried, and the export names them.

- ``vllm-multiturn``: vLLM's multi-turn benchmark (``benchmarks/multi_turn/benchmark_serving_multi_turn.py
  --input-file``): one JSON list of conversations ``{"id": session, "messages": [user, assistant, user, ...]}``,
  each the session's last turn's messages plus its recorded answer. It holds chats with history, but only
  plain-text messages alternating user/assistant from a user message, and every turn of a session must
  repeat the one before it as its prefix; a session that breaks this is skipped whole, each of its turns
  named with why (a system message, tool calls, a history that differs from the recorded answers). That
  benchmark feeds its live answers back as the next turn's history, so past the first turn of a
  conversation its requests are not byte-identical to frank's replay; the export says so.

AIPerf sends every payload to one endpoint, and vLLM bench runs one backend, so a workload that mixes
endpoints is refused. The llama.cpp native ``/completion`` endpoint is not one of theirs and is refused.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from frankenstein.errors import TraceError
from frankenstein.workload.replay import ReplaySettings, recorded_length, replay_body
from frankenstein.workload.trace import CHAT, Turn, Workload, open_private, request_bytes

Peer = Literal["aiperf", "vllm", "vllm-multiturn"]
PEERS: tuple[str, ...] = ("aiperf", "vllm", "vllm-multiturn")
MULTITURN_CAVEAT = (
    "vLLM's multi-turn benchmark sends its live answers back as history: past each conversation's first turn its "
    "requests differ from frank's replay"
)
# Body keys vLLM's custom dataset carries (the prompt and its length); anything else is reported as dropped.
_VLLM_CARRIED = frozenset({"messages", "prompt", "max_tokens", "max_completion_tokens", "n_predict"})
_PEER_ENDPOINTS = ("/v1/chat/completions", "/v1/completions")


@dataclass
class Export:
    """The lines written (JSON objects), the turns skipped with why, and how to run the peer on the file."""

    lines: list[dict[str, Any]]
    skipped: list[str] = field(default_factory=list)
    dropped_keys: list[str] = field(default_factory=list)
    endpoint: str = CHAT
    hint: str = ""
    one_document: bool = False  # one JSON document (a list) instead of one object per line
    turns: int = 0  # turns the lines hold (a conversation holds several)


def export_workload(
    workload: Workload, peer: Peer, settings: ReplaySettings | None = None, *, as_recorded: bool = False
) -> Export:
    """The peer-format lines for ``workload``; raises :class:`TraceError` when nothing can be exported."""
    where = str(workload.path or "workload")
    turns = list(workload.turns[: settings.max_turns] if settings and settings.max_turns else workload.turns)
    endpoint = _one_endpoint(turns, where, peer)
    if peer == "vllm-multiturn" and endpoint != CHAT:
        raise TraceError(
            f"vLLM's multi-turn benchmark sends chat requests only; this workload is {endpoint}", path=where
        )
    settings = settings or ReplaySettings()
    out = _EXPORTERS[peer](turns, settings, as_recorded)
    out.endpoint = endpoint
    out.hint = _hint(peer, endpoint, settings, len(out.lines))
    if not out.lines:
        raise TraceError(f"no turn can be written in {peer}'s format ({'; '.join(out.skipped[:3])})", path=where)
    return out


def _one_endpoint(turns: Sequence[Turn], where: str, peer: str) -> str:
    endpoints = sorted({t.endpoint for t in turns})
    bad = [e for e in endpoints if e not in _PEER_ENDPOINTS]
    if bad:
        first = next(t for t in turns if t.endpoint == bad[0])
        raise TraceError(
            f"turn {first.turn_id}: endpoint {bad[0]} is llama.cpp's own, not an OpenAI endpoint {peer} sends to "
            f"(only {', '.join(_PEER_ENDPOINTS)} can be exported)",
            path=where,
        )
    if len(endpoints) > 1:
        raise TraceError(
            f"the workload mixes endpoints ({', '.join(endpoints)}); {peer} sends one file to one endpoint: "
            "export each endpoint's turns from its own workload",
            path=where,
        )
    return endpoints[0]


def _aiperf(turns: Sequence[Turn], settings: ReplaySettings, as_recorded: bool) -> Export:
    lines = []
    for t in turns:
        body = request_bytes(t) if as_recorded else replay_body(t, settings)
        lines.append({"session_id": t.session_id, "payload": json.loads(body)})
    return Export(lines=lines, turns=len(lines))


def vllm_prompt(turn: Turn) -> tuple[str | None, str]:
    """(prompt, "") for a turn vLLM's custom dataset can hold as one prompt, else (None, why not)."""
    req = turn.request
    if turn.endpoint == CHAT:
        msgs = req.get("messages")
        if not (isinstance(msgs, list) and len(msgs) == 1 and isinstance(msgs[0], dict)):
            n = len(msgs) if isinstance(msgs, list) else 0
            return None, f"{n} messages (vLLM's custom dataset holds one user prompt per line, no history)"
        msg = msgs[0]
        if msg.get("role") != "user" or not isinstance(msg.get("content"), str) or set(msg) - {"role", "content"}:
            return None, "its one message is not a plain-text user message"
        return str(msg["content"]), ""
    prompt = req.get("prompt")
    if not isinstance(prompt, str):
        return None, "its prompt is not one text string (token ids or a list)"
    return prompt, ""


def _vllm(turns: Sequence[Turn]) -> Export:
    lines, skipped, dropped = [], [], set()
    for t in turns:
        prompt, why = vllm_prompt(t)
        if prompt is None:
            skipped.append(f"turn {t.turn_id}: {why}")
            continue
        line: dict[str, Any] = {"prompt": prompt}
        n = recorded_length(t)
        if n is not None and n > 0:
            line["output_tokens"] = n
        else:
            skipped.append(f"turn {t.turn_id}: no recorded output length (vLLM then needs --custom-output-len)")
            continue
        dropped |= {k for k in t.request if k not in _VLLM_CARRIED and k not in ("model", "stream")}
        lines.append(line)
    return Export(lines=lines, skipped=skipped, dropped_keys=sorted(dropped), turns=len(lines))


def conversation(turns: Sequence[Turn]) -> tuple[list[dict[str, str]] | None, str]:
    """The session's messages (its last turn's plus the recorded answer) when vLLM's multi-turn format can hold
    every turn of it, else (None, why not)."""
    last = turns[-1]
    messages = [*last.request.get("messages", []), {"role": "assistant", "content": last.output.text}]
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or set(m) != {"role", "content"} or not isinstance(m["content"], str):
            return None, f"message {i} is not plain text (role and content only: no tool calls, no content parts)"
        if m["role"] != ("user" if i % 2 == 0 else "assistant"):
            return None, f"message {i} is a {m['role']} message (the format alternates user and assistant from a user)"
    if last.output.tool_calls:
        return None, "its recorded answer holds tool calls"
    for t in turns[:-1]:
        mine = [*t.request["messages"], {"role": "assistant", "content": t.output.text}]
        if messages[: len(mine)] != mine:
            return None, f"turn {t.turn_id} and its recorded answer are not the history the next turn sends"
    return messages, ""


def _vllm_multiturn(turns: Sequence[Turn], settings: ReplaySettings, as_recorded: bool) -> Export:
    sessions: dict[str, list[Turn]] = {}
    for t in turns:
        sessions.setdefault(t.session_id, []).append(t)
    lines, skipped, dropped, held = [], [], set(), 0
    for sid, group in sessions.items():
        messages, why = conversation(sorted(group, key=lambda t: t.turn_index))
        if messages is None:
            skipped += [f"turn {t.turn_id}: session {sid}: {why}" for t in group]
            continue
        lines.append({"id": sid, "messages": messages})
        held += len(group)
        dropped |= {k for t in group for k in t.request if k not in _VLLM_CARRIED and k not in ("model", "stream")}
    return Export(lines=lines, skipped=skipped, dropped_keys=sorted(dropped), one_document=True, turns=held)


_EXPORTERS = {
    "aiperf": _aiperf,
    "vllm": lambda turns, settings, as_recorded: _vllm(turns),
    "vllm-multiturn": _vllm_multiturn,
}


def _hint(peer: Peer, endpoint: str, settings: ReplaySettings, n: int) -> str:
    """The peer's command line for the file: every line once, in order, one request at a time (AIPerf's default
    request count is 10, cycling through a shorter file or stopping early in a longer one)."""
    if peer == "aiperf":
        kind = "chat" if endpoint == CHAT else "completions"
        stream = " --streaming" if settings.stream else ""
        return (
            f"aiperf profile --custom-dataset-type mooncake_trace --input-file FILE --endpoint-type {kind}{stream} "
            f"--url http://HOST:PORT -m MODEL --concurrency 1 --request-count {n}"
        )
    if peer == "vllm-multiturn":
        return (
            "python benchmarks/multi_turn/benchmark_serving_multi_turn.py --input-file FILE --model MODEL "
            "--url http://HOST:PORT --num-clients 1 --max-active-conversations 1"
        )
    backend = "openai-chat" if endpoint == CHAT else "openai"
    return (
        f"vllm bench serve --backend {backend} --endpoint {endpoint} --dataset-name custom --dataset-path FILE "
        f"--skip-chat-template --disable-shuffle --num-prompts {n} --base-url http://HOST:PORT --model MODEL "
        f"--temperature {settings.temperature:g}{' --ignore-eos' if settings.force_length else ''} --max-concurrency 1"
    )


def write_export(path: str | Path, export: Export) -> None:
    """One JSON object per line (UTF-8, compact), written to a temporary file and renamed into place, readable
    by its owner only (0600, like the trace it is made from: :func:`open_private`)."""
    path = Path(path)
    if not path.parent.is_dir():
        raise TraceError(f"the folder {path.parent} does not exist; create it or write elsewhere", path=path)
    tmp = path.with_name(path.name + ".tmp")
    with open_private(tmp) as f:
        if export.one_document:
            f.write((json.dumps(export.lines, ensure_ascii=False, indent=1, allow_nan=False) + "\n").encode())
        for line in [] if export.one_document else export.lines:
            f.write((json.dumps(line, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n").encode())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
