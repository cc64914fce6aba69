"""The engine contract: every adapter is an ``Engine``; capabilities are protocols checked with
``isinstance``; the generic OpenAI adapter runs a real OpenAI-compatible server (llama-server)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from frankenstein.config import ResolvedRecipe
from frankenstein.engines import ADAPTERS, Engine, ForcedDecoder, TopLogprobs, adapter_for, start_engine
from frankenstein.engines.forcing import ForcedResult, ForcedTurn
from frankenstein.engines.llamacpp import LlamaCppEngine
from frankenstein.engines.openai import OpenAIEngine
from frankenstein.engines.sglang import SglangEngine
from frankenstein.engines.vllm import VllmEngine
from frankenstein.errors import EngineRequestError, FidelityError
from frankenstein.fidelity.forced import forced_decode, forcer, prepare_turns
from frankenstein.shipped import data_path
from frankenstein.workload.replay import ReplaySettings, replay
from frankenstein.workload.trace import Turn, workload_from_turns

from conftest import BASE_ARGS

pytestmark = pytest.mark.engine

SRC = Path(__file__).resolve().parents[1] / "src" / "frankenstein"


def _openai_recipe(binary: str) -> ResolvedRecipe:
    command = [binary, "-m", str(data_path("tiny-target.gguf")), "--host", "{host}", "--port", "{port}", *BASE_ARGS]
    return ResolvedRecipe(
        name="generic", engine="openai", model="", args=[], env={}, command=command, start_timeout_s=120
    )


def _turn(i: int, n: int = 6) -> Turn:
    return Turn(
        turn_id=f"t{i}",
        session_id="s",
        turn_index=i,
        endpoint="/v1/completions",
        request={"model": "m", "prompt": f"def f{i}(x):\n"},
        output={"completion_tokens": n},
        source="test",
    )


def test_every_adapter_in_the_table_is_an_engine(tmp_path: Path) -> None:
    for name, cls in ADAPTERS.items():
        recipe = ResolvedRecipe(name=name, engine=name, model="m", args=[], env={})  # type: ignore[arg-type]
        eng = adapter_for(recipe, tmp_path)
        assert isinstance(eng, cls) and isinstance(eng, Engine), name
    # capabilities are structural and checked with isinstance, never by probing attributes
    dummy = ResolvedRecipe(name="x", engine="openai", model="m", args=[], env={})
    assert isinstance(LlamaCppEngine(dummy, tmp_path), ForcedDecoder)
    assert isinstance(VllmEngine(dummy, tmp_path), ForcedDecoder) and isinstance(
        VllmEngine(dummy, tmp_path), TopLogprobs
    )
    assert isinstance(SglangEngine(dummy, tmp_path), ForcedDecoder)
    assert not isinstance(OpenAIEngine(dummy, tmp_path), ForcedDecoder)
    assert not isinstance(LlamaCppEngine(dummy, tmp_path), TopLogprobs)


PROBES = ("getattr(engine", "hasattr(engine", "getattr(eng,", "hasattr(eng,", "getattr(process", "hasattr(process")


def test_no_attribute_probing_of_engines_anywhere() -> None:
    """Every module of every folder: an engine is used through the contract and its capability protocols."""
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 150 and SRC / "design" / "start.py" in files  # every folder, not a chosen few
    found = [f"{f.relative_to(SRC)}: {p}" for f in files for p in PROBES if p in f.read_text()]
    assert found == []


def test_openai_adapter_runs_a_real_llama_server(llama_server_bin: str, tmp_path: Path) -> None:
    """The generic adapter launches a user command, waits for /health, streams and times requests,
    reads /metrics and /tokenize, stops; fidelity refuses it by name (it is no ForcedDecoder)."""
    with start_engine(_openai_recipe(llama_server_bin), tmp_path) as eng:
        assert isinstance(eng, OpenAIEngine) and isinstance(eng, Engine) and eng.pid is not None
        assert eng.ready_s is not None and eng.ready_s > 0
        body = {
            "model": "m",
            "prompt": "def main():\n",
            "max_tokens": 8,
            "temperature": 0.0,
            "seed": 1,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        reply = eng.request("/v1/completions", json.dumps(body).encode())
        assert reply.timing.generated_tokens == 8 and reply.ttft_ms is not None and reply.e2e_ms >= reply.ttft_ms
        assert reply.text
        plain = eng.request("/v1/completions", json.dumps({**body, "stream": False}).encode())
        assert plain.timing.generated_tokens == 8 and plain.text == reply.text  # greedy: the same text
        assert eng.tokenize("def main():\n")
        res = replay(eng, workload_from_turns([_turn(i) for i in range(3)]), ReplaySettings(warmup_turns=1))
        assert res.valid and [r["generated_tokens"] for r in res.rows] == [6, 6, 6]
        with pytest.raises(FidelityError, match="engine 'openai' .* has no forced-decode path"):
            prepare_turns(
                eng, [_turn(0).model_copy(update={"output": _turn(0).output.model_copy(update={"text": "x"})})]
            )
        pid = eng.pid
    assert subprocess.run(["ps", "-p", str(pid)], capture_output=True).returncode != 0


class ForcingDouble(OpenAIEngine):
    """A test-only adapter that brings the three fidelity methods: it is a ForcedDecoder by its shape."""

    kind = "double"

    def prompt_ids(self, turn: Turn) -> list[int]:
        return [1, 2, 3]

    def generate(self, prompt: list[int], n: int, *, turn_id: str | None = None) -> tuple[list[int], str]:
        return [7] * n, "x" * n

    def forced_decode(self, turns: Any, k: int, skipped: list[str] | None = None, progress: Any = None) -> ForcedResult:
        raise EngineRequestError("the double forces nothing", turn_id=turns[0].turn_id)


def test_capability_is_structural_and_refusal_names_the_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = ResolvedRecipe(name="generic", engine="openai", model="", args=[], env={}, command=["x"])
    plain = adapter_for(recipe, tmp_path)
    with pytest.raises(FidelityError, match=r"engine 'openai' \(recipe 'generic'\) has no forced-decode path"):
        forced_decode(plain, [ForcedTurn("t0", [1], [2], "recorded token ids")], 4)
    monkeypatch.setitem(ADAPTERS, "openai", ForcingDouble)  # registered from the test: one line
    double = adapter_for(recipe, tmp_path)
    assert isinstance(double, ForcingDouble) and forcer(double) is double
    with pytest.raises(EngineRequestError, match="the double forces nothing"):
        forced_decode(double, [ForcedTurn("t0", [1], [2], "recorded token ids")], 4)


def test_engine_modules_import_without_cycles() -> None:
    """base and stream no longer import each other: each imports cleanly on its own, in a fresh interpreter."""
    for mod in ("stream", "base", "contract", "prometheus", "scraped", "openai", "sse", "http", "forcing"):
        r = subprocess.run([sys.executable, "-c", f"import frankenstein.engines.{mod}"], capture_output=True, text=True)
        assert r.returncode == 0, (mod, r.stderr[-500:])
