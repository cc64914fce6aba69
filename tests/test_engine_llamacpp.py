"""The llama.cpp adapter against the real llama-server and the shipped tiny models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from frankenstein.config import ResolvedRecipe
from frankenstein.engines import start_engine
from frankenstein.engines.process import runtime_dir


pytestmark = pytest.mark.engine


def _body(n: int = 32, **extra: object) -> bytes:
    return json.dumps(
        {
            "prompt": "def main():\n",
            "n_predict": n,
            "temperature": 0.0,
            "seed": 1,
            "ignore_eos": True,
            "cache_prompt": False,
            **extra,
        }
    ).encode()


def _counter(m: dict[str, float], name: str) -> float:
    return sum(v for k, v in m.items() if k.split("{")[0] == name)


def test_start_request_stop(tiny_recipe: ResolvedRecipe, tmp_path: Path, no_leftover_engines: None) -> None:
    with start_engine(tiny_recipe, tmp_path) as eng:
        assert eng.get("/health").status_code == 200
        reply = eng.request("/completion", _body(24))
        assert reply.timing.generated_tokens == 24
        assert reply.timing.target_steps == 23  # no draft: one target step per decode token
        assert reply.text
        ids = eng.tokenize("def main():\n")
        assert ids and all(isinstance(i, int) for i in ids)
        pid = eng.pid
        log = eng.log_path
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]
    assert log is not None and log.exists() and log.parent == tmp_path
    assert list(runtime_dir().glob("*.json")) == []


def test_streamed_request_measures_ttft(tiny_recipe: ResolvedRecipe, tmp_path: Path) -> None:
    with start_engine(tiny_recipe, tmp_path) as eng:
        reply = eng.request("/completion", _body(16, stream=True))
    assert reply.timing.generated_tokens == 16
    assert reply.ttft_ms is not None and 0 < reply.ttft_ms <= reply.e2e_ms


def test_verify_step_time_matches_metrics(tiny_spec_recipe: ResolvedRecipe, tmp_path: Path) -> None:
    """Time per verify step from the response timings agrees with /metrics deltas."""
    with start_engine(tiny_spec_recipe, tmp_path) as eng:
        eng.request("/completion", _body(8))  # warm-up
        before = eng.metrics()
        replies = [eng.request("/completion", _body(48)) for _ in range(3)]
        after = eng.metrics()
    decode_ms = sum(r.timing.decode_ms or 0 for r in replies)
    steps = sum(r.timing.target_steps or 0 for r in replies)
    accepted = sum(r.timing.accepted or 0 for r in replies)
    drafted = sum(r.timing.drafted or 0 for r in replies)
    assert drafted > 0 and 0 < accepted <= drafted
    d_seconds = _counter(after, "llamacpp:tokens_predicted_seconds_total") - _counter(
        before, "llamacpp:tokens_predicted_seconds_total"
    )
    d_drafts = _counter(after, "llamacpp:spec_decode_num_drafts_total") - _counter(
        before, "llamacpp:spec_decode_num_drafts_total"
    )
    assert d_seconds * 1000 == pytest.approx(decode_ms, rel=1e-3, abs=1.0)
    assert d_drafts == pytest.approx(steps, abs=len(replies))
    assert (d_seconds * 1000 / d_drafts) == pytest.approx(decode_ms / steps, rel=0.05)
