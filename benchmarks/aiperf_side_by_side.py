"""frank's replay and AIPerf 0.13 side by side on one running llama-server, in one run.

The same turns (the shipped demo workload, exported with `frank workload export --to aiperf`: AIPerf's
``mooncake_trace`` lines with the verbatim payloads frank's replay sends) go to one server at concurrency 1,
alternating frank, AIPerf, and a bare stdlib client (the reference: one ``http.client`` POST per turn, the body
read to the end, nothing parsed) for ``--rounds`` rounds, the order rotated each round (A B C, B C A, C A B). Per request:

- server time = prompt eval ms + eval ms from llama-server's own log lines (the same source for every tool);
- client overhead = the tool's client end-to-end time − server time (frank: ``e2e_ms`` of each turn in
  ``frank replay base TURNS --url URL --warmup 0 --json``, the real CLI in its own process against the running
  server; AIPerf: ``request_latency`` in its ``profile_export.jsonl``; bare: wall time around the request);
- server-time inflation = the tool's median server time / the bare client's, same turns, same server.

Every tool opens one connection per request (frank's client sends ``Connection: close``; AIPerf runs with
``--connection-reuse-strategy never``: with its default pooled connections llama-server closed an idle one
under it and two requests of twenty failed with ``ServerDisconnectedError``).

AIPerf runs in its own venv, `make aiperf-env` (.venv-aiperf, aiperf 0.13.0; or any venv given with --aiperf), with the shipped tiny tokenizer and
`--use-server-token-count` (no network). The results record the versions measured: AIPerf's (its
distribution's metadata, read by the venv's own interpreter), frank's and llama-server's.

Run: .venv/bin/python benchmarks/aiperf_side_by_side.py [--rounds 4] [--turns 20] [--aiperf .venv-aiperf/bin/aiperf]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from frankenstein import __version__
from frankenstein.config import ResolvedRecipe
from frankenstein.engines import start_engine
from frankenstein.engines.llamacpp import binary_version, find_llama_server
from frankenstein.shipped import data_path
from frankenstein.workload.export import export_workload, write_export
from frankenstein.workload.replay import ReplaySettings, recorded_length, replay_body
from frankenstein.workload.trace import Workload, load_trace, workload_from_turns, write_trace

TIMING = re.compile(r"prompt eval time =\s*([\d.]+) ms.*\n.*?\beval time =\s*([\d.]+) ms")
SETTINGS = ReplaySettings(warmup_turns=0, stream=True)


def server_times(log: Path, start: int) -> list[float]:
    """prompt + eval ms of every request the server finished after byte ``start`` of its log, in order."""
    text = log.read_bytes()[start:].decode("utf-8", "replace")
    return [float(a) + float(b) for a, b in TIMING.findall(text)]


def settled_times(log: Path, start: int, expected: int) -> list[float]:
    """The server times of a tool's window once the log has stopped growing (its last lines may lag the
    client, and a late line must not fall into the next tool's window)."""
    deadline = time.monotonic() + 15
    size, server = -1, server_times(log, start)
    while time.monotonic() < deadline and (len(server) < expected or log.stat().st_size != size):
        size = log.stat().st_size
        time.sleep(0.5)
        server = server_times(log, start)
    return server


def run_frank(camp: Path, turns: Path, port: int) -> tuple[list[float], list[int]]:
    """`frank replay --url` through the real CLI, in its own process, against the running server."""
    cmd = [sys.executable, "-m", "frankenstein", "replay", "base", str(turns), "-c", str(camp)]
    cmd += ["--url", f"http://127.0.0.1:{port}", "--warmup", "0", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"frank replay failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    doc = json.loads(r.stdout)
    rows = [t for t in doc["turns"] if not t["warmup"]]
    assert not [t for t in rows if t["error"]], [t["error"] for t in rows if t["error"]]
    return [t["metrics"]["e2e_ms"] for t in rows], [t["metrics"]["generated_tokens"] for t in rows]


def aiperf_version(aiperf: str) -> str:
    """AIPerf's version as its venv's interpreter reads its distribution metadata (next to the console script)."""
    python = Path(aiperf).with_name("python")
    probe = "import importlib.metadata as m; print(m.version('aiperf'))"
    r = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=60)
    return r.stdout.strip() if r.returncode == 0 else f"unknown ({r.stderr.strip()[-200:]})"


def run_bare(port: int, wl: Workload) -> list[float]:
    out = []
    for t in wl.turns:
        body = replay_body(t, SETTINGS)
        t0 = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        conn.request("POST", t.endpoint, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        conn.close()
        out.append((time.perf_counter() - t0) * 1000)
        assert resp.status == 200, resp.status
    return out


def run_aiperf(aiperf: str, port: int, data: Path, n: int, tokenizer: Path, art: Path) -> tuple[list[float], list[int]]:
    cmd = [
        aiperf, "profile", "--custom-dataset-type", "mooncake_trace", "--input-file", str(data),
        "--endpoint-type", "chat", "--streaming", "--url", f"http://127.0.0.1:{port}", "-m", "tiny",
        "--concurrency", "1", "--request-count", str(n), "--tokenizer", str(tokenizer),
        "--use-server-token-count", "--output-artifact-dir", str(art), "--ui-type", "none",
        "--connection-reuse-strategy", "never",
    ]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=art.parent)
    if r.returncode != 0:
        raise SystemExit(f"aiperf failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    records = [json.loads(x) for x in (art / "profile_export.jsonl").read_text().splitlines() if x.strip()]
    records.sort(key=lambda x: x["metadata"]["request_start_ns"])
    bad = [x for x in records if "request_latency" not in x.get("metrics", {})]
    if bad:
        raise SystemExit(f"aiperf: {len(bad)} of {len(records)} requests have no latency: {json.dumps(bad[0])[:3000]}")
    lengths = [int(x["metrics"]["output_sequence_length"]["value"]) for x in records]
    return [x["metrics"]["request_latency"]["value"] for x in records], lengths


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--aiperf", default=".venv-aiperf/bin/aiperf")
    args = ap.parse_args()
    full = load_trace(data_path("demo-workload.jsonl"))
    wl = workload_from_turns(full.turns[: args.turns])
    recorded = [recorded_length(t) for t in wl.turns]
    recipe = ResolvedRecipe(
        name="tiny",
        engine="llamacpp",
        model=str(data_path("tiny-target.gguf")),
        args=["--threads", str(args.threads), "--parallel", "1", "--ctx-size", "4096", "--jinja", "--seed", "1"],
        env={},
    )
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        data = tmp / "turns.aiperf.jsonl"
        write_export(data, export_workload(wl, "aiperf", SETTINGS))
        tok = tmp / "tok"
        tok.mkdir()
        (tok / "tokenizer.json").write_bytes(data_path("tiny-tokenizer.json").read_bytes())
        (tok / "tokenizer_config.json").write_text('{"tokenizer_class": "PreTrainedTokenizerFast"}')
        turns = tmp / "turns.jsonl"
        write_trace(turns, wl.turns)
        camp = tmp / "camp"
        subprocess.run([sys.executable, "-m", "frankenstein", "init", str(camp)], check=True, capture_output=True)
        per: dict[str, dict[str, list[list[float]]]] = {
            k: {"client": [], "server": []} for k in ("frank", "aiperf", "bare")
        }
        walls: dict[str, list[float]] = {k: [] for k in per}
        with start_engine(recipe, tmp / "logs") as eng:
            log = eng.log_path
            assert log is not None
            run_bare(eng.port, wl)  # one unmeasured pass: every tool then meets the same warm server
            tools = ("frank", "aiperf", "bare")
            for rnd in range(args.rounds):
                for tool in tools[rnd % 3 :] + tools[: rnd % 3]:  # rotated: each tool in each place of a round
                    start = log.stat().st_size
                    t0 = time.perf_counter()
                    if tool == "frank":
                        client, lengths = run_frank(camp, turns, eng.port)
                    elif tool == "bare":
                        client, lengths = run_bare(eng.port, wl), recorded
                    else:
                        client, lengths = run_aiperf(args.aiperf, eng.port, data, len(wl.turns), tok, tmp / f"art{rnd}")
                    # the same turns: every tool generated exactly the recorded length of every turn, in order
                    assert lengths == recorded, (tool, lengths, recorded)
                    walls[tool].append(time.perf_counter() - t0)
                    server = settled_times(log, start, len(client))
                    assert len(server) == len(client) == len(wl.turns), (tool, len(server), len(client))
                    per[tool]["client"].append(client)
                    per[tool]["server"].append(server)
    out = summarize(per, walls, len(wl.turns), args.rounds)
    server = find_llama_server()
    out["versions"] = {
        "aiperf": aiperf_version(args.aiperf),
        "frank": __version__,
        "llama-server": binary_version(server),
    }
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out["cores"] = os.cpu_count()
    print(json.dumps(out, indent=2))


def summarize(
    per: dict[str, dict[str, list[list[float]]]], walls: dict[str, list[float]], turns: int, rounds: int
) -> dict[str, object]:
    """Medians per tool; the server-time ratio is paired: the same turn in the same round under the tool and under
    the bare client, so the prompt cache's state and the machine's load at that moment cancel."""
    med = statistics.median
    out: dict[str, object] = {"turns_per_round": turns, "rounds": rounds}
    bare = per["bare"]["server"]
    for tool, v in per.items():
        client = [c for rnd in v["client"] for c in rnd]
        server = [s for rnd in v["server"] for s in rnd]
        over = [c - s for c, s in zip(client, server)]
        ratios = [s / b for rnd, brnd in zip(v["server"], bare) for s, b in zip(rnd, brnd)]
        out[tool] = {
            "requests": len(over),
            "client_overhead_ms_median": round(med(over), 2),
            "client_overhead_ms_p90": round(statistics.quantiles(over, n=10)[-1], 2),
            "server_ms_median": round(med(server), 2),
            "server_time_vs_bare_paired_median": round(med(ratios), 4),
            "wall_s_per_round_median": round(med(walls[tool]), 2),
        }
    return out


if __name__ == "__main__":
    main()
