"""The contract every design kind implements, and what the kinds share.

A *kind* (speed, fidelity, agent, screen, aa, memory) is one module with one object that satisfies
:class:`DesignKind`; :mod:`frankenstein.design.kinds` looks it up by name from one table. Nothing
outside that table branches on a kind's name: the registry asks the kind to check a design, the
runner asks it to run a start, the analysis asks it for the verdict, the ledger and the note read its
attributes and :class:`Description`.

    DesignKind           the Protocol: check, start, start_value, analyze, describe, went_wrong, no_decision
    Evidence             a design's registration and starts, read once; per-metric values computed once
    Analysis             a design's verdict and everything measured for it, as typed fields
    Failure              one failed or invalid start
    arm_values(...)      {block: {arm: mean over ok starts}} of one metric, and the failures
    block_values(...)    the primary metric per complete block, after the failure policy
    dropped_blocks(...)  blocks the failure policy dropped (neither analysed nor remaining)
    check_stopping(...)  refuse stopping = "curtail" for a kind that never stops early
    speculation_per_arm(...)  drafted/accepted/acceptance rate per arm (never a ratio between arms)
    settled(...)         whether a curtailing runner may stop before a block
    can_still_change(...)  whether blocks still to run could change a block-rule verdict (curtailment)
    metric_scope(metric) what a metric measures, in words
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from frankenstein.campaign import Campaign
from frankenstein.config import ResolvedRecipe
from frankenstein.design import rules, stats
from frankenstein.design.timespent import TimeSummary
from frankenstein.design.model import ARMS, DesignFile, Registered, Slot
from frankenstein.design.start import StartOutcome
from frankenstein.engines import traits_of
from frankenstein.design.predicts import PredictionCheck, parse_prediction
from frankenstein.design.veto import VetoResult, evaluate_veto, veto_problem
from frankenstein.errors import DesignError
from frankenstein.measure import metrics
from frankenstein.store import StartRow
from frankenstein.workload.trace import Turn, Workload

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Failure:
    """A start that did not give a value: ``failed`` (the engine) or ``invalid`` (the measurement)."""

    block: int
    arm: str
    status: str
    reason: str | None

    def dropped_note(self) -> str:
        return f"block {self.block + 1}: {self.arm} start {self.status} ({self.reason}); block dropped"


Values = dict[int, dict[str, float]]  # {block: {arm: mean over ok starts}}


@dataclass
class Evidence:
    """A design's verified registration and its starts, read from the store once (:meth:`read`); each
    metric's per-block values are computed once, on first use. :func:`frankenstein.design.analysis.analyze`
    reads it and hands it to the kind's ``analyze``; the kinds read starts only through it."""

    reg: Registered
    starts: list[StartRow]
    _values: dict[str, tuple[Values, list[Failure]]] = field(default_factory=dict, repr=False)

    @classmethod
    def read(cls, campaign: Campaign, reg: Registered) -> Evidence:
        return cls(reg, campaign.store.starts_of(reg.design_id))

    def values(self, metric: str) -> tuple[Values, list[Failure]]:
        """{block: {arm: mean over ok starts}} of one metric, and the failed or invalid starts."""
        if metric not in self._values:
            self._values[metric] = _values(self.starts, metric)
        return self._values[metric]

    def blocks(self) -> tuple[dict[int, float], dict[int, float], list[str]]:
        """Primary-metric value per complete block and arm, after the failure policy; and notes on dropped blocks."""
        return _block_values(self.reg, self.starts, self.values(self.reg.design.primary_metric))

    def speculation(self) -> dict[str, dict[str, float | None]]:
        """Drafted/accepted/acceptance rate per arm (:func:`speculation_per_arm`)."""
        return _speculation(self.starts)


@dataclass
class Analysis:
    """A design's result under its registered rule.

    ``verdict`` is the block rule's :class:`~frankenstein.design.rules.Verdict` (speed, screen, aa, agent);
    ``outcome``/``why`` carry the word of a kind that decides without one (fidelity: passed/failed/invalid);
    ``invalidated`` is set when the failure policy ``invalidate`` overrides the verdict."""

    reg: Registered
    verdict: rules.Verdict | None
    blocks_done: int
    dropped: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    secondary: dict[str, dict[str, Any]] = field(default_factory=dict)
    per_block: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)
    outcome: str | None = None
    why: str | None = None
    invalidated: str | None = None
    incomplete: str | None = None  # a run short of its registered blocks, not curtailed: "2 of 5 blocks"
    lines: list[str] = field(default_factory=list)  # the kind's own result lines, printed instead of the verdict table
    fidelity: dict[str, Any] | None = None  # fidelity summary (candidate and noise floor), JSON-ready
    kl: dict[str, Any] | None = None  # per-position KL of the candidate and the noise floor, for the plot
    matrix: dict[str, dict[str, dict[str, int]]] | None = None  # agent: {arm: {task: {"b<block>d<draw>": passed}}}
    speculation: dict[str, dict[str, float | None]] = field(default_factory=dict)  # per arm, see speculation_per_arm
    warnings: list[str] = field(default_factory=list)  # noise guard: starts run on a busy machine, named
    time_spent: TimeSummary | None = None  # where the time went: phases per arm (design/timespent.py)
    vetoes: list[VetoResult] = field(default_factory=list)  # the registered vetoes, checked (design/veto.py)
    predictions: list[PredictionCheck] = field(
        default_factory=list
    )  # earlier designs' predictions (design/predicts.py)

    @property
    def failed_vetoes(self) -> list[VetoResult]:
        """Vetoes that failed or could not be checked: each one stops an adoption."""
        return [v for v in self.vetoes if v.passed is not True]

    @property
    def word(self) -> str:
        if self.invalidated:
            return "invalid"
        if self.outcome:
            return self.outcome
        return self.verdict.word if self.verdict else "invalid"

    @property
    def reason(self) -> str:
        """Why the word is what it is, in one line."""
        return self.invalidated or self.why or (self.verdict.reason if self.verdict else "")


@dataclass(frozen=True)
class Description:
    """What the note says about a design of this kind."""

    measures: str  # "It measures ..." sentence
    head: str  # the design section's line on what was measured
    concurrency: str | None = None  # replaces the generic concurrency sentence


@runtime_checkable
class DesignKind(Protocol):
    """One kind of design. Attributes are data the other rooms read; methods are its behaviour."""

    name: str
    adoptable: bool  # a part may be adopted on this kind's verdict
    measures_fidelity: bool  # its verdict is a fidelity verdict (what a fidelity gate names)
    measures_memory: bool  # its verdict is a memory verdict (what a memory gate names); its starts sample RSS
    uses_workload: bool  # its starts replay or force a recorded workload
    same_arms: bool  # both arms must be the same recipe (A/A); otherwise they must differ
    can_curtail: bool  # the runner may stop early under stopping = "curtail"

    def check(self, design: DesignFile, path: Path) -> None:
        """Refuse, with a :class:`~frankenstein.errors.DesignError` naming the field, what this kind cannot run."""

    def check_workload(self, turns: list[Turn], workload: Path, path: Path) -> None:
        """Refuse a workload this kind cannot use."""

    def check_recipes(
        self,
        design: DesignFile,
        recipes: dict[str, ResolvedRecipe | None],
        path: Path,
        table: Mapping[str, metrics.Metric] = metrics.BUILTIN,
    ) -> None:
        """Refuse, once the arms are resolved, a primary metric an arm cannot produce (``table``: the metrics
        the design can name, built-in and its user metrics)."""

    def start(
        self,
        campaign: Campaign,
        reg: Registered,
        slot: Slot,
        recipe: ResolvedRecipe,
        workload: Workload | None,
        progress: Progress | None,
    ) -> StartOutcome:
        """Run one start of a recipe arm; engine failures become a failed outcome, never an exception."""

    def start_value(self, reg: Registered, out: StartOutcome) -> str:
        """What the runner prints after a start, e.g. ' decode_ms_per_token=31.6'."""

    def analyze(self, campaign: Campaign, evidence: Evidence) -> Analysis:
        """The verdict under the registered rule, from the design's starts as ``evidence`` read them (the
        campaign for what else a kind records: artifacts, episodes)."""

    def describe(self, reg: Registered) -> Description:
        """Sentences for the progress note."""

    def went_wrong(self, word: str) -> bool:
        """Whether the note lists this verdict under "what didn't work"."""

    def no_decision(self, word: str) -> str:
        """The summary's phrase for a design no ledger decision used."""


# ---------------------------------------------------------------- shared by the block-rule kinds


def arm_values(campaign: Campaign, reg: Registered, metric: str) -> tuple[Values, list[Failure]]:
    """{block: {arm: mean value over ok starts}}, and the failed/invalid starts."""
    return Evidence.read(campaign, reg).values(metric)


def _values(rows: list[StartRow], metric: str) -> tuple[Values, list[Failure]]:
    acc: dict[int, dict[str, list[float]]] = {}
    failures = []
    for row in rows:
        if not row.ok:
            failures.append(Failure(row.block, row.arm, row.status, row.reason))
            continue
        v = row.metrics.get(metric)
        if v is None:
            continue
        acc.setdefault(row.block, {}).setdefault(row.arm, []).append(float(v))
    return {b: {a: sum(v) / len(v) for a, v in arms.items()} for b, arms in acc.items()}, failures


def dropped_blocks(reg: Registered, failures: list[Failure]) -> set[int]:
    """Blocks the failure policy ``drop_block`` leaves out: they never come back, so they are not remaining."""
    return {f.block for f in failures} if reg.design.failure_policy == "drop_block" else set()


def block_values(campaign: Campaign, reg: Registered) -> tuple[dict[int, float], dict[int, float], list[str]]:
    """Primary-metric value per complete block and arm, after the failure policy; and notes on dropped blocks."""
    return Evidence.read(campaign, reg).blocks()


def _block_values(
    reg: Registered, rows: list[StartRow], primary: tuple[Values, list[Failure]]
) -> tuple[dict[int, float], dict[int, float], list[str]]:
    values, failures = primary
    bad_blocks = {f.block for f in failures}
    served, candidate = {}, {}
    for b, arms in sorted(values.items()):
        if b in bad_blocks and reg.design.failure_policy == "drop_block":
            continue
        if all(a in arms for a in ARMS):
            served[b], candidate[b] = arms["served"], arms["candidate"]
    notes = [f.dropped_note() for f in failures] + missing_notes(rows, reg.design.primary_metric)
    return served, candidate, notes


def missing_notes(rows: list[StartRow], metric: str) -> list[str]:
    """Ok starts that reported no primary metric (e.g. ``pre_ms`` from an engine that reports no prompt time):
    their blocks are not complete, and the analysis says so instead of a bare "no blocks"."""
    return [
        f"start {r.id} (block {(r.block or 0) + 1}, {r.arm}) is ok but reported no {metric}, so its block is incomplete"
        for r in rows
        if r.ok and r.metrics.get(metric) is None
    ]


def check_vetoes(design: DesignFile, path: Path, known: Mapping[str, metrics.Metric]) -> None:
    """Refuse a veto on an unknown metric or one that can never pass in the design's blocks, and vetoes on a
    design whose arms are not one served and one candidate in paired blocks (unpaired, a family)."""
    if design.vetoes and (design.layout == "unpaired" or design.family):
        shape = "an unpaired design" if design.layout == "unpaired" else "a family of candidates"
        why = f"vetoes are checked block by block on one candidate against served; {shape} takes none"
        raise DesignError(why, path=path, field="vetoes")
    for i, veto in enumerate(design.vetoes):
        problem = veto_problem(veto, design.blocks, known)
        if problem:
            raise DesignError(problem[1], path=path, field=f"vetoes[{i}].{problem[0]}")


def check_prediction(design: DesignFile, path: Path, known: Mapping[str, metrics.Metric]) -> None:
    """Refuse a ``predicts`` that is not a non-zero number in the primary metric's unit."""
    if design.predicts is None:
        return
    m = known.get(design.primary_metric)
    try:
        parse_prediction(design.predicts, design.primary_metric, m.unit if m else "")
    except ValueError as exc:
        raise DesignError(str(exc), path=path, field="predicts") from exc


def check_no_vetoes(kind: str, design: DesignFile, path: Path) -> None:
    """Refuse vetoes on a kind that decides no adoption by a block rule (fidelity, agent, memory)."""
    if design.vetoes:
        raise DesignError(
            f"a {kind} design takes no vetoes: a veto stops the adoption a speed design would decide",
            path=path,
            field="vetoes",
        )


def veto_results(ev: Evidence, blocks: list[int]) -> list[VetoResult]:
    """Each registered veto over the same starts and the same complete blocks as the primary metric."""
    reg, out = ev.reg, []
    for veto in reg.design.vetoes:
        values = ev.values(veto.metric)[0]
        m = reg.metric(veto.metric)
        direction = m.direction if m is not None else "lower"
        out.append(evaluate_veto(veto, {b: values[b] for b in blocks if b in values}, direction, reg.design.blocks))
    return out


def check_stopping(kind: str, design: DesignFile, path: Path) -> None:
    """Refuse ``stopping = "curtail"`` for a kind whose runner never stops early (agent, fidelity):
    registering it would promise a stopping rule that is not implemented. Such kinds pair their arms in
    blocks, so ``layout = "unpaired"`` is refused too."""
    if design.layout == "unpaired":
        raise DesignError(
            f'layout = "unpaired" is for speed and screen designs; {kind} designs pair their arms in blocks',
            path=path,
            field="layout",
        )
    if design.stopping == "curtail":
        raise DesignError(
            f'stopping = "curtail" is not implemented for {kind} designs (they run every block); use stopping = "none"',
            path=path,
            field="stopping",
        )


def drafts(recipe: ResolvedRecipe) -> bool:
    """Whether the recipe launches speculative decoding (one of its engine's ``draft_flags`` among its args)."""
    return traits_of(recipe.engine).drafts(recipe.args)


def check_primary_metric(
    design: DesignFile,
    recipes: dict[str, ResolvedRecipe | None],
    path: Path,
    table: Mapping[str, metrics.Metric] = metrics.BUILTIN,
) -> None:
    """A primary metric the arms can produce (what it ``needs`` in the registry, :mod:`frankenstein.measure.metrics`):
    a stream metric needs ``replay.stream``, a draft metric needs both arms to draft (a ratio against an arm
    that cannot produce the metric means nothing; report it per arm as a secondary metric instead), a
    metric a command arm prints needs command arms, and one read from an engine's ``/metrics`` needs engines."""
    check_goodput_targets(design, path, table)
    metric = table.get(design.primary_metric)
    needs = metric.needs if metric else ()
    if "stream" in needs and not design.replay.stream and any(recipes.values()):
        raise DesignError(
            f"{design.primary_metric} is timed on the client's stream (first token, chunk gaps), and this design "
            "replays with replay.stream = false, so no start could produce it; stream, or test another metric",
            path=path,
            field="primary_metric",
        )
    for arm, recipe in recipes.items():
        if why := _cannot_produce(needs, recipe):
            raise DesignError(
                f"arm {arm} {why}, so it cannot produce {design.primary_metric}; test a metric both arms have "
                f"and list {design.primary_metric} under secondary (it is then reported per arm)",
                path=path,
                field="primary_metric",
            )


def check_goodput_targets(design: DesignFile, path: Path, table: Mapping[str, metrics.Metric]) -> None:
    """A goodput metric (primary or secondary) needs the targets it counts against: ``replay.goodput``."""
    for name in (design.primary_metric, *design.secondary):
        metric = table.get(name)
        if metric and "goodput_targets" in metric.needs and design.replay.goodput is None:
            raise DesignError(
                f"{name} counts the requests that meet the registered latency targets, and this design registers "
                "none; add them under [replay], e.g. goodput = { ttft_ms = 500, itl_ms = 50 }",
                path=path,
                field="replay.goodput",
            )
    if design.replay.goodput is not None and not design.replay.stream:
        raise DesignError(
            "goodput's targets (TTFT, ITL) are timed on the client's stream, and this design replays with "
            "replay.stream = false; stream, or drop the targets",
            path=path,
            field="replay.goodput",
        )


def _cannot_produce(needs: tuple[str, ...], recipe: ResolvedRecipe | None) -> str | None:
    """Why an arm (``None``: a command arm) cannot produce a metric with these needs, or None."""
    if recipe is None:
        return "is a command arm, not an engine with a /metrics to read" if "engine_metrics" in needs else None
    if "command" in needs:
        return f"({recipe.name}) is an engine recipe, not a command arm that prints the metric"
    if "drafting" in needs and not drafts(recipe):
        return f"({recipe.name}) launches no speculative decoding"
    return None


def can_still_change(reg: Registered, served: list[float], candidate: list[float], remaining: int) -> bool:
    """Whether ``remaining`` more blocks could change the verdict of the registered block rule."""
    rule = reg.design.rule
    if not isinstance(rule, rules.BlockRule):  # fidelity, memory: decided without blocks
        return True
    if any(not v > 0 for v in (*served, *candidate)):  # no ratio: the verdict is invalid, nothing to curtail
        return True
    g = rules.gains(stats.log_ratios(served, candidate), reg.frozen.direction)
    return rules.can_change(rule, g, remaining)


def settled(campaign: Campaign, reg: Registered, next_block: int) -> bool:
    """Whether the verdict can no longer change before ``next_block`` runs (curtailment): every earlier
    block is analysed or dropped, and the blocks still to run (registered − analysed − dropped) cannot move it."""
    ev = Evidence.read(campaign, reg)
    served, candidate, _ = ev.blocks()
    dropped = {b for b in dropped_blocks(reg, ev.values(reg.design.primary_metric)[1]) if b < next_block}
    complete = [b for b in range(next_block) if b in served and b in candidate and b not in dropped]
    if len(complete) + len(dropped) < next_block:
        return False
    remaining = rules.remaining_blocks(reg.design.blocks, len(complete), len(dropped))
    return not can_still_change(reg, [served[b] for b in complete], [candidate[b] for b in complete], remaining)


def speculation_per_arm(campaign: Campaign, reg: Registered) -> dict[str, dict[str, float | None]]:
    """Per arm, over its ok starts: drafted and accepted tokens (each start's sums over the turns that
    drafted) and their ratio. Reported per arm, never as a ratio between arms: an arm without speculative
    decoding has no rate. Empty when no arm drafted."""
    return _speculation(campaign.store.starts_of(reg.design_id))


def _speculation(rows: list[StartRow]) -> dict[str, dict[str, float | None]]:
    acc = {arm: [0.0, 0.0, 0] for arm in ARMS}
    for row in rows:
        drafted = row.metrics.get("drafted")
        if row.ok and drafted is not None and row.arm in acc:
            acc[row.arm][0] += float(drafted)
            acc[row.arm][1] += float(row.metrics.get("accepted") or 0.0)
            acc[row.arm][2] += 1
    if not any(n for _, _, n in acc.values()):
        return {}
    return {
        arm: {
            "drafted": d if n else None,
            "accepted": a if n else None,
            "acceptance_rate": a / d if n and d else None,
            "starts": float(n),
        }
        for arm, (d, a, n) in acc.items()
    }


def speculation_lines(per_arm: dict[str, dict[str, float | None]]) -> list[str]:
    """'served: no drafts; candidate: drafted 1200, accepted 540, acceptance rate 0.4500 (5 starts)'."""
    out = []
    for arm, v in per_arm.items():
        if not v.get("starts"):
            out.append(f"{arm}: no drafts recorded (it cannot produce an acceptance rate)")
            continue
        rate = v.get("acceptance_rate")
        out.append(
            f"{arm}: drafted {v['drafted']:.0f}, accepted {v['accepted']:.0f}, acceptance rate "
            f"{'-' if rate is None else f'{rate:.4f}'} ({v['starts']:.0f} starts)"
        )
    return out


def metric_scope(metric: str, declared: metrics.Metric | None = None) -> str:
    """What a metric measures, for the sentence on step time versus task time (``declared``: the design's
    own metric of that name, a user metric; else the built-in one)."""
    m = declared or metrics.BUILTIN.get(metric)
    scope = m.scope if m else None
    if scope == "task":
        return f"graded {metric} per start, not speed: a part that keeps every pass can still be slower"
    if scope == "step":
        return (
            f"step time (`{metric}`, from the server's own timings), not task time: it does not show that a task "
            "finishes sooner or still passes; an agent design shows that"
        )
    if scope == "request":
        return (
            f"per-request time (`{metric}`), not task time: it does not show that a whole task finishes sooner "
            "or still passes"
        )
    if m is not None:
        return f"`{metric}` in {m.unit} ({m.meaning}), as the arms reported it"
    return f"`{metric}` as the arms reported it"
