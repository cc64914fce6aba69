"""Issue 27 must show: a test-only engine adapter (tests/standin_engine.py, driving the OpenAI-compatible
stand-in server tests/data/standin_server.py, with its own ``/metrics`` names and an unprefixed setting
variable) is added with its module, ONE registration line (the fixture below) and docs — nothing in src/.
A real design registers, runs, and is analysed against it: real processes, real HTTP, real SQLite."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from frankenstein.config import ResolvedRecipe
from frankenstein.design.analysis import analyze
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design
from frankenstein.engines import ADAPTERS, Engine, process_names, register_adapter, start_engine, traits_of
from frankenstein.engines.prometheus import SCRAPES_ARTIFACT, Scrapes
from frankenstein.measure.machine import binary_sha256
from frankenstein.measure.noise import other_engines
from frankenstein.workload.trace import Turn, write_trace

from helpers_campaign import make_campaign
from standin_engine import SERVER, StandinEngine

TOML = """\
name = "standin"
served = "base"

[recipes.base]
engine = "standin"
args = ["--delay-ms", "4"]
start_timeout_s = 30

[parts.fast]
description = "a shorter decode delay"
args = ["--delay-ms", "1"]
"""

DESIGN = """\
name = "standin"
kind = "speed"
hypothesis = "a shorter decode delay makes each step faster"
blocks = 5
workload = "workloads/w.jsonl"
primary_metric = "verify_step_ms"

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["fast"]

[rule]
kind = "sign"
alpha = 0.05

[replay]
warmup_turns = 1
"""

ROUTE = {"route": "/v1/completions"}


@pytest.fixture
def standin() -> Iterator[None]:
    register_adapter("standin", StandinEngine)  # the one registration line
    try:
        yield
    finally:
        del ADAPTERS["standin"]


def _body(stream: bool) -> bytes:
    return json.dumps({"model": "m", "prompt": "def f(x):\n", "max_tokens": 5, "stream": stream}).encode()


def test_the_standin_adapter_through_the_contract(standin: None, tmp_path: Path) -> None:
    """Launch, ready, a plain and a streamed request with the server's own numbers, its response headers kept,
    two labelled scrapes around them, the noise guard's view of it, and the reap."""
    recipe = ResolvedRecipe(name="s", engine="standin", model="", args=["--delay-ms", "1"], env={})
    with start_engine(recipe, tmp_path) as eng:
        assert isinstance(eng, Engine) and eng.version == "standin 1.0"
        before = eng.scrape()
        plain = eng.request("/v1/completions", _body(False))
        assert plain.timing.generated_tokens == 5 and plain.timing.target_steps == 5
        assert plain.timing.decode_ms is not None and plain.timing.decode_ms >= 5 * 1.0
        assert float(plain.headers["x-standin-decode-ms"]) == pytest.approx(plain.timing.decode_ms, abs=0.001)
        streamed = eng.request("/v1/completions", _body(True))
        assert streamed.text == "tok " * 5 and streamed.chunk_gaps_ms is not None and len(streamed.chunk_gaps_ms) == 4
        assert streamed.timing.decode_ms is not None and streamed.headers["content-type"] == "text/event-stream"
        scrapes = Scrapes(before, eng.scrape())
        assert scrapes.delta("standin:requests_total", ROUTE) == 2.0
        assert scrapes.delta("standin:requests_total", {"route": "/v1/chat/completions"}) == 0.0
        assert scrapes.delta("standin:generated_tokens_total") == 10.0
        assert eng.pid in dict(other_engines(process_names()))  # its process_names trait
        pid = eng.pid
    assert pid not in dict(other_engines(process_names()))


def test_a_design_against_the_standin_adapter(standin: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Registration pins the program its trait names; every start records the unprefixed setting it inherited
    (and not another engine's), both labelled scrapes and their counter deltas; the verdict follows the delay."""
    monkeypatch.setenv("DECODE_DELAY_MS", "3")  # its own setting: recorded with each start
    monkeypatch.setenv("LLAMA_ARG_UBATCH", "64")  # llama.cpp's: not this engine's, not recorded
    c = make_campaign(tmp_path / "c", TOML)
    turns = [
        Turn(
            turn_id=f"s-{i}",
            session_id="s",
            turn_index=i,
            endpoint="/v1/completions",
            request={"model": "m", "prompt": f"def f{i}(x):\n"},
            output={"completion_tokens": 8},
            source="test",
        )
        for i in range(4)
    ]
    (c.root / "workloads").mkdir(exist_ok=True)
    write_trace(c.root / "workloads" / "w.jsonl", turns)
    (c.root / "standin.toml").write_text(DESIGN)
    reg = register(c, c.root / "standin.toml")
    pinned = [p for pins in reg.frozen.files.values() for p in pins]
    assert {(p["role"], p["path"], p["sha256"]) for p in pinned} == {
        ("engine binary", str(SERVER), binary_sha256(str(SERVER)))
    }
    run_design(c, reg.design_id, echo=lambda _: None)

    rows = c.store.starts_of(reg.design_id)
    assert len(rows) == 10 and all(r.ok and r.engine == "standin" for r in rows)
    assert all(r.engine_version == "standin 1.0" for r in rows)
    assert all(r.resources["engine_binary"]["path"] == str(SERVER) for r in rows)
    envs = [r.resources["engine_env"] for r in rows]
    assert all(e.get("DECODE_DELAY_MS") == "3" and "LLAMA_ARG_UBATCH" not in e for e in envs)
    scrapes = c.store.artifacts_of(reg.design_id, SCRAPES_ARTIFACT)
    deltas = c.store.artifacts_of(reg.design_id, "metrics_delta.json")
    assert set(scrapes) == set(deltas) == {r.id for r in rows}
    for start_id, data in scrapes.items():
        assert Scrapes.from_json(data).delta("standin:requests_total", ROUTE) == 4.0  # warm-up + 3 measured
        assert json.loads(deltas[start_id])['standin:requests_total{route="/v1/completions"}'] == 4.0
    assert analyze(c, reg.design_id).word == "confirmed"
    assert traits_of("standin").drafts(["--draft"]) and not traits_of("standin").drafts(["--delay-ms", "1"])
    c.close()
