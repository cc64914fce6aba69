"""Agent designs: each start runs ``draws`` draws of the task suite against a fresh engine start, one
request at a time. Every episode counts (failures included); the start's value is its pass count. The
rule is ``harm``: the candidate passes fewer, at one-sided p ≤ alpha, by an exact permutation (integer
convolution) over blocks; the verdict also gives the largest harm the data exclude at that level ("a
loss of more than 1 pass per start is excluded at one-sided 95%") and, with a registered ``margin``,
whether that non-inferiority margin is shown. Each start's turns are saved as a workload
(``workloads/agent-…jsonl``).

A start that fails counts as its episodes failed: the passes it recorded before the failure stand and
every episode it did not run is a failure, so a part that crashes the engine cannot remove the evidence
of its own harm. Only a failure that is the harness's own (the sandbox or the task suite failed, named
in the reason; or the start was refused before it ran: a pinned file changed, a host died) drops its
block, as before. The analysis and the note say how many of each.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from frankenstein.agent.draw import effective_limits, run_draw
from frankenstein.agent.tasks import Limits, load_suite
from frankenstein.campaign import Campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.design import rules
from frankenstein.design.kinds.base import (
    Analysis,
    Description,
    Evidence,
    Failure,
    Progress,
    check_no_vetoes,
    check_stopping,
    metric_scope,
)
from frankenstein.design.kinds.speed import check_block_rule
from frankenstein.design.model import ARMS, DesignFile, Registered, Slot
from frankenstein.design import phases
from frankenstein.design.start import StartOutcome, start_engine, stop_engine
from frankenstein.design.table import format_verdict, harm_text
from frankenstein.engines import adapter_for
from frankenstein.measure.metrics import BUILTIN, Metric
from frankenstein.measure.resources import ResourceSampler
from frankenstein.errors import ConfigError, DesignError, EngineError, SandboxError, TaskError
from frankenstein.shipped import expand
from frankenstein.store import EpisodeRow, StartRow, now_iso
from frankenstein.workload.trace import Turn, Workload

Matrix = dict[str, dict[str, dict[str, int]]]

MAX_DRAWS = 100
"""The most draws per start registration accepts: each draw runs every task once, one request at a time."""
HARNESS = "the harness's own failure"
"""How a start's reason begins when the harness (sandbox, task suite) failed, not the engine."""


def suite_dir(spec: str) -> Path:
    if spec == "pkg:suite":
        return Path(__file__).resolve().parents[2] / "agent" / "suite"
    return Path(expand(spec))


def agent_start(campaign: Campaign, reg: Registered, slot: Slot, recipe: ResolvedRecipe) -> StartOutcome:
    spec = reg.design.agent
    out = StartOutcome(status="failed", reason=None, started_at=now_iso(), recipe=recipe)
    trace = campaign.root / "workloads" / f"agent-{reg.design_id}-b{slot.block + 1}-{slot.arm}-{slot.rep}.jsonl"
    engine = adapter_for(recipe, campaign.logs)
    out.engine = engine.kind
    episodes: list[dict[str, Any]] = []
    sampler = ResourceSampler()  # NVML on the engine's own process tree, as speed starts do
    try:
        start_engine(engine)
        sampler.start(engine.pid)
        out.engine_version = engine.version
        out.capabilities = engine.capabilities()
        tasks = load_suite(suite_dir(spec.suite), spec.tasks)
        with tempfile.TemporaryDirectory(prefix="frank-agent-") as work, phases.phase("tasks"):
            for d in range(spec.draws):
                results = run_draw(
                    engine.base_url,
                    suite_dir(spec.suite),
                    tasks,
                    d,
                    trace,
                    Path(work),
                    temperature=spec.temperature,
                    limit_overrides=dict(spec.limits) or None,
                )
                episodes += [r.row() for r in results]
        out.status = "ok"
    except EngineError as exc:
        out.status, out.reason = "failed", str(exc)
    except (SandboxError, TaskError) as exc:
        out.status, out.reason = "failed", f"{HARNESS}: {exc}"
    finally:
        out.resources = sampler.stop()
        stop_engine(engine)
    out.metrics = {"passes": float(sum(e["passed"] for e in episodes)), "episodes": float(len(episodes))}
    if out.reason and out.reason.startswith(HARNESS):
        out.metrics["harness_failure"] = 1.0
    out.episodes = episodes
    return out


def pass_matrix(campaign: Campaign, design_id: str) -> Matrix:
    return matrix_of(campaign.store.episodes_of(design_id))


def matrix_of(episodes: Sequence[EpisodeRow]) -> Matrix:
    """{arm: {task: {"b<block>d<draw>": passed}}}"""
    m: Matrix = {}
    for e in sorted(episodes, key=lambda e: (e.block, e.task_id, e.draw)):
        m.setdefault(e.arm, {}).setdefault(e.task_id, {})[f"b{e.block + 1}d{e.draw}"] = int(e.passed)
    return m


def quota_line(episodes: Sequence[EpisodeRow]) -> str:
    """Which workspace quota the episodes ran under, as each recorded it (a tmpfs, or a total checked after
    each tool call, which one command can pass): what their passes and fails rest on."""
    said = Counter(str((e.detail.get("sandbox") or {}).get("workspace_quota") or "not recorded") for e in episodes)
    return "workspace quota: " + "; ".join(f"{w} ({n} episode{'' if n == 1 else 's'})" for w, n in sorted(said.items()))


def counts_as_failed(row: StartRow) -> bool:
    """A failed start whose episodes count as failed: every failure but the harness's own (a start refused
    before it ran, or whose sandbox or task suite failed: ``harness_failure`` in its metrics)."""
    return not row.ok and not row.metrics.get("harness_failure")


def start_passes(rows: list[StartRow]) -> tuple[dict[int, dict[str, float]], list[StartRow], list[Failure]]:
    """{block: {arm: mean passes over its starts}}, with every failed start that counts as its episodes
    failed (its recorded passes, the rest failed); the starts counted so; and the harness's own failures."""
    acc: dict[int, dict[str, list[float]]] = {}
    counted, harness = [], []
    for row in rows:
        if not (row.ok or counts_as_failed(row)):
            harness.append(Failure(row.block, row.arm, row.status, row.reason))
            continue
        if row.ok and row.metrics.get("passes") is None:
            continue
        counted += [] if row.ok else [row]
        passes = float(row.metrics.get("passes") or 0.0)  # a failed start: what it recorded, the rest failed
        acc.setdefault(row.block, {}).setdefault(row.arm, []).append(passes)
    return {b: {a: sum(v) / len(v) for a, v in arms.items()} for b, arms in acc.items()}, counted, harness


def failure_notes(counted: list[StartRow], harness: list[Failure]) -> list[str]:
    """What the analysis and the note say about failed starts: how many counted, how many dropped."""
    notes = [
        f"block {r.block + 1}: {r.arm} start failed ({r.reason}); counted: the {int(r.metrics.get('passes') or 0)} "
        "pass(es) it recorded before the failure stand, every other episode of the start counts as failed"
        for r in counted
    ]
    notes += [f"{f.dropped_note()} (the harness's own failure, not the engine's)" for f in harness]
    if counted or harness:
        notes.append(
            f"failed starts: {len(counted)} counted as their episodes failed, "
            f"{len(harness)} the harness's own (block dropped)"
        )
    return notes


def analyze_agent(campaign: Campaign, ev: Evidence) -> Analysis:
    reg = ev.reg
    values, counted, failures = start_passes(ev.starts)
    bad = {f.block for f in failures}
    blocks = sorted(b for b, arms in values.items() if all(a in arms for a in ARMS) and b not in bad)
    diffs = [values[b]["candidate"] - values[b]["served"] for b in blocks]
    verdict = rules.evaluate_differences(reg.design.rule, diffs, "higher", blocks=[b + 1 for b in blocks])  # type: ignore[arg-type]
    episodes = campaign.store.episodes_of(reg.design_id)
    matrix = matrix_of(episodes)
    harm = harm_text(verdict, "pass/passes per start")
    left = reg.design.blocks - len(blocks) - len(bad)
    incomplete = f"{len(blocks)} of {reg.design.blocks} blocks" if left > 0 else None
    lines = format_verdict(verdict, incomplete) + (
        [f"largest harm excluded: {harm}"] if harm and not incomplete else []
    )
    lines += ["", "pass matrix (task × block/draw; 1 = pass):"]
    for arm in ARMS:
        for task, cells in sorted(matrix.get(arm, {}).items()):
            lines.append(f"  {arm:<9} {task:<22} " + " ".join(f"{k}:{v}" for k, v in cells.items()))
    if episodes:
        lines.append(quota_line(episodes))
    return Analysis(
        reg=reg,
        verdict=verdict,
        blocks_done=len(blocks),
        incomplete=incomplete,
        dropped=failure_notes(counted, failures),
        failures=[*failures, *(Failure(r.block, r.arm, r.status, r.reason) for r in counted)],
        lines=lines,
        matrix=matrix,
        per_block={"passes": values},
    )


def matrix_json(campaign: Campaign, design_id: str) -> str:
    return json.dumps(pass_matrix(campaign, design_id), sort_keys=True)


def check_agent_spec(design: DesignFile, path: Path) -> None:
    """Refuse an ``[agent]`` table no start could finish: a suite that does not load, an unknown task
    id, a limit override the tasks refuse, or more draws than :data:`MAX_DRAWS`."""
    spec = design.agent
    if spec.draws > MAX_DRAWS:
        raise DesignError(
            f"{spec.draws} draws per start is more than the {MAX_DRAWS} registration accepts "
            "(each draw runs every task once)",
            path=path,
            field="agent.draws",
        )
    folder = suite_dir(spec.suite)
    try:
        tasks = load_suite(folder)
    except TaskError as exc:
        raise DesignError(f"the suite does not load: {exc}", path=path, field="agent.suite") from exc
    if spec.tasks is not None:
        if not spec.tasks:
            raise DesignError("names no task (leave it out to run them all)", path=path, field="agent.tasks")
        known = {t.id for t in tasks}
        missing = [i for i in spec.tasks if i not in known]
        if missing:
            raise DesignError(
                f"unknown task id(s) {', '.join(missing)} in suite {folder} (known: {', '.join(sorted(known))})",
                path=path,
                field="agent.tasks",
            )
        tasks = [t for t in tasks if t.id in spec.tasks]
    known_limits = sorted(Limits.model_fields)
    for name in spec.limits:
        if name not in known_limits:
            raise DesignError(
                f"unknown limit {name!r} (known: {', '.join(known_limits)})", path=path, field=f"agent.limits.{name}"
            )
    for task in tasks:
        try:
            effective_limits(task, dict(spec.limits) or None)
        except ConfigError as exc:
            name = exc.field or ""
            why = str(exc).removeprefix(f"limit overrides: {name}: ")
            raise DesignError(f"{why} (task {task.id})", path=path, field=f"agent.limits.{name}") from exc


class AgentKind:
    name = "agent"
    adoptable = False
    measures_fidelity = False
    measures_memory = False
    uses_workload = False
    same_arms = False
    can_curtail = False

    def check(self, design: DesignFile, path: Path) -> None:
        if design.primary_metric != "passes":
            raise DesignError("an agent design's primary metric is 'passes'", path=path, field="primary_metric")
        if design.rule.kind == "fidelity":
            raise DesignError('rule "fidelity" is only for fidelity designs', path=path, field="rule.kind")
        if design.rule.kind != "harm":
            raise DesignError('an agent design uses rule "harm"', path=path, field="rule.kind")
        check_block_rule(design, path, "difference")
        check_stopping(self.name, design, path)
        check_no_vetoes(self.name, design, path)
        check_agent_spec(design, path)

    def check_recipes(
        self,
        design: DesignFile,
        recipes: dict[str, ResolvedRecipe | None],
        path: Path,
        table: Mapping[str, Metric] = BUILTIN,
    ) -> None:
        return None

    def check_workload(self, turns: list[Turn], workload: Path, path: Path) -> None:
        return None

    def start(
        self,
        campaign: Campaign,
        reg: Registered,
        slot: Slot,
        recipe: ResolvedRecipe,
        workload: Workload | None,
        progress: Progress | None,
    ) -> StartOutcome:
        return agent_start(campaign, reg, slot, recipe)

    def start_value(self, reg: Registered, out: StartOutcome) -> str:
        metric = out.metrics.get("passes")
        return " passes=" + ("-" if metric is None else f"{metric:.4f}")

    def analyze(self, campaign: Campaign, evidence: Evidence) -> Analysis:
        return analyze_agent(campaign, evidence)

    def describe(self, reg: Registered) -> Description:
        return Description(
            measures=f"It measures {metric_scope(reg.design.primary_metric)}.",
            head=f"- Primary metric: `{reg.design.primary_metric}` ({reg.frozen.direction} is better).",
            concurrency="Tested one agent, one request at a time: it says nothing about concurrent serving.",
        )

    def went_wrong(self, word: str) -> bool:
        return word in ("harm shown", "invalid")

    def no_decision(self, word: str) -> str:
        return "a harm check on task passes"


KIND = AgentKind()
