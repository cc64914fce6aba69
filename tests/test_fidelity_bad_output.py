"""Bad engine output through the whole path: a real subprocess behind the real llama.cpp adapter, the
runner, the store and the analysis. The subprocess is a **test double** of llama-server (llama-server
itself never returns short lists, NaN or a different tokenization on purpose): a small HTTP server
that answers ``/completion`` with deterministic top-k lists and, by ``FAKE_MODE``, breaks them."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from conftest import frank
from frankenstein.campaign import init_campaign, open_campaign
from frankenstein.design.analysis import analyze
from frankenstein.design.kinds.fidelity import run_forced
from frankenstein.fidelity.compare import compare, summarize_pairs
from frankenstein.shipped import data_path
from frankenstein.workload.trace import Turn, load_trace, write_trace

FAKE = r'''#!{python}
"""Test double of llama-server for the fidelity tests (see the test module docstring)."""
import json, math, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

if "--version" in sys.argv:
    print("version: 0 (fake llama-server, a test double)")
    sys.exit(0)
PORT = int(sys.argv[sys.argv.index("--port") + 1])
MODE = os.environ.get("FAKE_MODE", "good")
VOCAB = 100

def tokenize(text):
    shift = 1 if MODE == "shifted" else 0
    return [(ord(ch) + shift) % VOCAB for ch in text]

def probs(n, k):
    raw = [math.exp(-0.7 * i) for i in range(k)]
    z = sum(raw) * 1.01
    ids = [(n * 7 + i) % VOCAB for i in range(k)]
    lps = [math.log(r / z) for r in raw]
    if MODE == "short" and n % 4 == 0:
        ids, lps = ids[:-1], lps[:-1]
    if MODE == "nan" and n % 4 == 1:
        lps[2] = None            # what llama.cpp's JSON writer makes of NaN
    if MODE == "inf" and n % 4 == 2:
        lps[1] = float("-inf")   # Python's json writes -Infinity
    return [{{"id": i, "token": "x", "logprob": lp}} for i, lp in zip(ids, lps)]

class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def send(self, obj, code=200):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        if self.path == "/v1/models":
            return self.send({{"data": [{{"meta": {{"n_vocab": VOCAB}}}}]}})
        if self.path == "/metrics":
            return self.send({{}})
        return self.send({{"status": "ok"}})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            return self.send({{"tokens": tokenize(body["content"])}})
        if self.path == "/completion":
            n = len(body["prompt"])
            if MODE == "error" and n % 5 == 0:
                return self.send({{"error": "boom"}}, 500)
            top = probs(n, min(body.get("n_probs", 0), VOCAB))
            return self.send({{"content": "x", "completion_probabilities": [{{"id": top[0]["id"], "logprob": top[0]["logprob"], "top_logprobs": top}}]}})
        return self.send({{"error": "not found"}}, 404)

ThreadingHTTPServer(("127.0.0.1", PORT), H).serve_forever()
'''


@pytest.fixture
def fake_bin(tmp_path: Path) -> str:
    path = tmp_path / "fake-llama-server"
    path.write_text(FAKE.format(python=sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def _workload(path: Path, turns: int = 2, tokens: int = 8) -> Path:
    rows = [
        Turn(
            turn_id=f"t{i}",
            session_id="s",
            turn_index=i,
            endpoint="/completion",
            request={"prompt": f"prompt {i}: "},
            output={"token_ids": list(range(20, 20 + tokens)), "completion_tokens": tokens},
            source="test",
        )
        for i in range(turns)
    ]
    write_trace(path, rows)
    return path


def _toml(fake: str) -> str:
    model = data_path("tiny-target.gguf")
    return f"""\
name = "fake"
served = "base"

[recipes.base]
engine = "llamacpp"
model = "{model}"
binary = "{fake}"
start_timeout_s = 30
"""


def _part(name: str, mode: str) -> str:
    return f'\n[parts.{name}]\ndescription = "{mode}"\nenv = {{ FAKE_MODE = "{mode}" }}\n'


def _forced(tmp_path: Path, fake: str, mode: str) -> dict[str, object]:
    modes = ("good", "short", "nan", "inf", "shifted", "error")
    c = init_campaign(tmp_path / "c", toml=_toml(fake) + "".join(_part(m, m) for m in modes))
    wl = load_trace(_workload(tmp_path / "w.jsonl"))
    results = {}
    for arm, part in (("served", "good"), ("candidate", mode)):
        out, res, _ = run_forced(c.recipe("base", [part]), wl, c.logs, 5, None)
        assert out.status == "ok" and res is not None, out.reason
        results[arm] = res
    c.close()
    return summarize_pairs([compare(results["served"], results["candidate"])], 0.5)  # type: ignore[arg-type]


def test_fewer_than_k_logprobs(tmp_path: Path, fake_bin: str) -> None:
    s = _forced(tmp_path, fake_bin, "short")
    assert s["bad"]["short"] == 4 and s["bad_total"] == 4 and s["positions"] == 12  # type: ignore[index]


def test_nan_logprobs(tmp_path: Path, fake_bin: str) -> None:
    s = _forced(tmp_path, fake_bin, "nan")
    assert s["bad"]["nonfinite"] == 4 and s["positions"] == 12  # type: ignore[index]


def test_inf_logprobs(tmp_path: Path, fake_bin: str) -> None:
    s = _forced(tmp_path, fake_bin, "inf")
    assert s["bad"]["nonfinite"] == 4 and s["positions"] == 12  # type: ignore[index]


def test_positions_that_do_not_line_up(tmp_path: Path, fake_bin: str) -> None:
    s = _forced(tmp_path, fake_bin, "shifted")  # the candidate tokenizes the prompts differently
    assert s["bad"]["misaligned"] == 16 and s["positions"] == 0  # type: ignore[index]
    assert s["bad_examples"][0] == "turn t0: the two starts forced different token ids"  # type: ignore[index]


def test_failed_requests(tmp_path: Path, fake_bin: str) -> None:
    s = _forced(tmp_path, fake_bin, "error")
    assert s["bad"]["error"] == 4 and s["positions"] == 12  # type: ignore[index]


def test_design_with_bad_output_is_invalid_and_says_why(tmp_path: Path, fake_bin: str) -> None:
    root = tmp_path / "c"
    init_campaign(root, toml=_toml(fake_bin) + _part("nan", "nan")).close()
    _workload(root / "workloads" / "w.jsonl")
    (root / "d.toml").write_text("""\
name = "fid"
kind = "fidelity"
blocks = 1
starts_per_arm = 2
workload = "workloads/w.jsonl"
[arms.served]
recipe = "served"
[arms.candidate]
recipe = "served"
parts = ["nan"]
[rule]
kind = "fidelity"
tolerance = 1.0
[fidelity]
top_k = 5
""")
    assert frank("register", str(root / "d.toml"), "-c", str(root)).returncode == 0
    r = frank("run", "fid-1", "-c", str(root))
    assert r.returncode == 0, r.stderr
    a = frank("analyze", "fid-1", "-c", str(root))
    assert a.returncode == 0, a.stderr
    assert "verdict: invalid (bad engine output at candidate positions (8 nonfinite); not averaged in)" in a.stdout
    assert "  noise floor: none" in a.stdout and "  candidate: 8 nonfinite" in a.stdout
    with open_campaign(root) as c:
        summary = analyze(c, "fid-1").fidelity
    assert summary["candidate"]["bad"]["nonfinite"] == 8 and summary["candidate"]["positions"] == 12
    assert summary["noise_floor"]["kl"]["max"] == 0.0


def test_a_workload_without_outputs_cannot_be_forced(tmp_path: Path, fake_bin: str) -> None:
    c = init_campaign(tmp_path / "c", toml=_toml(fake_bin))
    rows = [
        Turn(
            turn_id=f"t{i}",
            session_id="s",
            turn_index=i,
            endpoint="/completion",
            request={"prompt": "p"},
            output={"completion_tokens": 4},
            source="test",
        )
        for i in range(4)
    ]
    write_trace(tmp_path / "w.jsonl", rows)
    out, res, _ = run_forced(c.recipe("base"), load_trace(tmp_path / "w.jsonl"), c.logs, 5, None)
    c.close()
    assert res is None and out.status == "invalid"
    assert out.reason == (
        "no turn could be forced: 4 turn(s) (t0, t1, t2, …): recorded output has neither token ids nor text"
    )
