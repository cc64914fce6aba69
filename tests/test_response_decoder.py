"""One decoder of an engine's answers (engines/response.py), used by replay's streamed request, the recording
proxy, the importers and the agent loop: the shapes it reads, and what counts as output for replay's clock."""

from __future__ import annotations

import json

from frankenstein.engines.response import StreamAssembler, output_from_response


def _sse(*events: dict) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def test_reasoning_alone_is_not_output_for_replays_clock_but_is_kept() -> None:
    asm = StreamAssembler("/v1/chat/completions")
    assert asm.event({"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}}]}) is False
    assert asm.event({"choices": [{"index": 0, "delta": {"content": "Hi"}}]}) is True
    call = {"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{}"}}
    assert asm.event({"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]})
    assert asm.event({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}) is False
    out = asm.output()
    assert (out.text, out.reasoning, out.finish_reason, out.completion_tokens) == ("Hi", "hmm", "tool_calls", 2)
    assert [(c.id, c.name, c.arguments) for c in out.tool_calls] == [("c1", "f", "{}")]


def test_a_stream_fed_as_bytes_and_as_events_decodes_the_same() -> None:
    events = [{"choices": [{"index": 0, "text": t, "finish_reason": None}]} for t in ("a", "b")]
    events.append({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
    fed, evented = StreamAssembler("/v1/completions"), StreamAssembler("/v1/completions")
    for i in range(0, len(raw := _sse(*events)), 7):  # split mid-line
        fed.feed(raw[i : i + 7])
    for e in events:
        evented.event(e)
    assert fed.output() == evented.output() and fed.output().text == "ab" and fed.done


def test_llamacpp_and_native_shapes() -> None:
    llama = output_from_response("/completion", {"content": "x", "tokens": [1, 2], "stop_type": "limit"})
    assert (llama.text, llama.token_ids, llama.finish_reason) == ("x", [1, 2], "length")
    native = output_from_response("/generate", {"text": '{"a": 1}', "meta_info": {}})  # SGLang /generate
    assert native.text == '{"a": 1}'
    asm = StreamAssembler("/generate")
    assert asm.event({"text": "y"}) is True and asm.output().text == "y"
