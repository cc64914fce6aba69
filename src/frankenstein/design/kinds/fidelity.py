"""Fidelity designs: one start = one engine life that force-decodes the workload and keeps every
position's top-k list (artifact ``topk.npz``); the analysis compares starts pairwise.

Pairs, within each block that survives the failure policy:

* noise floor: served start r vs served start r+1 (``starts_per_arm ≥ 2``); with one served start
  per block, the served starts of consecutive blocks;
* candidate: served start r vs candidate start r.

The registered rule is applied to the candidate pairs, pooled per workload position
(:func:`frankenstein.fidelity.compare.pool`), and reported beside the noise floor. The equivalence
test against the noise (:mod:`frankenstein.fidelity.equivalence`) uses every pair of starts instead:
every two served starts (the floor) and every served start with every candidate start, across blocks;
the verdict prints both as ranges over those pairs, and a rule with a ``margin`` needs at least 3
starts per arm (refused at registration otherwise).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from frankenstein.campaign import Campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.design.kinds.base import (
    Analysis,
    Description,
    Evidence,
    Failure,
    Progress,
    check_no_vetoes,
    check_stopping,
)
from frankenstein.design.model import DesignFile, FidelityRule, Registered, Slot
from frankenstein.design import phases
from frankenstein.design.start import StartOutcome, start_engine, stop_engine
from frankenstein.engines import adapter_for
from frankenstein.measure.metrics import BUILTIN, Metric
from frankenstein.measure.resources import ResourceSampler
from frankenstein.errors import DesignError, EngineError, FidelityError
from frankenstein.fidelity.compare import PairComparison, compare, pool, summarize_pairs
from frankenstein.fidelity.equivalence import MIN_STARTS, Excess, StartPair, excess_test
from frankenstein.fidelity.forced import (
    ForcedResult,
    ForcedTurn,
    forced_decode,
    from_npz,
    prepare_turns,
    skipped_reason,
    to_npz,
    workload_problems,
)
from frankenstein.fidelity.gate import apply_rule, decided_by, format_summary, rule_line
from frankenstein.store import now_iso
from frankenstein.workload.trace import Turn, Workload

ARTIFACT = "topk.npz"


def start_metrics(result: ForcedResult) -> dict[str, float]:
    """What one start can say on its own (KL needs a pair): counts, k, time."""
    present = np.arange(result.ids.shape[1])[None, :] < result.n[:, None]
    nonfinite = (~np.isfinite(result.logprobs) & present).any(axis=1) & ~result.error
    return {
        "positions": float(result.positions),
        "turns": float(len(result.turn_ids)),
        "skipped_turns": float(len(result.skipped)),
        "k_requested": float(result.k_requested),
        "k_used": float(result.k_used),
        "error_positions": float(result.error.sum()),
        "short_positions": float(((result.n < result.k_used) & ~result.error).sum()),
        "nonfinite_positions": float(nonfinite.sum()),
        "seconds": result.seconds,
        "ms_per_position": 1000.0 * result.seconds / max(1, result.positions),
    }


def run_forced(
    recipe: ResolvedRecipe,
    workload: Workload,
    log_dir: Path,
    top_k: int,
    max_positions: int | None,
    max_turns: int | None = None,
    *,
    forced: list[ForcedTurn] | None = None,
) -> tuple[StartOutcome, ForcedResult | None, list[ForcedTurn]]:
    """One engine life: start, force-decode, stop. Engine failures become a failed outcome.

    The forced sequences are built by this engine from the workload, unless ``forced`` gives them."""
    engine = adapter_for(recipe, log_dir)
    out = StartOutcome(status="failed", reason=None, started_at=now_iso(), recipe=recipe, engine=engine.kind)
    turns = list(workload.turns[:max_turns] if max_turns else workload.turns)
    skipped: list[str] = []
    sampler = ResourceSampler()  # NVML on the engine's own process tree, as speed starts do
    try:
        start_engine(engine)
        sampler.start(engine.pid)
        out.engine_version = engine.version
        out.capabilities = engine.capabilities()
        if forced is None:
            with phases.phase("prepare"):
                forced, skipped = prepare_turns(engine, turns, max_positions)
        if not forced:
            out.status, out.reason = "invalid", "no turn could be forced: " + skipped_reason(skipped)
            return out, None, []
        with phases.phase("force"):
            result = forced_decode(engine, forced, top_k, skipped)
    except FidelityError as exc:
        out.status, out.reason = "invalid", str(exc)
        return out, None, forced or []
    except EngineError as exc:
        out.status, out.reason = "failed", str(exc)
        return out, None, forced or []
    finally:
        out.resources = sampler.stop()
        stop_engine(engine)
    out.status = "ok"
    out.metrics = start_metrics(result)
    out.capabilities = {**out.capabilities, "fidelity_path": result.path}
    return out, result, forced


def fidelity_start(
    campaign: Campaign, reg: Registered, slot: Slot, recipe: ResolvedRecipe, workload: Workload | None
) -> StartOutcome:
    """One start of a fidelity design (the artifact rides on ``out.artifacts``)."""
    if workload is None:
        raise FidelityError(f"design {reg.design_id}: a fidelity design needs a workload")
    spec = reg.design.fidelity
    out, result, _ = run_forced(
        recipe, workload, campaign.logs, spec.top_k, spec.max_positions, reg.design.replay.max_turns
    )
    if result is not None:
        out.artifacts = {ARTIFACT: to_npz(result)}
    return out


# ---------------------------------------------------------------- analysis


@dataclass
class ForcedStart:
    """One ok start of a fidelity design with its forced-decode result."""

    block: int
    rep: int
    arm: str
    result: ForcedResult


def load_starts(campaign: Campaign, ev: Evidence) -> tuple[list[ForcedStart], list[Failure]]:
    """The ok starts with their top-k lists, and the starts that failed or left no readable artifact."""
    data = campaign.store.artifacts_of(ev.reg.design_id, ARTIFACT)
    starts, failures = [], []
    for r in ev.starts:
        blob = data.get(r.id)
        if not r.ok or blob is None:
            reason = f"no {ARTIFACT} artifact recorded" if r.ok else r.reason
            failures.append(Failure(r.block, r.arm, r.status, reason))
            continue
        try:
            starts.append(ForcedStart(r.block, r.rep, r.arm, from_npz(blob)))
        except (FidelityError, ValueError, KeyError, OSError) as exc:
            failures.append(Failure(r.block, r.arm, "invalid", f"unreadable {ARTIFACT}: {exc}"))
    return starts, failures


def make_pairs(starts: list[ForcedStart]) -> tuple[list[PairComparison], list[PairComparison]]:
    """(noise-floor pairs, candidate pairs); see the module docstring."""
    by_block: dict[int, dict[str, list[ForcedStart]]] = {}
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


def all_pairs(starts: list[ForcedStart]) -> tuple[list[StartPair], list[StartPair]]:
    """(every two served starts, every served start with every candidate start), across blocks."""
    served = sorted((s for s in starts if s.arm == "served"), key=lambda s: (s.block, s.rep))
    cands = sorted((s for s in starts if s.arm == "candidate"), key=lambda s: (s.block, s.rep))
    floor = [_pair(x, y) for i, x in enumerate(served) for y in served[i + 1 :]]
    return floor, [_pair(x, y) for x in served for y in cands]


def _pair(x: ForcedStart, y: ForcedStart) -> StartPair:
    return StartPair(_name(x), _name(y), compare(x.result, y.result, f"{_name(x)} vs {_name(y)}"))


def _name(s: ForcedStart) -> str:
    return f"block {s.block + 1} {s.arm} {s.rep + 1}"


def excess_of(rule: FidelityRule, starts: list[ForcedStart]) -> Excess | None:
    """The floor and candidate ranges over every start pair and the excess bound; None without pairs of both."""
    floor, cand = all_pairs(starts)
    if not floor or not cand:
        return None
    return excess_test(floor, cand, rule.margin, rule.alpha)


def _starts_per_arm(starts: list[ForcedStart]) -> dict[str, int]:
    return {arm: sum(1 for s in starts if s.arm == arm) for arm in ("served", "candidate")}


def _paths_and_k(starts: list[ForcedStart]) -> tuple[str, dict[str, int]]:
    paths = {s.arm: s.result.path for s in starts}
    k_used = {arm: min(s.result.k_used for s in starts if s.arm == arm) for arm in sorted(paths, reverse=True)}
    if len(set(paths.values())) <= 1:
        return next(iter(paths.values()), "-"), k_used
    return "; ".join(f"{a}: {p}" for a, p in sorted(paths.items(), reverse=True)), k_used


def fidelity_summary(reg: Registered, starts: list[ForcedStart]) -> dict[str, Any]:
    rule = reg.design.rule
    assert isinstance(rule, FidelityRule)
    noise, cand = make_pairs(starts)
    path, k_used = _paths_and_k(starts)
    skipped = sorted({s for st in starts for s in st.result.skipped})
    candidate = summarize_pairs(cand, rule.threshold)
    if cand:
        candidate["below_captured_floor"] = int((pool(cand).captured < rule.min_captured_mass).sum())
    return {
        "bound": "lower bound of the full-vocabulary KL (top-k union + one tail bucket)",
        "path": path,
        "k": {"requested": reg.design.fidelity.top_k, "used": k_used},
        "noise_floor": summarize_pairs(noise, rule.threshold) if noise else None,
        "candidate": candidate,
        "rule": rule.model_dump(),
        "skipped": skipped,
        "pairs": {"noise_floor": [p.label for p in noise], "candidate": [p.label for p in cand]},
    }


def kept_starts(campaign: Campaign, ev: Evidence) -> tuple[list[ForcedStart], list[Failure], list[str]]:
    """The ok starts the failure policy keeps, every failure, and the notes on the blocks it dropped."""
    starts, failures = load_starts(campaign, ev)
    notes = []
    if ev.reg.design.failure_policy == "drop_block":
        bad_blocks = {f.block for f in failures}
        starts = [s for s in starts if s.block not in bad_blocks]
        notes = [f.dropped_note() for f in failures]
    return starts, failures, notes


def analyze_fidelity(campaign: Campaign, ev: Evidence) -> Analysis:
    """Verdict of a fidelity design under its registered rule: ``outcome``, ``why``, ``lines``, ``fidelity``, ``kl``."""
    return analyze_starts(ev.reg, *kept_starts(campaign, ev))


def analyze_starts(reg: Registered, starts: list[ForcedStart], failures: list[Failure], notes: list[str]) -> Analysis:
    """:func:`analyze_fidelity` over starts already read (:func:`kept_starts`)."""
    rule = reg.design.rule
    assert isinstance(rule, FidelityRule)
    summary = fidelity_summary(reg, starts)
    excess = excess_of(rule, starts)
    summary["excess"] = _excess_doc(excess)
    word, why = apply_rule(rule, summary["candidate"], summary["noise_floor"], excess, _starts_per_arm(starts))
    if failures and reg.design.failure_policy == "invalidate":
        word, why = "invalid", f"{len(failures)} failed start(s) and the failure policy is 'invalidate'"
    if word != "invalid" and not summary["noise_floor"]:
        why += "; noise floor not measured (one served start in all), not compared"
    summary["word"], summary["why"], summary["dropped"] = word, why, notes
    summary["decided_by"] = decided_by(word, why)
    blocks = sorted({s.block for s in starts if s.arm == "candidate"})
    lines = [
        rule_line(rule),
        *format_summary(summary),
        *_excess_lines(excess),
        f"verdict: {word} ({why})",
        f"decided by: {summary['decided_by']}",
    ]
    return Analysis(
        reg=reg,
        verdict=None,
        blocks_done=len(blocks),
        dropped=notes,
        failures=failures,
        outcome=word,
        why=why,
        lines=lines,
        fidelity=json.loads(json.dumps(summary, default=float)),
        kl=kl_series(rule, starts),
    )


def _excess_doc(e: Excess | None) -> dict[str, Any] | None:
    if e is None:
        return None
    return {
        "floor": list(e.floor),
        "floor_pairs": e.floor_pairs,
        "candidate": list(e.candidate),
        "candidate_pairs": e.candidate_pairs,
        "turns": e.turns,
        "excess": e.excess,
        "upper": e.upper if e.upper == e.upper else None,
        "level": 1 - e.alpha,
        "margin": e.margin,
        "passed": e.passed if e.margin is not None else None,
    }


def _excess_lines(e: Excess | None) -> list[str]:
    """The noise floor and the candidate as ranges over start pairs, and the excess with its bound."""
    if e is None:
        return ["against the noise floor: not measured (it needs two served starts and a candidate start)"]
    warn = e.uneven()
    return [f"against the noise floor: {e.ranges()}", f"  {e.bound()}", *([f"  warning: {warn}"] if warn else [])]


def kl_series(rule: FidelityRule, starts: list[ForcedStart]) -> dict[str, Any] | None:
    """Per-position KL (pooled over pairs) of the candidate and of the noise floor, for the KL plot."""
    noise, cand = make_pairs(starts)
    if not cand:
        return None
    return {
        "candidate": [float(x) for x in pool(cand).kl],
        "noise": [float(x) for x in pool(noise).kl] if noise else None,
        "tolerance": rule.tolerance,
        "threshold": rule.threshold,
    }


class FidelityKind:
    name = "fidelity"
    adoptable = False
    measures_fidelity = True
    measures_memory = False
    uses_workload = True
    same_arms = False
    can_curtail = False

    def check(self, design: DesignFile, path: Path) -> None:
        if not isinstance(design.rule, FidelityRule):
            raise DesignError(
                'a fidelity design needs rule.kind = "fidelity" with a tolerance', path=path, field="rule.kind"
            )
        check_stopping(self.name, design, path)
        starts = design.blocks * design.starts_per_arm
        if design.rule.margin is not None and starts < MIN_STARTS:
            raise DesignError(
                f"the fidelity rule's margin needs at least {MIN_STARTS} starts per arm (blocks × starts_per_arm), "
                f"got {starts}: {MIN_STARTS} give {MIN_STARTS} noise-floor pairs and {MIN_STARTS**2} candidate pairs",
                path=path,
                field="starts_per_arm",
            )
        check_no_vetoes(self.name, design, path)

    def check_recipes(
        self,
        design: DesignFile,
        recipes: dict[str, ResolvedRecipe | None],
        path: Path,
        table: Mapping[str, Metric] = BUILTIN,
    ) -> None:
        return None

    def check_workload(self, turns: list[Turn], workload: Path, path: Path) -> None:
        problems = workload_problems(turns)
        if len(problems) == len(turns):
            raise DesignError(
                f"workload {workload} has no turn whose continuation can be forced ({problems[0]}); "
                "make one with `frank fidelity fill`",
                path=path,
                field="workload",
            )

    def start(
        self,
        campaign: Campaign,
        reg: Registered,
        slot: Slot,
        recipe: ResolvedRecipe,
        workload: Workload | None,
        progress: Progress | None,
    ) -> StartOutcome:
        return fidelity_start(campaign, reg, slot, recipe, workload)

    def start_value(self, reg: Registered, out: StartOutcome) -> str:
        n = out.metrics.get("positions")
        return "" if n is None else f" ({int(n)} positions forced)"

    def analyze(self, campaign: Campaign, evidence: Evidence) -> Analysis:
        return analyze_fidelity(campaign, evidence)

    def describe(self, reg: Registered) -> Description:
        return Description(
            measures="It measures how far the candidate's next-token distributions move from the served recipe's, "
            "not speed.",
            head=f"- Measured: per-position KL(served ‖ candidate) from forced decode, top-{reg.design.fidelity.top_k} "
            "logprobs.",
        )

    def went_wrong(self, word: str) -> bool:
        return word != "passed"

    def no_decision(self, word: str) -> str:
        return "a fidelity check"


KIND = FidelityKind()
