"""The trace format: atomic appends, strict loading with file:line:field messages, the hash and
the exact request bytes replay sends."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from frankenstein.engines.response import StreamAssembler, output_from_response
from frankenstein.errors import TraceError
from frankenstein.workload.trace import (
    DecodedOutput,
    exact_output_json,
    CHAT,
    MeasuredTimings,
    PreparedRequest,
    RecordedTimings,
    ToolCall,
    make_turn_id,
    parse_line,
    recorded_line,
    redact_request,
    is_secret_key,
    RecordedOutput,
    Turn,
    append_turn,
    derive_session_id,
    load_trace,
    prepare_request,
    request_bytes,
    strip_secrets,
    turn_line,
    workload_hash,
    write_trace,
)


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make_turn(i: int = 0, session: str = "s1", **request: Any) -> Turn:
    body = request or {"model": "tiny", "messages": [{"role": "user", "content": f"q{i} é"}], "max_tokens": 8}
    return Turn(
        turn_id=f"{session}-{i:04d}",
        session_id=session,
        turn_index=i,
        endpoint="/v1/chat/completions",
        request=body,
        output=RecordedOutput(text=f"a{i}", finish_reason="stop", prompt_tokens=5, completion_tokens=2),
    )


def good_line(i: int = 0, **changes: Any) -> str:
    data = json.loads(turn_line(make_turn(i)))
    data.update(changes)
    return json.dumps(data)


def write_lines(path: Path, *lines: str, final_newline: bool = True) -> Path:
    path.write_text("\n".join(lines) + ("\n" if final_newline else ""))
    return path


def test_append_then_load_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    turns = [make_turn(i) for i in range(3)]
    for t in turns:
        append_turn(path, t)
    wl = load_trace(path)
    assert list(wl.turns) == turns and wl.sessions == ["s1"] and wl.path == path
    assert wl.hash == workload_hash(turns) == workload_hash(path)
    assert path.read_bytes().count(b"\n") == 3 and oct(path.stat().st_mode & 0o777) == "0o600"


def test_concurrent_appends_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    big = "x" * 70_000  # larger than a pipe buffer: one write per line still

    def worker(w: int) -> None:
        for i in range(25):
            append_turn(path, make_turn(i, session=f"w{w}", messages=[{"role": "user", "content": big}]))

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(load_trace(path).turns) == 100


def test_request_bytes_are_exact_and_keep_the_recorded_key_order() -> None:
    turn = make_turn(0, model="m", messages=[{"role": "user", "content": "é\n"}], temperature=0.0, max_tokens=4)
    assert (
        request_bytes(turn)
        == '{"model":"m","messages":[{"role":"user","content":"é\\n"}],"temperature":0.0,"max_tokens":4}'.encode()
    )
    forced = request_bytes(turn, {"max_tokens": 7, "seed": 1, "ignore_eos": True})
    assert (
        forced
        == b'{"model":"m","messages":[{"role":"user","content":"\xc3\xa9\\n"}],"temperature":0.0,"max_tokens":7,"seed":1,"ignore_eos":true}'
    )
    assert request_bytes(turn) == request_bytes(Turn.model_validate_json(turn_line(turn)))


def test_hash_ignores_formatting_and_metadata_but_not_request_bytes(tmp_path: Path) -> None:
    turns = [make_turn(0), make_turn(1)]
    h = workload_hash(turns)
    # Reformatted: spaces, non-request keys reordered, timings and recorded_at changed.
    lines = []
    for t in turns:
        d = json.loads(turn_line(t))
        d["timings"] = {"server": {"prompt_ms": 3.0}, "e2e_ms": 9.0}
        d["recorded_at"] = 1.5
        lines.append(
            json.dumps(dict(reversed(list(d.items()))), indent=None, separators=(", ", ": "), ensure_ascii=True)
        )
    assert load_trace(write_lines(tmp_path / "r.jsonl", *lines)).hash == h
    # A request key order change changes the bytes sent, so the hash.
    swapped = make_turn(0, max_tokens=8, model="tiny", messages=[{"role": "user", "content": "q0 é"}])
    assert swapped.request == turns[0].request and workload_hash([swapped, turns[1]]) != h
    # One request byte, one output character, the turn order: each changes it.
    assert (
        workload_hash(
            [make_turn(0, model="tinY", messages=[{"role": "user", "content": "q0 é"}], max_tokens=8), turns[1]]
        )
        != h
    )
    changed = turns[0].model_copy(
        update={"output": RecordedOutput(text="a0!", finish_reason="stop", prompt_tokens=5, completion_tokens=2)}
    )
    assert workload_hash([changed, turns[1]]) != h
    assert workload_hash(list(reversed(turns))) != h


def test_write_trace_is_whole_or_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    digest = write_trace(path, [make_turn(0), make_turn(1)])
    assert load_trace(path).hash == digest and not (tmp_path / "t.jsonl.tmp").exists()


# ---------------------------------------------------------------- bad input, each message exact


def load_error(path: Path) -> str:
    with pytest.raises(TraceError) as info:
        load_trace(path)
    return str(info.value)


def test_malformed_json_line_names_its_line_number(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl", good_line(0), good_line(1), '{"frank_trace": 1, "turn_id": ')
    assert load_error(path).startswith(f"{path}: line 3: not valid JSON (")


def test_unknown_trace_version(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl", good_line(0), good_line(1, frank_trace=2))
    assert load_error(path) == f"{path}: line 2: frank_trace: unknown trace version 2 (this frank reads version 1)"


def test_line_without_a_version(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl", json.dumps({"prompt": "hi"}))
    assert load_error(path) == f"{path}: line 1: frank_trace: missing (not a frank trace line?)"


def test_missing_field_is_named(tmp_path: Path) -> None:
    data = json.loads(good_line(0))
    del data["session_id"]
    path = write_lines(tmp_path / "t.jsonl", json.dumps(data))
    assert load_error(path) == f"{path}: line 1: session_id: missing"


def test_unknown_and_bad_nested_fields_are_named(tmp_path: Path) -> None:
    data = json.loads(good_line(0))
    data["output"]["logits"] = []
    path = write_lines(tmp_path / "t.jsonl", json.dumps(data))
    assert load_error(path) == f"{path}: line 1: output.logits: unknown field"
    data = json.loads(good_line(0))
    data["output"]["completion_tokens"] = -1
    write_lines(path, json.dumps(data))
    assert load_error(path) == f"{path}: line 1: output.completion_tokens: Input should be greater than or equal to 0"


def test_unknown_endpoint_and_a_chat_request_without_messages(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl", good_line(0, endpoint="/v1/embeddings"))
    assert load_error(path) == (
        f"{path}: line 1: endpoint: Input should be '/v1/chat/completions', '/v1/completions' or '/completion'"
    )
    write_lines(path, good_line(0, request={"prompt": "hi"}))
    assert load_error(path) == f"{path}: line 1: request: a chat completions request needs a non-empty 'messages' list"
    write_lines(path, good_line(0, endpoint="/completion", request={"messages": []}))
    assert load_error(path) == f"{path}: line 1: request: a /completion request needs a 'prompt'"


def test_half_written_last_line_and_empty_lines_are_refused(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl", good_line(0), good_line(1), final_newline=False)
    assert load_error(path) == f"{path}: line 2: no newline at the end: a half-written line"
    write_lines(path, good_line(0), "", good_line(1))
    assert load_error(path) == f"{path}: line 2: empty line"


def test_append_refuses_to_glue_onto_an_unfinished_line(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl", good_line(0), '{"frank_trace": 1, "tu', final_newline=False)
    before = path.read_bytes()
    with pytest.raises(TraceError) as info:
        append_turn(path, make_turn(1))
    assert str(info.value) == f"{path}: last line (ends at byte {len(before)}) is unfinished; refusing to append"
    assert path.read_bytes() == before


def test_duplicates_are_refused(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl", good_line(0), good_line(0))
    assert load_error(path) == f"{path}: line 2: turn_id: duplicate turn id 's1-0000' (first on line 1)"
    write_lines(path, good_line(0), good_line(0, turn_id="other"))
    assert load_error(path) == f"{path}: line 2: turn_index: session 's1' already has turn index 0 (line 1)"


def test_missing_and_empty_files(tmp_path: Path) -> None:
    assert load_error(tmp_path / "none.jsonl") == f"{tmp_path / 'none.jsonl'}: file not found"
    (tmp_path / "e.jsonl").write_text("")
    assert load_error(tmp_path / "e.jsonl") == f"{tmp_path / 'e.jsonl'}: no turns"


def test_not_an_object(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl", "[1, 2]")
    assert load_error(path) == f"{path}: line 1: expected a JSON object, got list"


# ---------------------------------------------------------------- credentials and sessions


def test_strip_secrets_drops_credential_strings_at_any_depth_but_keeps_schemas() -> None:
    body = {
        "api_key": "sk-1",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "extra": {"Authorization": "Bearer x", "access_token": "t", "client_secret": "c", "top_k": 2},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "login",
                    "parameters": {
                        "type": "object",
                        "properties": {"password": {"type": "string"}, "api_key": {"type": "string"}},
                    },
                },
            }
        ],
    }
    out = strip_secrets(body)
    assert out == {"messages": body["messages"], "max_tokens": 4, "extra": {"top_k": 2}, "tools": body["tools"]}
    assert "api_key" in body  # the input is not changed


def test_derived_session_ids() -> None:
    a = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "task"}]}
    b = {"messages": a["messages"] + [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]}
    c = {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "other"}]}
    sid = derive_session_id("/v1/chat/completions", a)
    assert sid == derive_session_id("/v1/chat/completions", b) != derive_session_id("/v1/chat/completions", c)
    assert sid.startswith("s-") and len(sid) == 14
    assert derive_session_id("/completion", {"prompt": "p" * 2000}) == derive_session_id(
        "/completion", {"prompt": "p" * 1500}
    )


def test_shipped_demo_workload_is_agent_shaped_and_fits_the_tiny_context() -> None:
    from frankenstein.shipped import data_path

    wl = load_trace(data_path("demo-workload.jsonl"))
    assert len(wl.turns) == 60 and len(wl.sessions) == 3
    for t in wl.turns:
        assert t.request["messages"][0]["role"] == "system" and len(t.request["tools"]) == 5
        assert 16 <= t.output.completion_tokens <= 48 and t.output.prompt_tokens < 4096 - 48
        assert t.request["temperature"] == 0.0 and t.output.text
    first, second = wl.turns[0], wl.turns[1]
    assert second.request["messages"][: len(first.request["messages"])] == first.request["messages"]
    assert second.request["messages"][len(first.request["messages"])] == {
        "role": "assistant",
        "content": first.output.text,
    }


# ---------------------------------------------------------------- bad input and credentials (issue 16)


def test_pkg_workloads_load_like_designs_name_them() -> None:
    wl = load_trace("pkg:demo-workload.jsonl")
    assert wl.turns and wl.path is not None and wl.path.name == "demo-workload.jsonl"


def test_unreadable_traces_get_one_clear_message(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="is a directory"):
        load_trace(tmp_path)
    line = json.loads(
        turn_line(
            Turn(
                turn_id="t",
                session_id="s",
                turn_index=0,
                endpoint="/v1/completions",
                request={"prompt": "p"},
                source="test",
            )
        )
    )
    nan = tmp_path / "nan.jsonl"
    nan.write_bytes(json.dumps(line).replace('"prompt": "p"', '"prompt": "p", "temperature": NaN').encode() + b"\n")
    with pytest.raises(TraceError, match=r"nan.jsonl: line 1: NaN is not a JSON number"):
        load_trace(nan)
    deep = tmp_path / "deep.jsonl"
    deep.write_bytes(b"[" * 100_000 + b"]" * 100_000 + b"\n")
    with pytest.raises(TraceError, match=r"deep.jsonl: line 1: JSON nested too deeply"):
        load_trace(deep)


def test_redaction_leaves_what_the_model_sees_and_lists_the_paths() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "login",
                "parameters": {
                    "type": "object",
                    "properties": {"password": {"type": "string"}, "session_token": {"type": "string"}},
                },
            },
        }
    ]
    body = {
        "messages": [{"role": "user", "content": "x", "api_key": "part of the prompt"}],
        "tools": tools,
        "max_tokens": 4,
        "prompt_cache_key": "k",
        "X-Api-Key": "s",
        "metadata": {"refresh_token": "s", "n": 1, "nested": {"aws_secret": "s", "keys": [{"deploy_key": "s"}]}},
        "api_keys": ["s", "s"],
    }
    out, paths = redact_request(body)
    assert out == {
        "messages": body["messages"],
        "tools": tools,
        "max_tokens": 4,
        "prompt_cache_key": "k",
        "metadata": {"n": 1, "nested": {"keys": [{}]}},
    }
    assert paths == [
        "X-Api-Key",
        "metadata.refresh_token",
        "metadata.nested.aws_secret",
        "metadata.nested.keys[0].deploy_key",
        "api_keys",
    ]
    # the model-visible part of the replayed bytes is the recorded one, byte for byte
    turn = Turn(turn_id="t", session_id="s", turn_index=0, endpoint="/v1/chat/completions", request=out, source="test")
    sent = json.loads(request_bytes(turn))
    assert json.dumps(sent["messages"]) == json.dumps(body["messages"]) and sent["tools"] == tools


@pytest.mark.parametrize(
    "name",
    [
        "accessToken",
        "clientSecret",
        "authToken",
        "api-key",
        "X-Api-Key",
        "APIKey",
        "refresh-token",
        "Password_Hash",
        "setCookie",
        "awsSecretAccessKey",
        "extra_headers",
        "Authorization",
        "jwt",
        "bearer",
        "openaiApiKey",
    ],
)
def test_a_credential_named_any_way_is_a_credential(name: str) -> None:
    """Case and separators are folded and camelCase split before matching (issue 30: camelCase names and
    extra_headers were kept)."""
    assert is_secret_key(name), name


@pytest.mark.parametrize(
    "name", ["max_tokens", "maxTokens", "prompt_cache_key", "promptCacheKey", "sessionID", "user", "top_k", "n_probs"]
)
def test_what_is_not_a_credential_stays(name: str) -> None:
    assert not is_secret_key(name), name


@pytest.mark.parametrize(
    "request_body",
    [
        {"model": "m", "messages": [{"role": "user", "content": 'q é \u2028 \\ " </script>'}], "stop": None},
        {"model": "m", "messages": [{"role": "user", "content": "x", "name": None}], "x": 1.0, "y": 1e300, "z": -0.0},
        {"messages": [{"role": "user", "content": '"request":{"messages":[]},"output":'}], "tools": [{"a": [1, [2]]}]},
        {"model": "m", "messages": [{"role": "user", "content": "k"}], "api_key": "sk-123", "extra_headers": {"x": 1}},
    ],
)
def test_a_line_spliced_from_a_prepared_request_is_byte_for_byte_the_plain_line(request_body: dict[str, Any]) -> None:
    """frank record serializes a request while the engine works and splices it into the turn's line later:
    the line must be the one ``turn_line`` makes from the whole turn, whatever the request holds (a request
    whose text looks like the line's own keys included), with and without the optional fields."""
    p = prepare_request("/v1/chat/completions", request_body, None)
    for extra in ({}, {"recorded_at": 1.5, "redacted": p.redacted or None, "client_disconnected": True}):
        turn = Turn(
            turn_id=f"{p.session_id}-0000",
            session_id=p.session_id,
            turn_index=0,
            endpoint="/v1/chat/completions",
            request=p.request,
            output=RecordedOutput(text='"request":', finish_reason="stop", completion_tokens=2),
            **extra,
        )
        assert turn_line(turn, p.request_json) == turn_line(turn)
        assert json.loads(turn_line(turn, p.request_json))["request"] == p.request
    assert "api_key" not in p.request_json  # prepared = redacted


def test_a_request_json_cannot_hold_is_refused_when_prepared() -> None:
    with pytest.raises(ValueError):
        prepare_request(
            "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "t": float("inf")}, None
        )


# ---------------------------------------------------------------- the recorder's line, made without a Turn


def reference_line(
    p: PreparedRequest, index: int, output: RecordedOutput, timings: MeasuredTimings, gone: bool, at: float
) -> bytes:
    """What ``turn_line`` makes of the :class:`Turn` with these values (the line frank record wrote before)."""
    turn = Turn(
        turn_id=make_turn_id(p.session_id, index),
        session_id=p.session_id,
        turn_index=index,
        endpoint=p.endpoint,  # type: ignore[arg-type]
        request=p.request,
        output=output,
        timings=RecordedTimings(server=timings.server, ttft_ms=timings.ttft_ms, e2e_ms=timings.e2e_ms),
        client_disconnected=gone,
        recorded_at=at,
        redacted=p.redacted or None,
    )
    return turn_line(turn)


def streamed(endpoint: str, events: list[Any]) -> RecordedOutput:
    asm = StreamAssembler(endpoint)
    asm.feed(b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n")
    return asm.output()


ODD_TIMINGS = {
    "prompt_ms": 3.25,
    "nan": float("nan"),
    "inf": float("inf"),
    "-inf": float("-inf"),
    "none": None,
    "flag": True,
    "big": 10**30,
    "tiny": 5e-324,
    "neg0": -0.0,
    "huge": 1e300,
    "word": 'é \u2028 "q" \\ </s>',
}
CALL = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path":"é.py"}'}}
ANSWERS: list[tuple[str, dict[str, Any], RecordedOutput]] = [
    (
        "/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": 'hé \u0000 "x"'}], "api_key": "sk-1"},
        output_from_response(
            "/v1/chat/completions",
            {
                "choices": [
                    {
                        "message": {"content": "ok \U0001f600", "reasoning_content": "think\n", "tool_calls": [CALL]},
                        "finish_reason": "tool_calls",
                        "token_ids": [1, 2, 3],
                    }
                ],
                "usage": {"prompt_tokens": 7, "completion_tokens": 3},
            },
        ),
    ),
    (
        "/v1/completions",
        {"model": "m", "prompt": ["a", "b"], "extra_headers": {"Authorization": "x"}, "seed": -1},
        output_from_response("/v1/completions", {"choices": [{"text": "", "finish_reason": None}]}),
    ),
    (
        "/completion",
        {"prompt": "def f(", "n_predict": 3, "temperature": 0.0},
        output_from_response("/completion", {"content": "x", "tokens": [10, 11], "stop_type": "limit"}),
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": '"request":{"messages":[]},"output":'}], "stream": True},
        streamed(
            "/v1/chat/completions",
            [
                {"choices": [{"index": 0, "delta": {"content": "Hi", "tool_calls": [dict(CALL, index=0)]}}]},
                {"choices": [{"index": 0, "delta": {"reasoning_content": "r"}, "finish_reason": "stop"}]},
            ],
        ),
    ),
    (
        "/completion",
        {"prompt": "p", "stream": True},
        streamed("/completion", [{"content": "a", "tokens": [5], "stop": False}, {"content": "", "stop": True}]),
    ),
]


@pytest.mark.parametrize(("endpoint", "body", "output"), ANSWERS)
@pytest.mark.parametrize(
    "server",
    [{}, {"prompt_n": 5, "predicted_ms": 4.5}, ODD_TIMINGS, {"set": {3}, "bytes": b"b", "deep": {"x": [float("nan")]}}],
)
def test_the_recorders_line_is_byte_for_byte_the_line_of_its_turn(
    endpoint: str, body: dict[str, Any], output: RecordedOutput, server: dict[str, Any]
) -> None:
    """frank record writes a turn's line without building the :class:`Turn` (between the answer's last two
    bytes): chat, completions and ``/completion``, whole and streamed, tool calls, reasoning, token ids,
    redacted, disconnected, non-ASCII, an engine's NaN, infinite, None, boolean and huge timings; the
    line is the one ``turn_line`` makes of the Turn, and loads back as it."""
    for session, index, gone, ttft in ((None, 0, False, None), ('a "b" \\ é\x7f', 12345, True, 2.5)):
        p = prepare_request(endpoint, body, session)
        timings = MeasuredTimings(server, ttft, 9.875)
        line = recorded_line(p, index, output, timings, gone, 1764921600.125)
        assert line == reference_line(p, index, output, timings, gone, 1764921600.125)
        assert parse_line(line, "t.jsonl", 1).turn_index == index


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8))


@FUZZ
@given(
    body=st.fixed_dictionaries(
        {"messages": st.lists(st.fixed_dictionaries({"role": st.just("user"), "content": st.text()}), min_size=1)},
        optional={"api_key": st.text(), "temperature": st.floats(allow_nan=False, allow_infinity=False)},
    ),
    session=st.one_of(st.none(), st.text(min_size=1)),
    index=st.integers(0, 10**7),
    output=st.builds(
        RecordedOutput,
        text=st.text(),
        reasoning=st.text(),
        token_ids=st.one_of(st.none(), st.lists(st.integers(0, 2**40))),
        tool_calls=st.lists(st.builds(ToolCall, id=st.text(), name=st.text(), arguments=st.text())),
        finish_reason=st.one_of(st.none(), st.text()),
        prompt_tokens=st.one_of(st.none(), st.integers(0, 10**9)),
        completion_tokens=st.one_of(st.none(), st.integers(0, 10**9)),
    ),
    server=st.dictionaries(st.text(max_size=8), SCALARS, max_size=6),
    ttft=st.one_of(st.none(), st.floats(0, 1e6)),
    gone=st.booleans(),
    at=st.floats(0, 2e9),
)
def test_any_turn_the_recorder_writes_is_byte_for_byte_its_turns_line(
    body: dict[str, Any],
    session: str | None,
    index: int,
    output: RecordedOutput,
    server: dict[str, Any],
    ttft: float | None,
    gone: bool,
    at: float,
) -> None:
    p = prepare_request(CHAT, body, session)
    timings = MeasuredTimings(server, ttft, 1.5)
    assert recorded_line(p, index, output, timings, gone, at) == reference_line(p, index, output, timings, gone, at)


def test_a_lone_surrogate_the_engine_sent_is_refused_by_both_lines() -> None:
    """A JSON answer may hold ``"\\ud800"``; no trace line can (not UTF-8): the recorder refuses the turn as
    the Turn's line would (a ValueError, said as "turn not recorded")."""
    p = prepare_request(CHAT, {"messages": [{"role": "user", "content": "x"}]}, None)
    for output, server in ((RecordedOutput(text="a\ud800"), {}), (RecordedOutput(), {"w": "\udfff"})):
        with pytest.raises(ValueError):
            reference_line(p, 0, output, MeasuredTimings(server, None, None), False, 1.0)
        with pytest.raises(ValueError):
            recorded_line(p, 0, output, MeasuredTimings(server, None, None), False, 1.0)


CYCLE: list[Any] = [{"role": "user", "content": "x"}, {"role": "user"}]
CYCLE[1]["content"] = CYCLE  # a message that holds itself (an API caller's dict; parsed JSON never does)


@pytest.mark.parametrize(
    ("endpoint", "body", "why"),
    [
        (CHAT, {"model": "m"}, "a chat completions request needs a non-empty 'messages' list"),
        (CHAT, {"messages": []}, "a chat completions request needs a non-empty 'messages' list"),
        (CHAT, {"messages": "hi"}, "a chat completions request needs a non-empty 'messages' list"),
        ("/v1/completions", {"messages": [{"role": "user", "content": "x"}]}, "a /v1/completions request needs"),
        ("/completion", {"api_key": "k"}, "a /completion request needs a 'prompt'"),
        ("/v1/embeddings", {"input": "x"}, "endpoint '/v1/embeddings' is not one of"),
        (CHAT, {"messages": [{"role": "user", "content": "\ud800"}]}, "surrogates not allowed"),
        (CHAT, {"messages": [{"role": "user", "content": "x"}], "t": float("nan")}, "Out of range float"),
        (CHAT, {"messages": CYCLE}, "holds itself"),
    ],
)
def test_every_check_a_turn_makes_of_its_request_is_made_when_it_is_prepared(
    endpoint: str, body: dict[str, Any], why: str
) -> None:
    """The recorder no longer builds a :class:`Turn`; what the Turn refused of a request, ``prepare_request``
    refuses (while the engine works), and so does the Turn still (a trace line read back)."""
    with pytest.raises(ValueError, match=re.escape(why)):
        prepare_request(endpoint, body, None)


# ------------------------------------------------------------------ the decoder's output, checked by hand or by pydantic
class _Text(str):
    """A str subclass: pydantic takes it as a str; the hand check must leave it to pydantic."""


_ANY_TEXT = st.one_of(
    st.text(max_size=8), st.builds(_Text, st.text(max_size=4)), st.integers(), st.none(), st.binary(max_size=3)
)
_ANY_COUNT = st.one_of(st.none(), st.integers(-3, 10**12), st.booleans(), st.floats(-1, 5), st.sampled_from(["3", "x"]))
_ANY_IDS = st.one_of(
    st.none(), st.lists(st.one_of(st.integers(-5, 10**6), st.booleans(), st.sampled_from([1.0, 2.5, "7"])), max_size=4)
)
_ANY_CALL = st.one_of(
    st.fixed_dictionaries({k: _ANY_TEXT for k in ("id", "type", "name", "arguments")}),
    st.fixed_dictionaries({"id": st.text(max_size=3), "name": st.text(max_size=3)}),  # keys missing: defaults
    st.fixed_dictionaries({k: st.text(max_size=3) for k in ("id", "type", "name", "arguments", "extra")}),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=_ANY_TEXT,
    reasoning=_ANY_TEXT,
    token_ids=_ANY_IDS,
    tool_calls=st.lists(_ANY_CALL, max_size=2),
    finish_reason=st.one_of(st.none(), st.sampled_from(["stop", "length"]), st.integers()),
    prompt_tokens=_ANY_COUNT,
    completion_tokens=_ANY_COUNT,
)
def test_the_output_checked_by_hand_is_the_models_or_refused_as_the_model_refuses(**fields: Any) -> None:
    """The recorder writes an output's JSON by hand when every value has its field's exact type; it must be what
    pydantic's model writes, and any other output must be coerced or refused exactly as the model does."""
    try:
        model = RecordedOutput(**fields)
    except ValidationError:
        with pytest.raises(ValidationError):
            DecodedOutput(fields)
        return
    decoded = DecodedOutput(fields)
    assert decoded.json == model.model_dump(mode="json", exclude_none=True)
    assert list(decoded.json) == list(model.model_dump(mode="json", exclude_none=True))  # the line's key order
    assert decoded.model == model
    if exact_output_json(fields) is not None:  # taken by hand: every value as the model holds it
        assert all(type(getattr(model, k)) is type(v) or v is None for k, v in fields.items() if k != "tool_calls")
