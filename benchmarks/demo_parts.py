"""Which part could `frank demo` adopt on this machine? Each candidate part against the demo's served
recipe (the tiny shipped models, llama.cpp on the CPU) in the demo's own speed design shape: 5 blocks,
4 turns of the demo workload, sign test at 0.05, decode_ms_per_token. Prints one row per run.

    .venv/bin/python benchmarks/demo_parts.py --repeats 2

A part the demo can show being adopted must confirm in (nearly) every repeat on an ordinary machine.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from frankenstein.campaign import default_toml, init_campaign
from frankenstein.config import load_config
from frankenstein.demo import SPEED_DESIGN
from frankenstein.design.analysis import analyze
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design

PARTS: dict[str, list[str] | None] = {
    "ngram-simple": [
        "--spec-type",
        "ngram-simple",
        "--spec-ngram-simple-size-n",
        "4",
        "--spec-ngram-simple-size-m",
        "16",
    ],
    "flash-attn": ["--flash-attn", "on"],
    "threads2": ["--threads", "2"],
    "ubatch64": ["--ubatch-size", "64"],
    "top-k1": ["--top-k", "1"],
    "poll0": ["--poll", "0"],
    "q8": None,  # the shipped part: the Q8_0 target
}


def one(name: str, args: list[str] | None, root: Path) -> dict[str, object]:
    c = init_campaign(root, toml=default_toml("demo"))
    with c:
        part = "q8" if args is None else "bench"
        if args is not None:
            with open(root / "frank.toml", "a") as f:
                f.write(f'\n[parts.bench]\ndescription = "{name}"\nargs = {json.dumps(args)}\n')
            c.config = load_config(root / "frank.toml")
        design = root / "d.toml"
        design.write_text(SPEED_DESIGN.format(blocks=5, turns=4).replace('parts = ["draft"]', f'parts = ["{part}"]'))
        reg = register(c, design)
        t0 = time.monotonic()
        run_design(c, reg.design_id, echo=lambda s: None)
        a = analyze(c, reg.design_id)
        v = a.verdict
        assert v is not None
        return {
            "part": name,
            "ratio": round(v.geomean_ratio or 0.0, 4),
            "in_favour": v.in_favour,
            "verdict": a.word,
            "run_s": round(time.monotonic() - t0, 1),
        }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--parts", nargs="*", default=list(PARTS))
    opts = ap.parse_args()
    for _ in range(opts.repeats):
        for name in opts.parts:
            with tempfile.TemporaryDirectory() as tmp:
                print(json.dumps(one(name, PARTS[name], Path(tmp) / "c")), flush=True)


if __name__ == "__main__":
    main()
