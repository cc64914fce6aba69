"""frank's replay at a concurrency and a request rate beside AIPerf 0.13 at the same settings, on one llama-server.

One server (the shipped tiny model, ``--parallel`` = the concurrency, 4096 tokens of context per slot), the first ``--turns`` turns of the shipped
demo workload. frank replays them in process (``workload/replay.py``: ``ReplaySettings(concurrency, rate,
arrivals = "poisson", goodput)``, no warm-up turn); AIPerf gets the same turns exported with ``frank workload
export --to aiperf`` (``mooncake_trace`` with the verbatim payloads, each turn its own session: :func:`independent`) and ``--concurrency N --request-rate R
--arrival-pattern poisson --goodput "time_to_first_token:T inter_token_latency:I"``. The two alternate for
``--rounds`` rounds, frank first in even rounds. One unmeasured pass warms the server first.

Reported per tool (median over rounds): output tokens/s, requests/s and goodput over the run's wall span, and
TTFT p50/p90/p99 and per-request inter-token latency p50/p90/p99. frank's per-request ITL here is AIPerf's
(``tpot_ms``: (e2e − TTFT) / (tokens − 1)); frank's goodput counts a request's mean chunk gap against the ITL
target, AIPerf's its inter_token_latency, so the two goodputs can differ where a target sits inside the
tails. Beside them, the server's own decode ms per token (from its log, the same source for both tools), which
says whether a difference in ITL is the server's or the client's. Every frank request generated exactly its recorded length (checked); for AIPerf the output says whether
it sent each recorded turn once (``same_turns_as_recorded``, from the output lengths it recorded).

Run: .venv/bin/python benchmarks/concurrency_side_by_side.py [--concurrency 4 --rate 8 --turns 40 --rounds 2]
     [--ttft-ms 100 --itl-ms 20] [--aiperf .venv-aiperf/bin/aiperf]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from frankenstein import __version__
from frankenstein.config import ResolvedRecipe
from frankenstein.design.percentiles import percentile
from frankenstein.engines import start_engine
from frankenstein.engines.llamacpp import binary_version, find_llama_server
from frankenstein.shipped import data_path
from frankenstein.workload.export import Export, export_workload, write_export
from frankenstein.workload.replay import GoodputTargets, ReplaySettings, recorded_length, replay
from frankenstein.workload.trace import Workload, load_trace, workload_from_turns

QS = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
EVAL = re.compile(r"(?<!prompt )\beval time =\s*([\d.]+) ms /\s*(\d+) (?:tokens|runs)")


def server_eval(log: Path, start: int, expected: int) -> list[float]:
    """The server's own decode ms per token of each request finished after byte ``start`` of its log (llama-server's
    ``eval time = X ms / N tokens`` lines), once ``expected`` of them are there or 15 s have passed."""
    deadline = time.monotonic() + 15
    while True:
        text = log.read_bytes()[start:].decode("utf-8", "replace")
        found = [float(ms) / int(n) for ms, n in EVAL.findall(text) if int(n) > 0]
        if len(found) >= expected or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def settings(args: argparse.Namespace) -> ReplaySettings:
    return ReplaySettings(
        concurrency=args.concurrency,
        rate=args.rate,
        arrivals="poisson",
        warmup_turns=0,
        stream=True,
        goodput=GoodputTargets(ttft_ms=args.ttft_ms, itl_ms=args.itl_ms),
    )


def pcts(xs: list[float]) -> dict[str, float]:
    return {k: round(percentile(xs, q), 3) for k, q in QS.items()}


def run_frank(eng: Any, wl: Workload, s: ReplaySettings) -> dict[str, Any]:
    result = replay(eng, wl, s)
    assert result.valid, result.invalid
    rows = [r for r in result.rows if not r["warmup"]]
    assert [r["generated_tokens"] for r in rows] == [recorded_length(t) for t in wl.turns]
    tpot = [(r["e2e_ms"] - r["ttft_ms"]) / (r["generated_tokens"] - 1) for r in rows if r["generated_tokens"] > 1]
    m = result.metrics
    return {
        "output_tokens_per_s": m["output_tokens_per_s"],
        "requests_per_s": m["requests_per_s"],
        "goodput": m["goodput"],
        "ttft_ms": pcts([r["ttft_ms"] for r in rows]),
        "itl_ms": pcts(tpot),
        "most_waited_ms": max(r["sent_ms"] - r["due_ms"] for r in rows),
    }


def run_aiperf(args: argparse.Namespace, port: int, data: Path, n: int, tok: Path, art: Path) -> dict[str, Any]:
    cmd = [
        args.aiperf, "profile", "--custom-dataset-type", "mooncake_trace", "--input-file", str(data),
        "--endpoint-type", "chat", "--streaming", "--url", f"http://127.0.0.1:{port}", "-m", "tiny",
        "--concurrency", str(args.concurrency), "--request-rate", str(args.rate), "--arrival-pattern", "poisson",
        "--request-count", str(n), "--dataset-sampling-strategy", "sequential", "--tokenizer", str(tok), "--use-server-token-count",
        "--goodput", f"time_to_first_token:{args.ttft_ms} inter_token_latency:{args.itl_ms}",
        "--output-artifact-dir", str(art), "--ui-type", "none", "--connection-reuse-strategy", "never",
    ]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=art.parent)
    if r.returncode != 0:
        raise SystemExit(f"aiperf failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    records = [json.loads(x) for x in (art / "profile_export.jsonl").read_text().splitlines() if x.strip()]
    records.sort(key=lambda x: x["metadata"]["request_start_ns"])
    lengths = [int(x["metrics"]["output_sequence_length"]["value"]) for x in records]
    summary = json.loads((art / "profile_export_aiperf.json").read_text())

    def avg(key: str) -> float | None:
        v = summary.get(key)
        return round(v["avg"], 3) if isinstance(v, dict) and "avg" in v else None

    ttft = [x["metrics"]["time_to_first_token"]["value"] for x in records]
    itl = [x["metrics"]["inter_token_latency"]["value"] for x in records if "inter_token_latency" in x["metrics"]]
    return {
        "output_tokens_per_s": avg("output_token_throughput"),
        "requests_per_s": avg("request_throughput"),
        "goodput": avg("goodput"),
        "ttft_ms": pcts(ttft),
        "itl_ms": pcts(itl),
        "same_turns_as_recorded": sorted(lengths) == sorted(args.recorded),  # each recorded turn once
    }


def independent(export: Export) -> Export:
    """Each exported turn its own AIPerf session: frank sends every turn with its recorded history, so turns of
    one chat do not wait for each other; under one ``session_id`` AIPerf would send a chat's turns one after
    another (and, with more lanes than chats, wrap the data set and repeat turns)."""
    lines = [{**line, "session_id": f"{line['session_id']}-{i}"} for i, line in enumerate(export.lines)]
    return dataclasses.replace(export, lines=lines)


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, v in runs[0].items():
        if isinstance(v, dict):
            out[key] = {k: round(statistics.median(r[key][k] for r in runs), 3) for k in v}
        elif isinstance(v, bool):
            out[key] = all(r[key] for r in runs)
        elif v is not None:
            out[key] = round(statistics.median(r[key] for r in runs if r[key] is not None), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--rate", type=float, default=8.0)
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ttft-ms", type=float, default=100.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--aiperf", default=".venv-aiperf/bin/aiperf")
    args = ap.parse_args()
    wl = workload_from_turns(load_trace(data_path("demo-workload.jsonl")).turns[: args.turns])
    args.recorded = [recorded_length(t) for t in wl.turns]
    s = settings(args)
    recipe = ResolvedRecipe(
        name="tiny",
        engine="llamacpp",
        model=str(data_path("tiny-target.gguf")),
        args=[
            "--threads",
            str(args.threads),
            "--parallel",
            str(args.concurrency),
            "--ctx-size",
            str(4096 * args.concurrency),
        ]
        + ["--jinja", "--seed", "1"],
        env={},
    )
    runs: dict[str, list[dict[str, Any]]] = {"frank": [], "aiperf": []}
    walls: dict[str, list[float]] = {"frank": [], "aiperf": []}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        data = tmp / "turns.aiperf.jsonl"
        write_export(data, independent(export_workload(wl, "aiperf", s)))
        tok = tmp / "tok"
        tok.mkdir()
        (tok / "tokenizer.json").write_bytes(data_path("tiny-tokenizer.json").read_bytes())
        (tok / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast"}')
        with start_engine(recipe, tmp / "logs") as eng:
            replay(eng, wl, s)  # unmeasured: both tools then meet the same warm server
            for rnd in range(args.rounds):
                for tool in ("frank", "aiperf") if rnd % 2 == 0 else ("aiperf", "frank"):
                    assert eng.log_path is not None
                    at = eng.log_path.stat().st_size
                    t0 = time.perf_counter()
                    if tool == "frank":
                        runs[tool].append(run_frank(eng, wl, s))
                    else:
                        runs[tool].append(run_aiperf(args, eng.port, data, len(wl.turns), tok, tmp / f"art{rnd}"))
                    walls[tool].append(round(time.perf_counter() - t0, 2))
                    runs[tool][-1]["server_decode_ms_per_token"] = pcts(server_eval(eng.log_path, at, len(wl.turns)))
    out: dict[str, Any] = {
        "settings": {k: getattr(args, k) for k in ("concurrency", "rate", "turns", "rounds", "ttft_ms", "itl_ms")},
        "frank": median_of(runs["frank"]),
        "aiperf": median_of(runs["aiperf"]),
        "runs": runs,
        "wall_s": walls,
        "versions": {"frank": __version__, "llama-server": binary_version(find_llama_server())},
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "cores": os.cpu_count(),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
