"""The SGLang adapter on recorded real SGLang answers (``tests/data/sglang/``, sources in its README).

SGLang cannot run here, so: the parsing is checked on those answers, marked as recorded; the process
life (launch, readiness, version, request, forced decode, stop) runs against a test double
(``tests/data/sglang/double_server.py``) that answers with the same recorded answers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from frankenstein.config import ResolvedRecipe
from frankenstein.engines import adapter_for, start_engine
from frankenstein.engines.forcing import ForcedTurn
from frankenstein.engines.prometheus import metrics_delta
from frankenstein.engines.sglang import (
    SglangEngine,
    input_topk,
    meta_of,
    timing_from_delta,
    timing_from_meta,
)
from frankenstein.errors import BinaryNotFoundError, ConfigError, FidelityError
from frankenstein.measure.timings import StepTiming

from conftest import pids_of

DATA = Path(__file__).resolve().parent / "data" / "sglang"


def recorded(name: str) -> dict[str, Any]:
    """A real SGLang answer, as recorded in tests/data/sglang (see its README for the source)."""
    return json.loads((DATA / name).read_text())


def test_recorded_eagle_answer() -> None:
    t = timing_from_meta(meta_of(recorded("generate_spec_pr13425.json")), speculative=True)
    assert t == StepTiming(
        prompt_tokens=58,
        cached_tokens=0,
        prompt_ms=None,
        generated_tokens=14,
        decode_ms=None,
        target_steps=4,
        drafted=20,
        accepted=9,
    )
    assert t.generated_tokens == 1 + t.target_steps + t.accepted  # type: ignore[operator]


def test_recorded_long_answer_with_few_accepted_drafts() -> None:
    t = timing_from_meta(meta_of(recorded("generate_spec_pr13754_meta_info.json")), speculative=True)
    assert (t.generated_tokens, t.target_steps, t.accepted, t.drafted) == (200, 188, 11, 940)
    assert t.generated_tokens == 1 + t.target_steps + t.accepted  # type: ignore[operator]


def test_recorded_newer_field_names() -> None:
    """PR 33518's comment gives the spec fields and, beside them, completion_tokens 106 (length-cut)."""
    meta = {**recorded("spec_fields_pr33518.json"), "completion_tokens": 106}
    t = timing_from_meta(meta, speculative=True)
    assert (t.target_steps, t.accepted, t.drafted, t.generated_tokens) == (43, 63, 215, 106)


def test_recorded_old_version_without_spec_or_timing() -> None:
    t = timing_from_meta(meta_of(recorded("generate_old_issue442_meta_info.json")), speculative=False)
    assert t == StepTiming(prompt_tokens=3432, generated_tokens=100, target_steps=99)
    assert timing_from_meta({"completion_tokens": 100}, speculative=True).target_steps is None


def test_timing_fields_of_enable_metrics_and_of_a_fork() -> None:
    """Built from the recorded EAGLE answer with fields added (none of the recordings has them):
    ``--enable-metrics`` stamps, and a fork's ``first_token_latency``."""
    meta = dict(recorded("generate_spec_pr13425.json")["meta_info"])
    stamped = {**meta, "request_received_ts": 100.0, "prefill_finished_ts": 100.05, "decode_finished_ts": 100.6}
    t = timing_from_meta(stamped, speculative=True)
    assert t.prompt_ms == pytest.approx(50.0) and t.decode_ms == pytest.approx(550.0)
    forked = {**meta, "first_token_latency": 0.0285512447357178}
    t = timing_from_meta(forked, speculative=True)
    assert t.decode_ms == pytest.approx(600.0) and t.prompt_ms == pytest.approx(28.5512447357178)


def test_openai_answer_uses_usage_and_sglext() -> None:
    body = {
        "choices": [{"text": "x"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 106, "prompt_tokens_details": {"cached_tokens": 4}},
        "sglext": {"spec": recorded("spec_fields_pr33518.json")},
    }
    t = timing_from_meta(meta_of(body), speculative=True)
    assert (t.prompt_tokens, t.cached_tokens, t.generated_tokens, t.target_steps, t.accepted) == (7, 4, 106, 43, 63)


def test_metrics_delta_timing() -> None:
    before = {
        'sglang:num_requests_total{is_streaming="true"}': 3.0,
        "sglang:generation_tokens_total": 90.0,
        "sglang:prompt_tokens_total": 30.0,
        "sglang:e2e_request_latency_seconds_sum": 2.0,
        "sglang:time_to_first_token_seconds_sum": 0.2,
    }
    after = {
        'sglang:num_requests_total{is_streaming="true"}': 4.0,
        "sglang:generation_tokens_total": 122.0,
        "sglang:prompt_tokens_total": 45.0,
        "sglang:e2e_request_latency_seconds_sum": 2.75,
        "sglang:time_to_first_token_seconds_sum": 0.25,
    }
    t = timing_from_delta(metrics_delta(before, after, "sglang:"), speculative=False)
    assert (t.generated_tokens, t.prompt_tokens, t.target_steps) == (32, 15, 31)
    assert t.decode_ms == pytest.approx(700.0)
    assert timing_from_delta(metrics_delta(before, before, "sglang:"), speculative=False) == StepTiming()


def test_recorded_logprobs_give_top_k_per_forced_position() -> None:
    meta = recorded("generate_logprobs_sglang_jax_pr13.json")["meta_info"]
    rows = input_topk(meta, 3, 3)
    assert rows[0] == ([315, 3283, 374], [-0.58203125, -2.140625, -3.765625])
    assert rows[2][0] == [13, 58883, 11]
    assert input_topk(meta, 1, 2) == [([13, 58883], [-2.09375, -2.34375])]
    with pytest.raises(FidelityError, match="SGLang returned 4 input positions with top logprobs, 5 were forced"):
        input_topk(meta, 5, 3)


def _recipe(**kw: object) -> ResolvedRecipe:
    base: dict[str, object] = {"name": "s", "engine": "sglang", "model": "/models/x", "args": [], "env": {}}
    return ResolvedRecipe(**{**base, **kw})  # type: ignore[arg-type]


def test_recipe_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FRANK_SGLANG_PYTHON", raising=False)
    assert isinstance(adapter_for(_recipe(), tmp_path), SglangEngine)
    with pytest.raises(ConfigError, match=r"^recipes\.s\.args: --model-path is chosen by Frankenstein; remove it$"):
        SglangEngine(_recipe(args=["--model-path", "x"]), tmp_path).check_recipe()
    with pytest.raises(BinaryNotFoundError, match="no Python interpreter with SGLang is configured"):
        SglangEngine(_recipe(), tmp_path).check_recipe()
    eng = SglangEngine(_recipe(python=sys.executable, args=["--speculative-algorithm", "EAGLE", "--tp", "2"]), tmp_path)
    eng.check_recipe()
    assert eng.command(30000) == [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/models/x",
        "--host",
        "127.0.0.1",
        "--port",
        "30000",
        "--enable-metrics",
        "--speculative-algorithm",
        "EAGLE",
        "--tp",
        "2",
    ]
    assert eng.speculative


def test_process_life_against_a_double_of_recorded_answers(tmp_path: Path) -> None:
    """Launch, readiness (no /ready → /health, 503 while starting), version, a /generate request timed
    from its meta_info, forced decode from recorded logprobs, stop — against the test double."""
    double = DATA / "double_server.py"
    recipe = _recipe(
        model="",
        command=[sys.executable, str(double), "--port", "{port}", "--starting", "3"],
        args=[],
        start_timeout_s=30,
    )
    with start_engine(recipe, tmp_path) as eng:
        assert isinstance(eng, SglangEngine)
        assert eng.version == "double-of-recorded-answers"
        assert eng.capabilities()["speculative"] == "EAGLE"
        assert eng.recipe.env["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] == "0"
        body = {"text": "x", "sampling_params": {"max_new_tokens": 14, "temperature": 0}}
        reply = eng.request("/generate", json.dumps(body).encode())
        assert reply.text == '{"name": "John", "age": 30}'
        assert (reply.timing.generated_tokens, reply.timing.target_steps, reply.timing.accepted) == (14, 4, 9)
        assert eng.last_sources["metrics"] == StepTiming()  # the double has no /metrics

        result = eng.forced_decode([ForcedTurn("t1", [1, 6722], [315, 9625, 374], "recorded token ids")], 3)
        assert result.positions == 3 and not result.error.any()
        assert result.ids[0].tolist() == [315, 3283, 374] and result.ids[1].tolist() == [279, 9625, 5616]
        pid = eng.pid
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]
    assert pids_of(str(double)) == []
