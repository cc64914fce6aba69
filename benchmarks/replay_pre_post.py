"""`pre_ms` / `post_ms` (measure/timings.py) of `frank replay --url` against a running llama-server on the
real model (SmolLM2-135M-Instruct Q4_1, `make real-model`), chat, streamed.

The workload: the first ``--turns`` turns of the shipped demo workload (agent chat turns, system prompt and
growing history), each forced to ``--tokens`` output tokens (recorded prompt counts dropped: they are the tiny
model's). The server: ``llama-server -m MODEL --threads 1 --parallel 1 --ctx-size 4096 --jinja --seed 1`` plus
the CPU args this machine needs (probed as in tests/conftest.py, or ``--server-arg``, repeatable; printed).
`frank replay base TURNS -c CAMPAIGN --url URL --json` runs as the real CLI in its own process (its first turn
is the warm-up); reported per measured turn and per start, with the prompt token range the server counted.

Run: .venv/bin/python benchmarks/replay_pre_post.py [--turns 9] [--tokens 32] [--server-arg=--no-repack]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from real_model import model_path, server_args

from frankenstein.config import ResolvedRecipe
from frankenstein.engines import start_engine
from frankenstein.engines.llamacpp import binary_version, find_llama_server
from frankenstein.shipped import data_path
from frankenstein.workload.trace import RecordedOutput, load_trace, write_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=9)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--server-arg", action="append", default=None, help="extra llama-server arg (skips the probe)")
    a = ap.parse_args()
    model = model_path()
    server = find_llama_server()
    extra, why = server_args(server, model, a.server_arg)
    args = ["--threads", "1", "--parallel", "1", "--ctx-size", "4096", "--jinja", "--seed", "1", *extra]
    print(f"llama-server {binary_version(server)}; model {model.name}; args {' '.join(args)} ({why})")
    turns = [
        t.model_copy(update={"output": RecordedOutput(completion_tokens=a.tokens)})
        for t in load_trace(data_path("demo-workload.jsonl")).turns[: a.turns]
    ]
    recipe = ResolvedRecipe(name="smollm2", engine="llamacpp", model=str(model), args=args, env={})
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        wl = tmp / "w.jsonl"
        write_trace(wl, turns)
        camp = tmp / "camp"
        subprocess.run([sys.executable, "-m", "frankenstein", "init", str(camp)], check=True, capture_output=True)
        with start_engine(recipe, tmp / "logs") as eng:
            cmd = [sys.executable, "-m", "frankenstein", "replay", "base", str(wl), "-c", str(camp)]
            cmd += ["--url", f"http://127.0.0.1:{eng.port}", "--json"]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"frank replay failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    doc = json.loads(r.stdout)
    rows = [t["metrics"] for t in doc["turns"] if not t["warmup"]]
    errors = [t["error"] for t in doc["turns"] if t.get("error")]
    assert not errors, errors
    assert all(m["generated_tokens"] == a.tokens for m in rows), [m["generated_tokens"] for m in rows]
    pre = [m["pre_ms"] for m in rows]
    post = [m["post_ms"] for m in rows]
    prompt = [m["prompt_tokens"] for m in rows]
    per = doc["metrics"]
    print(
        f"{len(rows)} measured turns (+1 warm-up), {min(prompt)}-{max(prompt)} prompt tokens, {a.tokens} output "
        f"tokens each, chat, streamed (load average {os.getloadavg()[0]:.1f} at the end)"
    )
    print(f"  pre_ms  median {statistics.median(pre):.2f} ({min(pre):.2f} to {max(pre):.2f}) per turn")
    print(f"  post_ms median {statistics.median(post):.2f} ({min(post):.2f} to {max(post):.2f}) per turn")
    print(f"  per start: pre_ms {per['pre_ms']:.2f}, post_ms {per['post_ms']:.2f}")


if __name__ == "__main__":
    main()
