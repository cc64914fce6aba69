"""Agent designs: each start runs ``draws`` draws of the task suite against a fresh engine start, one
request at a time. Every episode counts (failures included); the start's value is its pass count. The
rule is ``harm``: the candidate passes fewer, at one-sided p ≤ alpha, by an exact permutation (integer
convolution) over blocks. Each start's turns are saved as a workload (``workloads/agent-…jsonl``).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from frankenstein.campaign import Campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.design import registry, rules
from frankenstein.design.analysis import Analysis
from frankenstein.design.start import StartOutcome
from frankenstein.design.table import format_verdict
from frankenstein.engines import adapter_for
from frankenstein.errors import EngineError, SandboxError, TaskError
from frankenstein.shipped import expand
from frankenstein.store import now_iso


def suite_dir(spec: str) -> Path:
    if spec == "pkg:suite":
        return Path(__file__).resolve().parents[1] / "agent" / "suite"
    return Path(expand(spec))


def agent_start(campaign: Campaign, reg: registry.Registered, slot: Any, recipe: ResolvedRecipe) -> StartOutcome:
    from frankenstein.agent.draw import run_draw
    from frankenstein.agent.tasks import load_suite

    spec = reg.design.agent
    out = StartOutcome(status="failed", reason=None, started_at=now_iso(), recipe=recipe)
    trace = campaign.root / "workloads" / f"agent-{reg.design_id}-b{slot.block + 1}-{slot.arm}-{slot.rep}.jsonl"
    engine = adapter_for(recipe, campaign.logs)
    out.engine = engine.kind
    episodes: list[dict[str, Any]] = []
    try:
        engine.start()
        out.engine_version = engine.version
        out.capabilities = engine.capabilities()
        tasks = load_suite(suite_dir(spec.suite), spec.tasks)
        with tempfile.TemporaryDirectory(prefix="frank-agent-") as work:
            for d in range(spec.draws):
                results = run_draw(engine.base_url, suite_dir(spec.suite), tasks, d, trace, Path(work),
                                   temperature=spec.temperature, limit_overrides=dict(spec.limits) or None)
                episodes += [r.row() for r in results]
        out.status = "ok"
    except (EngineError, SandboxError, TaskError) as exc:
        out.status, out.reason = "failed", str(exc)
    finally:
        engine.stop()
    out.metrics = {"passes": float(sum(e["passed"] for e in episodes)), "episodes": float(len(episodes))}
    out.episodes = episodes
    return out


def _matrix(campaign: Campaign, design_id: str) -> dict[str, dict[str, dict[str, int]]]:
    """{arm: {task: {"b<block>d<draw>": passed}}}"""
    rows = campaign.store.query(
        "SELECT s.arm, s.block, e.task_id, e.draw, e.passed, e.status FROM episodes e JOIN starts s ON s.id = e.start_id "
        "WHERE s.design_id = ? ORDER BY s.block, e.task_id, e.draw", (design_id,))
    m: dict[str, dict[str, dict[str, int]]] = {}
    for r in rows:
        m.setdefault(r["arm"], {}).setdefault(r["task_id"], {})[f"b{r['block'] + 1}d{r['draw']}"] = int(r["passed"])
    return m


def analyze_agent(campaign: Campaign, reg: registry.Registered) -> Analysis:
    from frankenstein.design.analysis import arm_values

    values, failures = arm_values(campaign, reg, "passes")
    blocks = sorted(b for b, arms in values.items() if "served" in arms and "candidate" in arms
                    and not any(f["block"] == b for f in failures))
    diffs = [values[b]["candidate"] - values[b]["served"] for b in blocks]
    verdict = rules.evaluate_differences(reg.design.rule, diffs, "higher", blocks=[b + 1 for b in blocks])  # type: ignore[arg-type]
    matrix = _matrix(campaign, reg.design_id)
    lines = format_verdict(verdict) + ["", "pass matrix (task × block/draw; 1 = pass):"]
    for arm in ("served", "candidate"):
        for task, cells in sorted(matrix.get(arm, {}).items()):
            lines.append(f"  {arm:<9} {task:<22} " + " ".join(f"{k}:{v}" for k, v in cells.items()))
    a = Analysis(reg=reg, verdict=verdict, blocks_done=len(blocks), failures=failures)
    a.extra.update({"lines": lines, "matrix": matrix, "passes": {b: values[b] for b in blocks}})
    a.per_block["passes"] = values
    return a


def matrix_json(campaign: Campaign, design_id: str) -> str:
    return json.dumps(_matrix(campaign, design_id), sort_keys=True)
