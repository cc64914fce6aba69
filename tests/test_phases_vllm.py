"""Phases stored and printed for a speed, a fidelity and an agent start on the real vLLM CPU build
(``.venv-vllm``, the tiny Hugging Face Llama, ``-O0``). A vLLM start costs 30-100 s here, so each kind
runs one start: the first slot of its registered design, through the runner's own per-slot code
(``runner.run_slot``: phases, cache folders, prefetch) and ``record_start``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from frankenstein.campaign import init_campaign
from frankenstein.design import phases
from frankenstein.design.registry import register
from frankenstein.design.runner import run_slot
from frankenstein.design.start import record_start
from frankenstein.workload.trace import Turn, load_trace, write_trace

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--dtype", "float32", "--max-model-len", "1024", "--seed", "1", "-O0"]

TOML = """\
name = "vllm-phases"
served = "base"

[recipes.base]
engine = "vllm"
model = "{model}"
python = "{python}"
args = {args}
env = {{ VLLM_CPU_KVCACHE_SPACE = "1" }}
start_timeout_s = 600

[parts.seed2]
description = "another seed"
args = ["--seed", "2"]
"""

ARMS = """
[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["seed2"]
"""

DESIGNS = {
    "sp": 'name = "sp"\nkind = "speed"\nblocks = 1\nworkload = "workloads/w.jsonl"\n'
    '[rule]\nkind = "all_blocks_better"\nalpha = 0.5\n[replay]\nwarmup_turns = 1\n',
    "fq": 'name = "fq"\nkind = "fidelity"\nblocks = 1\nworkload = "workloads/w.jsonl"\n'
    '[rule]\nkind = "fidelity"\ntolerance = 0.02\n[fidelity]\ntop_k = 4\n',
    "ag": 'name = "ag"\nkind = "agent"\nblocks = 1\nprimary_metric = "passes"\n[rule]\nkind = "harm"\nalpha = 0.5\n'
    '[agent]\ntasks = ["spec-durations"]\ndraws = 1\nlimits = { turns = 1, output_tokens = 8 }\n',
}
EXPECTED = {"sp": {"warmup", "replay", "scrape"}, "fq": {"prepare", "force"}, "ag": {"tasks"}}


@pytest.fixture(scope="module")
def vllm_python() -> str:
    path = os.environ.get("FRANK_VLLM_PYTHON") or str(ROOT / ".venv-vllm" / "bin" / "python")
    if not Path(path).is_file():
        pytest.fail(
            f"no vLLM interpreter at {path}: run `make vllm-env` (see docs/engines.md) or set FRANK_VLLM_PYTHON"
        )
    return path


def test_phases_of_speed_fidelity_and_agent_starts_on_vllm(tmp_path: Path, vllm_python: str) -> None:
    model = tmp_path / "tiny-hf"
    script = ROOT / "scripts" / "make_tiny_hf_llama.py"
    subprocess.run([sys.executable, str(script), "--out", str(model)], check=True, capture_output=True, timeout=120)
    c = init_campaign(tmp_path / "c", toml=TOML.format(model=model, python=vllm_python, args=json.dumps(ARGS)))
    turns = [
        Turn(
            turn_id=f"s1-{i:04d}",
            session_id="s1",
            turn_index=i,
            endpoint="/v1/completions",
            request={"prompt": p},
            output={"text": " return x", "completion_tokens": 8},
            source="test",
        )
        for i, p in enumerate(["def parse(line):\n    ", "import json\n"])
    ]
    write_trace(c.root / "workloads" / "w.jsonl", turns)
    for name, text in DESIGNS.items():
        (c.root / f"{name}.toml").write_text(text + ARMS)
        reg = register(c, c.root / f"{name}.toml")
        workload = load_trace(reg.frozen.workload_path) if reg.frozen.workload_path else None
        slot = reg.slots()[0]
        out = run_slot(c, reg, slot, workload)
        record_start(c.store, out, design_id=reg.design_id, block=slot.block, position=slot.position, arm=slot.arm)
        (row,) = c.store.starts_of(reg.design_id)
        assert row.engine == "vllm", (row.status, row.reason)
        rec = phases.read(row.phases)
        assert rec is not None and {"launch", "ready", "stop", *EXPECTED[name]} <= set(rec.phases), rec
        assert rec.phases["ready"] > 5 and rec.notes["stopped_by"] in ("SIGTERM", "SIGKILL")
        assert row.resources["caches"]["folder"] == f"caches/{reg.design_id}/{slot.arm}/warm"
        lines = phases.time_lines(phases.summarize(c.store.starts_of(reg.design_id)))
        print(f"\n{name} ({row.status}):\n" + "\n".join(lines))
        assert lines[1] == "where the time went (mean seconds per start, per arm):"
        assert lines[3].split()[:2] == [slot.arm, "1"] and "launch → ready" in lines[2]
    c.close()
