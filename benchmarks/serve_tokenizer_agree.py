"""The GGUF-rebuilt tokenizer counts like llama-server on SmolLM2-135M (a GGUF with no tokenizer.json beside it).

A real llama-server on the real model (``--ctx-size 2048 --threads 1 --parallel 1 --jinja`` plus the CPU args
this machine needs, probed as in tests/conftest.py or given with ``--server-arg``; printed), then:

- ``gguf_tokenizer(model)`` (regioncache/gguf.py) timed in this process: rebuilding the tokenizer from the
  GGUF's metadata;
- a `frank serve` front in this process (``serving(ServeOptions(upstream=ENGINE))``, which rebuilds the same
  tokenizer and checks it against the engine at start);
- for each ``SEED:N`` of ``--sets``, the seeded fuzzed prompts of tests/test_serve_tokenizer.py (unicode,
  whitespace runs, code, added tokens; every 10th 3,000 pieces long, every 7th extending the one before): the
  engine's ``/tokenize`` ids against the rebuilt tokenizer's own ids, the front's ``/tokenize`` ids, and the
  front's ``/count`` with and without special tokens. Differences are counted, not asserted, and printed.

Run: .venv/bin/python benchmarks/serve_tokenizer_agree.py [--sets 1:150 2:400 3:300] [--server-arg=--no-repack]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx
from real_model import model_path, server_args
from tokenizers import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_serve_tokenizer import fuzzed_prompts  # noqa: E402

from frankenstein.config import ResolvedRecipe  # noqa: E402
from frankenstein.engines import start_engine  # noqa: E402
from frankenstein.engines.llamacpp import binary_version, find_llama_server  # noqa: E402
from frankenstein.regioncache.gguf import gguf_tokenizer  # noqa: E402
from frankenstein.regioncache.service import ServeOptions, serving  # noqa: E402


def differences(c: httpx.Client, front: str, engine: str, tok: Tokenizer, prompts: list[str]) -> dict[str, int]:
    out = {"rebuilt ids": 0, "front /tokenize": 0, "front /count": 0}
    for text in prompts:
        theirs = c.post(engine + "/tokenize", json={"content": text}).json()["tokens"]
        out["rebuilt ids"] += tok.encode(text, add_special_tokens=False).ids != theirs
        out["front /tokenize"] += c.post(front + "/tokenize", json={"content": text}).json()["tokens"] != theirs
        for special in (False, True):
            body = {"content": text, "add_special": special}
            n = len(c.post(engine + "/tokenize", json=body).json()["tokens"])
            out["front /count"] += c.post(front + "/count", json=body).json() != {"count": n}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=["1:150", "2:400", "3:300"], help="SEED:N, fuzzed prompt sets")
    ap.add_argument("--server-arg", action="append", default=None, help="extra llama-server arg (skips the probe)")
    a = ap.parse_args()
    model = model_path()
    assert not (model.parent / "tokenizer.json").exists(), f"{model.parent}/tokenizer.json: not GGUF-only"
    server = find_llama_server()
    extra, why = server_args(server, model, a.server_arg)
    args = ["--ctx-size", "2048", "--threads", "1", "--parallel", "1", "--jinja", *extra]
    print(f"llama-server {binary_version(server)}; model {model.name}; args {' '.join(args)} ({why})")
    t = time.perf_counter()
    tok = gguf_tokenizer(model)
    print(f"gguf_tokenizer({model.name}): {time.perf_counter() - t:.2f} s to rebuild")
    recipe = ResolvedRecipe(name="smollm2", engine="llamacpp", model=str(model), args=args, env={})
    total = 0
    with tempfile.TemporaryDirectory() as d, start_engine(recipe, Path(d) / "logs") as eng:
        engine = f"http://127.0.0.1:{eng.port}"
        lines: list[str] = []
        t = time.perf_counter()
        with serving(ServeOptions(upstream=engine, listen="127.0.0.1:0"), echo=lines.append) as front:
            print(f"front up in {time.perf_counter() - t:.2f} s: {' | '.join(lines)}")
            with httpx.Client(trust_env=False, timeout=120) as c:
                for spec in a.sets:
                    seed, n = (int(x) for x in spec.split(":"))
                    t = time.perf_counter()
                    diff = differences(c, front.url, engine, tok, fuzzed_prompts(seed=seed, n=n))
                    total += sum(diff.values())
                    shown = ", ".join(f"{k} {v}" for k, v in diff.items())
                    print(f"seed {seed}, {n} prompts: differences: {shown} ({time.perf_counter() - t:.1f} s)")
                st = c.get(front.url + "/frank/status").json()
    print(
        f"front status: enabled {st['enabled']}, chunks hit {st['chunks_hit']}; {total} differences in all "
        f"(load average {os.getloadavg()[0]:.1f} at the end)"
    )


if __name__ == "__main__":
    main()
