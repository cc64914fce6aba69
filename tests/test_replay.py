"""Record through the proxy in front of the real llama-server, then replay against new starts."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx
import pytest

from frankenstein.config import ResolvedRecipe
from frankenstein.design.start import measure_start
from frankenstein.engines import start_engine
from frankenstein.errors import EngineRequestError
from frankenstein.workload.record import serve_recorder
from frankenstein.workload.replay import ReplaySettings, overrides, replay, request_timeout
from frankenstein.workload.trace import Turn, load_trace, workload_from_turns

from helpers_campaign import make_workload

pytestmark = pytest.mark.engine

SYSTEM = "You are a coding agent. Use the tools. " * 20


def _record(recipe: ResolvedRecipe, tmp_path: Path) -> Path:
    out = tmp_path / "recorded.jsonl"
    with start_engine(recipe, tmp_path) as eng:
        rec = serve_recorder(eng.base_url, out=out)
        try:
            history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Fix the failing test."}]
            with httpx.Client(timeout=60, trust_env=False) as client:
                for i in range(3):
                    body = {
                        "model": "tiny",
                        "messages": history,
                        "max_tokens": 12 + 4 * i,
                        "temperature": 0,
                        "stream": i % 2 == 1,
                    }
                    r = client.post(rec.url + "/v1/chat/completions", json=body, headers={"X-Frank-Session": "s"})
                    assert r.status_code == 200
                    text = r.json()["choices"][0]["message"]["content"] if i % 2 == 0 else "(streamed)"
                    history = [
                        *history,
                        {"role": "assistant", "content": text},
                        {"role": "user", "content": f"Now step {i + 2}."},
                    ]
        finally:
            rec.shutdown()
    return out


def test_record_then_replay_sends_identical_bodies(tiny_recipe: ResolvedRecipe, tmp_path: Path) -> None:
    path = _record(tiny_recipe, tmp_path)
    wl = load_trace(path)
    assert len(wl.turns) == 3
    settings = ReplaySettings(warmup_turns=0)
    results = []
    for arm in ("a", "b"):
        with start_engine(tiny_recipe, tmp_path / arm) as eng:
            results.append(replay(eng, wl, settings))
    a, b = results
    assert a.sent == b.sent  # both arms receive byte-identical requests
    for turn, sent in zip(wl.turns, a.sent):
        body = json.loads(sent)
        forced = overrides(turn, settings)
        # The recorded request is sent as recorded: same keys, same order, same values; the replay
        # overrides only the keys it names (length forcing, greedy, seed, streaming).
        recorded_keys = [k for k in body if k in turn.request]
        assert recorded_keys == list(turn.request)
        assert {k: v for k, v in body.items() if k not in forced} == {
            k: v for k, v in turn.request.items() if k not in forced
        }
        assert body["messages"] == turn.request["messages"]
    for turn, row in zip(wl.turns, a.rows):
        assert row["generated_tokens"] == turn.output.completion_tokens
        assert row["prompt_tokens"] == turn.output.prompt_tokens
    assert a.valid and b.valid


def test_step_timing_per_start_equals_metrics_deltas(tiny_spec_recipe: ResolvedRecipe, tmp_path: Path) -> None:
    wl = load_trace(make_workload(tmp_path / "w.jsonl", turns=5, tokens=24))
    out = measure_start(tiny_spec_recipe, wl, ReplaySettings(warmup_turns=1), tmp_path)
    assert out.status == "ok", out.reason
    rows = out.rows
    decode_ms = sum(r["decode_ms"] for r in rows)
    tokens = sum(r["generated_tokens"] for r in rows)
    steps = sum(r["target_steps"] for r in rows)
    s = out.scrape
    assert s["llamacpp:tokens_predicted_seconds_total"] * 1000 == pytest.approx(decode_ms, abs=0.01 * len(rows))
    assert s["llamacpp:tokens_predicted_total"] == tokens
    assert s["llamacpp:spec_decode_num_draft_tokens_total"] == sum(r["drafted"] for r in rows)
    assert s["llamacpp:spec_decode_num_accepted_tokens_total"] == sum(r["accepted"] for r in rows)
    # Verify steps: each turn's first token comes from the prefill; the rest from target steps.
    assert steps - len(rows) <= s["llamacpp:spec_decode_num_drafts_total"] <= steps
    m = out.metrics
    measured = [r for r in rows if not r["warmup"]]
    assert m["verify_step_ms"] == pytest.approx(
        sum(r["decode_ms"] for r in measured) / sum(r["target_steps"] for r in measured)
    )
    assert m["tokens_per_step"] > 1.0


def test_turn_for_an_endpoint_the_engine_lacks(
    tiny_recipe: ResolvedRecipe, llama_server_bin: str, tmp_path: Path
) -> None:
    """A generic OpenAI-compatible engine serves no llama.cpp `/completion` endpoint: refused, turn named."""
    generic = ResolvedRecipe(
        name="generic",
        engine="openai",
        model="",
        args=[],
        env={},
        start_timeout_s=60,
        command=[llama_server_bin, "-m", tiny_recipe.model, "--host", "{host}", "--port", "{port}"],
    )
    wl = workload_from_turns(
        [
            Turn(
                turn_id="t-7",
                session_id="s",
                turn_index=0,
                endpoint="/completion",
                request={"prompt": "x"},
                output={"completion_tokens": 4},
            )
        ]
    )
    with start_engine(generic, tmp_path) as eng, pytest.raises(EngineRequestError) as e:
        replay(eng, wl)
    assert str(e.value) == "turn t-7: endpoint /completion is not served by openai"


def test_prompt_longer_than_context_marks_start_invalid(tiny_recipe: ResolvedRecipe, tmp_path: Path) -> None:
    small = tiny_recipe.model_copy(update={"args": [a if a != "4096" else "256" for a in tiny_recipe.args]})
    wl = workload_from_turns(
        [
            Turn(
                turn_id="ok-0",
                session_id="s",
                turn_index=0,
                endpoint="/completion",
                request={"prompt": "def f():"},
                output={"completion_tokens": 4},
            ),
            Turn(
                turn_id="long-1",
                session_id="s",
                turn_index=1,
                endpoint="/completion",
                request={"prompt": "word " * 2000},
                output={"completion_tokens": 4},
            ),
        ]
    )
    out = measure_start(small, wl, ReplaySettings(warmup_turns=0), tmp_path)
    assert out.status == "invalid"
    assert out.reason is not None and out.reason.startswith("turn long-1: llama-server answered 400 to /completion")


# ---------------------------------------------------------------- nothing hangs (issue 16)

FROZEN = Path(__file__).parent / "data" / "frozen_engine.py"


def _frozen_recipe() -> ResolvedRecipe:
    return ResolvedRecipe(
        name="frozen",
        engine="openai",
        model="",
        args=[],
        env={},
        command=[sys.executable, str(FROZEN), "--port", "{port}"],
        start_timeout_s=30,
    )


def _turns(n: int, length: int) -> list[Turn]:
    return [
        Turn(
            turn_id=f"t{i}",
            session_id="s",
            turn_index=i,
            endpoint="/v1/completions",
            request={"model": "m", "prompt": f"p{i}"},
            output={"completion_tokens": length},
            source="test",
        )
        for i in range(n)
    ]


def test_request_timeout_is_derived_from_the_turn() -> None:
    s = ReplaySettings(prefill_timeout_s=10, timeout_per_token_s=0.5)
    (short, long_) = _turns(1, 4)[0], _turns(1, 400)[0]
    assert request_timeout(short, s) == 12 and request_timeout(long_, s) == 210
    assert request_timeout(long_, ReplaySettings(request_timeout_s=3)) == 3
    # defaults are generous, and leave a registered design's canonical text unchanged
    assert request_timeout(long_, ReplaySettings()) == 120 + 2 * 400
    assert "request_timeout_s" not in ReplaySettings().model_dump()
    for bad in ({"request_timeout_s": 0}, {"timeout_per_token_s": -1}, {"prefill_timeout_s": float("inf")}):
        with pytest.raises(ValueError):
            ReplaySettings(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("stream", [True, False])
def test_a_ready_engine_that_never_answers_fails_the_start_with_the_reason(tmp_path: Path, stream: bool) -> None:
    """A real stand-in process answers /health and then never a completion: the start fails
    after the derived bound (0.5 s + 0.1 s x 5 tokens), naming it, and the process is reaped."""
    settings = ReplaySettings(warmup_turns=0, stream=stream, prefill_timeout_s=0.5, timeout_per_token_s=0.1)
    t0 = time.monotonic()
    out = measure_start(_frozen_recipe(), workload_from_turns(_turns(3, 5)), settings, tmp_path)
    took = time.monotonic() - t0
    assert out.status == "failed" and "sent nothing for 1.0 s (request timeout)" in (out.reason or ""), out.reason
    assert "turn t0" in (out.reason or "")
    assert took < 20, took  # start + one bound + stop, not 600 s
