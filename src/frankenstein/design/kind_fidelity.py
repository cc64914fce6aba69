"""Fidelity designs: one start = one engine life that force-decodes the workload and keeps every
position's top-k list (artifact ``topk.npz``); the analysis compares starts pairwise.

Pairs, within each block that survives the failure policy:

* noise floor: served start r vs served start r+1 (``starts_per_arm ≥ 2``); with one served start
  per block, the served starts of consecutive blocks;
* candidate: served start r vs candidate start r.

The registered rule is applied to the candidate pairs, pooled per workload position
(:func:`frankenstein.fidelity.compare.pool`), and reported beside the noise floor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from frankenstein.campaign import Campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.design import registry
from frankenstein.design.analysis import Analysis
from frankenstein.design.model import FidelityRule
from frankenstein.design.start import StartOutcome
from frankenstein.engines import adapter_for
from frankenstein.errors import EngineError, FidelityError
from frankenstein.fidelity.compare import PairComparison, compare, summarize_pairs
from frankenstein.fidelity.forced import (
    ForcedResult, ForcedTurn, forced_decode, from_npz, prepare_turns, skipped_reason, to_npz,
)
from frankenstein.fidelity.gate import apply_rule, format_summary
from frankenstein.store import now_iso
from frankenstein.workload.trace import Workload

ARTIFACT = "topk.npz"


def start_metrics(result: ForcedResult) -> dict[str, float]:
    """What one start can say on its own (KL needs a pair): counts, k, time."""
    import numpy as np

    present = np.arange(result.ids.shape[1])[None, :] < result.n[:, None]
    nonfinite = (~np.isfinite(result.logprobs) & present).any(axis=1) & ~result.error
    return {
        "positions": float(result.positions), "turns": float(len(result.turn_ids)),
        "skipped_turns": float(len(result.skipped)), "k_requested": float(result.k_requested),
        "k_used": float(result.k_used), "error_positions": float(result.error.sum()),
        "short_positions": float(((result.n < result.k_used) & ~result.error).sum()),
        "nonfinite_positions": float(nonfinite.sum()), "seconds": result.seconds,
        "ms_per_position": 1000.0 * result.seconds / max(1, result.positions),
    }


def run_forced(recipe: ResolvedRecipe, workload: Workload, log_dir: Any, top_k: int,
               max_positions: int | None, max_turns: int | None = None, *,
               forced: list[ForcedTurn] | None = None) -> tuple[StartOutcome, ForcedResult | None, list[ForcedTurn]]:
    """One engine life: start, force-decode, stop. Engine failures become a failed outcome.

    The forced sequences are built by this engine from the workload, unless ``forced`` gives them."""
    engine = adapter_for(recipe, log_dir)
    out = StartOutcome(status="failed", reason=None, started_at=now_iso(), recipe=recipe, engine=engine.kind)
    turns = list(workload.turns[:max_turns] if max_turns else workload.turns)
    skipped: list[str] = []
    try:
        engine.start()
        out.engine_version = engine.version
        out.capabilities = engine.capabilities()
        if forced is None:
            forced, skipped = prepare_turns(engine, turns, max_positions)
        if not forced:
            out.status, out.reason = "invalid", "no turn could be forced: " + skipped_reason(skipped)
            return out, None, []
        result = forced_decode(engine, forced, top_k, skipped)
    except FidelityError as exc:
        out.status, out.reason = "invalid", str(exc)
        return out, None, forced or []
    except EngineError as exc:
        out.status, out.reason = "failed", str(exc)
        return out, None, forced or []
    finally:
        engine.stop()
    out.status = "ok"
    out.metrics = start_metrics(result)
    out.capabilities = {**out.capabilities, "fidelity_path": result.path}
    return out, result, forced


def fidelity_start(campaign: Campaign, reg: registry.Registered, slot: Any, recipe: ResolvedRecipe,
                   workload: Workload | None) -> StartOutcome:
    """The runner's hook for one start of a fidelity design (the artifact rides on ``out.artifacts``)."""
    if workload is None:
        raise FidelityError(f"design {reg.design_id}: a fidelity design needs a workload")
    spec = reg.design.fidelity
    out, result, _ = run_forced(recipe, workload, campaign.logs, spec.top_k, spec.max_positions,
                                reg.design.replay.max_turns)
    if result is not None:
        out.artifacts = {ARTIFACT: to_npz(result)}
    return out


# ---------------------------------------------------------------- analysis

@dataclass
class _Start:
    block: int
    rep: int
    arm: str
    result: ForcedResult


def _load(campaign: Campaign, reg: registry.Registered) -> tuple[list[_Start], list[dict[str, Any]]]:
    rows = campaign.store.query(
        "SELECT s.block, s.rep, s.arm, s.status, s.reason, a.data FROM starts s LEFT JOIN artifacts a"
        " ON a.start_id = s.id AND a.name = ? WHERE s.design_id = ? ORDER BY s.block, s.position",
        (ARTIFACT, reg.design_id),
    )
    starts, failures = [], []
    for r in rows:
        reason = r["reason"]
        if r["status"] == "ok" and r["data"] is None:
            reason = f"no {ARTIFACT} artifact recorded"
        if r["status"] != "ok" or r["data"] is None:
            failures.append({"block": r["block"], "arm": r["arm"], "status": r["status"], "reason": reason})
            continue
        try:
            starts.append(_Start(r["block"], r["rep"], r["arm"], from_npz(r["data"])))
        except (FidelityError, ValueError, KeyError, OSError) as exc:
            failures.append({"block": r["block"], "arm": r["arm"], "status": "invalid", "reason": f"unreadable {ARTIFACT}: {exc}"})
    return starts, failures


def make_pairs(starts: list[_Start]) -> tuple[list[PairComparison], list[PairComparison]]:
    """(noise-floor pairs, candidate pairs); see the module docstring."""
    by_block: dict[int, dict[str, list[_Start]]] = {}
    for s in starts:
        by_block.setdefault(s.block, {}).setdefault(s.arm, []).append(s)
    noise, cand = [], []
    lone_served = []
    for b in sorted(by_block):
        served = sorted(by_block[b].get("served", []), key=lambda s: s.rep)
        candidate = sorted(by_block[b].get("candidate", []), key=lambda s: s.rep)
        for x, y in zip(served, served[1:]):
            noise.append(compare(x.result, y.result, f"block {b + 1}: served {x.rep + 1} vs served {y.rep + 1}"))
        if len(served) == 1:
            lone_served.append(served[0])
        for x, y in zip(served, candidate):
            cand.append(compare(x.result, y.result, f"block {b + 1}: served {x.rep + 1} vs candidate {y.rep + 1}"))
    if not noise:
        for x, y in zip(lone_served, lone_served[1:]):
            noise.append(compare(x.result, y.result, f"served block {x.block + 1} vs served block {y.block + 1}"))
    return noise, cand


def _paths_and_k(starts: list[_Start]) -> tuple[str, dict[str, int]]:
    paths = {s.arm: s.result.path for s in starts}
    k_used = {arm: min(s.result.k_used for s in starts if s.arm == arm) for arm in sorted(paths, reverse=True)}
    if len(set(paths.values())) <= 1:
        return next(iter(paths.values()), "-"), k_used
    return "; ".join(f"{a}: {p}" for a, p in sorted(paths.items(), reverse=True)), k_used


def fidelity_summary(reg: registry.Registered, starts: list[_Start]) -> dict[str, Any]:
    rule = reg.design.rule
    assert isinstance(rule, FidelityRule)
    noise, cand = make_pairs(starts)
    path, k_used = _paths_and_k(starts)
    skipped = sorted({s for st in starts for s in st.result.skipped})
    return {
        "bound": "lower bound of the full-vocabulary KL (top-k union + one tail bucket)",
        "path": path, "k": {"requested": reg.design.fidelity.top_k, "used": k_used},
        "noise_floor": summarize_pairs(noise, rule.threshold) if noise else None,
        "candidate": summarize_pairs(cand, rule.threshold),
        "rule": rule.model_dump(), "skipped": skipped,
        "pairs": {"noise_floor": [p.label for p in noise], "candidate": [p.label for p in cand]},
    }


def analyze_fidelity(campaign: Campaign, reg: registry.Registered) -> Analysis:
    """Verdict of a fidelity design under its registered rule (``extra``: word, lines, summary)."""
    rule = reg.design.rule
    assert isinstance(rule, FidelityRule)
    starts, failures = _load(campaign, reg)
    bad_blocks = {f["block"] for f in failures}
    notes = []
    if reg.design.failure_policy == "drop_block":
        starts = [s for s in starts if s.block not in bad_blocks]
        notes = [f"block {f['block'] + 1}: {f['arm']} start {f['status']} ({f['reason']}); block dropped" for f in failures]
    summary = fidelity_summary(reg, starts)
    word, why = apply_rule(rule, summary["candidate"])
    if failures and reg.design.failure_policy == "invalidate":
        word, why = "invalid", f"{len(failures)} failed start(s) and the failure policy is 'invalidate'"
    summary["word"], summary["why"], summary["dropped"] = word, why, notes
    blocks = sorted({s.block for s in starts if s.arm == "candidate"})
    lines = [f"rule (registered): mean KL ≤ {rule.tolerance:g} nats and fewer than {rule.max_positions_above} "
             f"position(s) above {rule.threshold:g} nats", *format_summary(summary), f"verdict: {word} ({why})"]
    out = Analysis(reg=reg, verdict=None, blocks_done=len(blocks), dropped=notes, failures=failures)
    out.extra = {"word": word, "why": why, "lines": lines, "summary": json.loads(json.dumps(summary, default=float))}
    return out
