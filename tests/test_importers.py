"""Importers from OpenAI pairs / Batch files, vLLM bench custom datasets and ShareGPT, and the
``frank workload import`` command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from frankenstein.cli import main
from frankenstein.errors import TraceError
from frankenstein.workload.importers import import_openai, import_sharegpt, import_trace, import_vllm
from frankenstein.workload.trace import load_trace


def jsonl(path: Path, *objs: Any) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return path


def chat_response(text: str, prompt: int = 9, completion: int = 3) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
    }


def test_openai_pairs_keep_request_and_output(tmp_path: Path) -> None:
    req1 = {"model": "gpt", "messages": [{"role": "user", "content": "hi"}], "api_key": "sk-x"}
    req2 = {
        "model": "gpt",
        "messages": req1["messages"] + [{"role": "assistant", "content": "yo"}, {"role": "user", "content": "more"}],
    }
    req3 = {"model": "gpt", "prompt": "def f(", "max_tokens": 5}
    path = jsonl(
        tmp_path / "p.jsonl",
        {"request": req1, "response": chat_response("yo")},
        {"request": req2, "response": chat_response("ok", 20, 1)},
        {
            "request": req3,
            "response": {
                "choices": [{"index": 0, "text": "x):", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 5},
            },
        },
    )
    result = import_openai([path])
    t1, t2, t3 = result.turns
    assert t1.request == {"model": "gpt", "messages": [{"role": "user", "content": "hi"}]}  # api_key stripped
    assert (t1.session_id, t1.turn_index, t2.session_id, t2.turn_index) == (t1.session_id, 0, t1.session_id, 1)
    assert (t2.output.text, t2.output.prompt_tokens, t2.output.completion_tokens) == ("ok", 20, 1)
    assert (t3.endpoint, t3.output.text, t3.output.finish_reason) == ("/v1/completions", "x):", "length")
    assert t1.source == "import:openai" and result.skipped == []


def test_openai_batch_files_are_joined_by_custom_id(tmp_path: Path) -> None:
    body = {"model": "gpt", "messages": [{"role": "user", "content": "q"}]}
    inp = jsonl(
        tmp_path / "in.jsonl",
        {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": body},
        {"custom_id": "b", "method": "POST", "url": "/v1/chat/completions", "body": body},
        {"custom_id": "c", "method": "POST", "url": "/v1/chat/completions", "body": body},
    )
    out = jsonl(
        tmp_path / "out.jsonl",
        {
            "id": "r1",
            "custom_id": "b",
            "response": {"status_code": 200, "request_id": "x", "body": chat_response("B")},
            "error": None,
        },
        {
            "id": "r2",
            "custom_id": "a",
            "response": {"status_code": 200, "request_id": "y", "body": chat_response("A")},
            "error": None,
        },
        {"id": "r3", "custom_id": "c", "response": {"status_code": 500, "request_id": "z", "body": {}}, "error": None},
    )
    result = import_openai([out, inp])
    assert [t.output.text for t in result.turns] == ["B", "A"]  # output-file order
    assert [t.turn_index for t in result.turns] == [0, 1]
    assert result.skipped == [f"{out}: line 3: custom_id 'c' failed (status 500)"]


def test_openai_line_of_an_unknown_shape(tmp_path: Path) -> None:
    path = jsonl(
        tmp_path / "p.jsonl",
        {"request": {"messages": [{"role": "user", "content": "x"}]}, "response": {}},
        {"prompt": "hi"},
    )
    with pytest.raises(TraceError) as info:
        import_openai([path])
    assert str(info.value).startswith(f"{path}: line 2: not an OpenAI request/response pair nor a Batch API line")


def test_openai_request_that_fits_no_endpoint_names_the_field(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "p.jsonl", {"request": {"model": "m", "messages": []}, "response": chat_response("x")})
    with pytest.raises(TraceError) as info:
        import_openai([path])
    assert str(info.value) == f"{path}: line 1: request: a chat completions request needs a non-empty 'messages' list"


def test_vllm_custom_dataset(tmp_path: Path) -> None:
    path = jsonl(
        tmp_path / "v.jsonl",
        {"prompt": "What is the capital of India?", "output_tokens": 10},
        {"prompt": "And of Iran?", "output_tokens": 1520},
    )
    t1, t2 = import_vllm(path, model="tiny").turns
    assert t1.request == {
        "model": "tiny",
        "messages": [{"role": "user", "content": "What is the capital of India?"}],
        "max_tokens": 10,
    }
    assert (t1.output.completion_tokens, t2.output.completion_tokens) == (10, 1520)
    assert (t1.session_id, t2.session_id) == ("line-1", "line-2") and t1.output.text == ""
    raw = import_vllm(path, endpoint="completions", output_len=4).turns[0]
    assert raw.endpoint == "/v1/completions" and raw.request == {
        "prompt": "What is the capital of India?",
        "max_tokens": 4,
    }


def test_vllm_missing_output_tokens_names_line_and_field(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "v.jsonl", {"prompt": "a", "output_tokens": 3}, {"prompt": "b"})
    with pytest.raises(TraceError) as info:
        import_vllm(path)
    assert str(info.value) == f"{path}: line 2: output_tokens: missing (or give --output-len N)"
    jsonl(path, {"prompt": "a", "output_tokens": "many"})
    with pytest.raises(TraceError) as info:
        import_vllm(path)
    assert str(info.value) == f"{path}: line 1: output_tokens: not an integer: 'many'"
    jsonl(path, {"text": "a"})
    with pytest.raises(TraceError) as info:
        import_vllm(path, output_len=3)
    assert str(info.value) == f"{path}: line 1: prompt: missing or not a string"


SHAREGPT = [
    {
        "id": "conv-a",
        "conversations": [
            {"from": "system", "value": "Be brief."},
            {"from": "human", "value": "Hi"},
            {"from": "gpt", "value": "Hello"},
            {"from": "human", "value": "Fix it"},
            {"from": "gpt", "value": "Done"},
        ],
    },
    {
        "conversations": [
            {"from": "gpt", "value": "I start"},
            {"from": "human", "value": "ok"},
            {"from": "gpt", "value": "bye"},
        ]
    },
    {"id": "empty", "conversations": [{"from": "human", "value": "anyone?"}]},
]


def test_sharegpt_turns_are_built_from_the_recorded_history(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(SHAREGPT))
    result = import_sharegpt(path)
    a0, a1, b0 = result.turns
    assert a0.request == {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}
    assert a1.request["messages"] == a0.request["messages"] + [
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Fix it"},
    ]
    assert (a0.output.text, a1.output.text, a1.turn_id) == ("Hello", "Done", "conv-a-0001")
    # A reply before any user message is history only.
    assert b0.session_id == "conv-1" and b0.output.text == "bye" and len(b0.request["messages"]) == 2
    assert result.skipped == [f"{path}: conversation 2: no assistant reply after a user message"]


def test_sharegpt_unknown_speaker(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    jsonl(path, {"id": "x", "conversations": [{"from": "human", "value": "a"}, {"from": "robot", "value": "b"}]})
    with pytest.raises(TraceError) as info:
        import_sharegpt(path)
    assert str(info.value).startswith(f"{path}: line 1: conversations.1.from: unknown speaker 'robot' (known: ")


def test_import_trace_dispatch_refuses_two_files_for_vllm(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r": --from vllm reads exactly one file, got 2$"):
        import_trace("vllm", [tmp_path / "a", tmp_path / "b"])


def run_cli(*args: str) -> int:
    with pytest.raises(SystemExit) as info:
        main(list(args))
    return int(info.value.code)


def test_cli_import_then_stats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "s.json"
    src.write_text(json.dumps(SHAREGPT))
    out = tmp_path / "w.jsonl"
    assert run_cli("workload", "import", "--from", "sharegpt", str(src), "--out", str(out)) == 0
    wl = load_trace(out)
    captured = capsys.readouterr()
    assert captured.out == f"imported 3 turns in 2 sessions to {out} (hash {wl.hash})\n"
    assert "skipped:" in captured.err
    # OUT exists now: refused, file unchanged.
    before = out.read_bytes()
    assert run_cli("workload", "import", "--from", "sharegpt", str(src), "--out", str(out)) == 1
    assert capsys.readouterr().err == f"frank: error: {out}: exists; pass --force to overwrite\n"
    assert out.read_bytes() == before


def test_cli_bad_input_is_one_message_and_writes_nothing(tmp_path: Path) -> None:
    src = jsonl(tmp_path / "v.jsonl", {"prompt": "a"})
    out = tmp_path / "w.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "frankenstein", "workload", "import", "--from", "vllm", str(src), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr == f"frank: error: {src}: line 1: output_tokens: missing (or give --output-len N)\n"
    assert not out.exists() and not (tmp_path / "w.jsonl.tmp").exists()


def test_cli_unknown_source_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("workload", "import", "--from", "csv", str(tmp_path / "x"), "--out", str(tmp_path / "o")) == 2
    assert "'csv': expected openai, vllm or sharegpt" in capsys.readouterr().err
