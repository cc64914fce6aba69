"""An agent design end to end on the real llama-server (the tiny model fails the tasks, as expected)."""

from __future__ import annotations

from pathlib import Path

import pytest

from frankenstein.agent.sandbox import detect_isolation
from frankenstein.design.analysis import analyze
from frankenstein.design.registry import register
from frankenstein.design.runner import run_design
from frankenstein.errors import DesignError
from frankenstein.workload.trace import load_trace

from helpers_campaign import TOML, make_campaign

pytestmark = pytest.mark.engine

DESIGN = """\
name = "agent-harm"
kind = "agent"
hypothesis = "the draft part does not lose passes"
blocks = 5
primary_metric = "passes"

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["draft"]

[rule]
kind = "harm"
alpha = 0.05

[agent]
tasks = ["spec-durations"]
draws = 1
limits = { turns = 1, output_tokens = 16 }
"""


def test_agent_design_runs_and_never_loses_episodes(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c", TOML.replace('"--seed", "1"]', '"--seed", "1", "--jinja", "--ctx-size", "8192"]'))
    (c.root / "agent.toml").write_text(DESIGN)
    reg = register(c, c.root / "agent.toml")
    run_design(c, reg.design_id, echo=lambda s: None)
    starts = c.store.query("SELECT id, status, metrics FROM starts WHERE design_id = ?", (reg.design_id,))
    assert len(starts) == 10 and all(s["status"] == "ok" for s in starts)
    episodes = c.store.query("SELECT * FROM episodes")
    assert len(episodes) == 10 and {e["task_id"] for e in episodes} == {"spec-durations"}
    assert all(len(e["task_hash"]) == 64 for e in episodes)
    a = analyze(c, reg.design_id)
    assert a.verdict is not None and a.verdict.data == "difference"
    assert a.word in ("not confirmed", "harm shown")
    assert "pass matrix" in "\n".join(a.lines)
    assert a.lines[-1] == f"workspace quota: {detect_isolation().quota_words(256)} (10 episodes)"
    traces = sorted((c.root / "workloads").glob("agent-agent-harm-1-*.jsonl"))
    assert len(traces) == 10
    assert all(load_trace(t).turns for t in traces)  # every agent start is a workload frank replay accepts


def test_agent_design_needs_harm_rule(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    (c.root / "agent.toml").write_text(DESIGN.replace('kind = "harm"', 'kind = "sign"'))
    with pytest.raises(DesignError, match=r"agent.toml: rule.kind: an agent design uses rule \"harm\""):
        register(c, c.root / "agent.toml")
