"""Cold-cache vs warm-cache start time of one vLLM recipe with torch.compile on (no ``-O0``).

The vLLM CPU build (``.venv-vllm``) serves the tiny Hugging Face Llama of
``scripts/make_tiny_hf_llama.py``; every start is a fresh engine process launched the way a design's
start is (the adapter, ``design.start.start_engine``/``stop_engine`` timing launch, ready and stop),
with the cache variables of :mod:`frankenstein.design.caches` pointing at

- cold: a new empty folder per start (what ``cache = "cold"`` gives), and
- warm: one folder kept across starts (``cache = "warm"``), primed by one start before the measured ones.

The measured starts alternate cold, warm, cold, warm, … in one run, so machine drift hits both alike.
Each start answers one completion before it stops (the server really serves). Prints one row per
start and the medians, and the ratio warm/cold of launch → ready.

Run: FRANK_VLLM_PYTHON=.venv-vllm/bin/python .venv/bin/python benchmarks/vllm_compile_cache.py --pairs 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from frankenstein.config import ResolvedRecipe
from frankenstein.design import phases
from frankenstein.design.caches import CACHE_VARS, cache_env, size_of
from frankenstein.design.start import start_engine, stop_engine
from frankenstein.engines.process import launch_env
from frankenstein.engines.vllm import VllmEngine

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--dtype", "float32", "--max-model-len", "1024", "--seed", "1"]  # no -O0: torch.compile on
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


def one_start(recipe: ResolvedRecipe, folder: Path, logs: Path) -> dict[str, float | str | int]:
    for sub in CACHE_VARS.values():
        (folder / sub).mkdir(parents=True, exist_ok=True)
    files_before, bytes_before = size_of(folder)
    env, _ = cache_env(folder, recipe.env)
    engine = VllmEngine(recipe, logs)
    with phases.recording() as rec, launch_env(env):
        t0 = time.monotonic()
        try:
            start_engine(engine)
            t = time.monotonic()
            engine.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 8, "temperature": 0.0})
            first_s = time.monotonic() - t
        finally:
            stop_engine(engine)
        total = time.monotonic() - t0
        record = rec.finish()["phases"]
    files_after, bytes_after = size_of(folder)
    p = record["phases"]
    return {
        "launch_s": round(p.get("launch", 0.0), 2),
        "ready_s": round(p.get("ready", 0.0), 2),
        "first_request_s": round(first_s, 3),
        "stop_s": round(p.get("stop", 0.0), 2),
        "stopped_by": str(record["notes"].get("stopped_by")),
        "total_s": round(total, 2),
        "cache_files_before": files_before,
        "cache_bytes_before": bytes_before,
        "cache_bytes_after": bytes_after,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=2, help="cold/warm pairs measured after the priming start")
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    a = ap.parse_args()
    python = os.environ.get("FRANK_VLLM_PYTHON") or str(ROOT / ".venv-vllm" / "bin" / "python")
    work = Path(tempfile.mkdtemp(prefix="frank-vllm-cache-"))
    model = work / "tiny-hf"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_tiny_hf_llama.py"), "--out", str(model)], check=True)
    recipe = ResolvedRecipe(
        name="tiny-vllm-compiled",
        engine="vllm",
        model=str(model),
        python=python,
        args=ARGS,
        env=ENV,
        start_timeout_s=900,
    )
    logs = work / "logs"
    warm = work / "warm"
    rows = []
    prime = one_start(recipe, warm, logs)
    print(json.dumps({"start": "warm (priming, cache empty)", **prime}), flush=True)
    rows.append({"kind": "prime", **prime})
    for i in range(a.pairs):
        cold = work / f"cold-{i}"
        row = one_start(recipe, cold, logs)
        shutil.rmtree(cold, ignore_errors=True)
        print(json.dumps({"start": f"cold {i + 1}", **row}), flush=True)
        rows.append({"kind": "cold", **row})
        row = one_start(recipe, warm, logs)
        print(json.dumps({"start": f"warm {i + 1}", **row}), flush=True)
        rows.append({"kind": "warm", **row})
    for kind in ("cold", "warm"):
        ready = [float(r["ready_s"]) for r in rows if r["kind"] == kind]
        total = [float(r["total_s"]) for r in rows if r["kind"] == kind]
        print(
            f"{kind}: launch→ready median {statistics.median(ready):.1f} s {ready}; start total median "
            f"{statistics.median(total):.1f} s"
        )
    cold_ready = statistics.median(float(r["ready_s"]) for r in rows if r["kind"] == "cold")
    warm_ready = statistics.median(float(r["ready_s"]) for r in rows if r["kind"] == "warm")
    print(f"warm/cold launch→ready: {warm_ready / cold_ready:.3f} (saved {cold_ready - warm_ready:.1f} s per start)")
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
