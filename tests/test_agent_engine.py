"""The tiny model through the real llama-server runs a whole draw to completion. It cannot solve the
tasks (every episode fails, which is expected); what is checked is that every episode ends with a
status and a clean grader verdict, and that the trace it leaves is a workload `frank replay` takes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from frankenstein.agent import run_draw, shipped_suite
from frankenstein.agent.loop import STATUSES
from frankenstein.config import ResolvedRecipe
from frankenstein.engines import start_engine
from frankenstein.workload.trace import load_trace

SMALL = {"turns": 2, "output_tokens": 32, "wall_time_s": 60, "command_timeout_s": 5}


@pytest.mark.engine
def test_tiny_model_runs_a_whole_draw(tmp_path: Path, tiny_recipe: ResolvedRecipe, no_leftover_engines: None) -> None:
    trace = tmp_path / "draw0.jsonl"
    with start_engine(tiny_recipe, tmp_path / "logs") as eng:
        results = run_draw(eng.base_url, shipped_suite(), None, 0, trace, tmp_path / "work", limit_overrides=SMALL)
    assert len(results) == 6
    for r in results:
        assert r.status in STATUSES and r.status != "grader_error", (r.task_id, r.status, r.detail["stop_reason"])
        assert (r.passed, r.grader_rc) == (False, 1)
        assert 1 <= r.turns <= SMALL["turns"]
    workload = load_trace(trace)
    assert len(workload.turns) == sum(r.turns for r in results)
    assert all(t.timings.server.get("predicted_n") for t in workload.turns)  # llama.cpp timings kept
    assert all(t.request["tools"] and t.request["max_tokens"] == 32 for t in workload.turns)

    campaign = tmp_path / "camp"
    run = [sys.executable, "-m", "frankenstein"]
    assert subprocess.run([*run, "init", str(campaign)], capture_output=True, timeout=60).returncode == 0
    toml = campaign / "frank.toml"
    toml.write_text(toml.read_text().replace('"--seed", "1"]', '"--seed", "1", "--jinja"]'))  # tools need --jinja
    done = subprocess.run(
        [*run, "replay", "base", str(trace), "-c", str(campaign), "--max-turns", "2", "--warmup", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("start 1: ok")
