"""What was recorded about a design, beyond its verdict: the facts the ledger's gates and the note's
"what this does and does not show" are made from. Reads the store; decides nothing.

Resources: each start's ``resources`` JSON holds, per GPU, the peak and mean memory and the mean and
max power that NVML read while the engine ran, or ``{"gpu": null}`` where there was no GPU. Absent is
never read as zero: a design whose starts carry no GPU figures has its memory gate "not checked".

    design_facts(campaign, evidence) -> DesignFacts
    read_resources(starts) -> Resources
    fidelity_paths(campaign, design_id) -> tuple[str, ...]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from frankenstein.campaign import Campaign
from frankenstein.design.kinds import kind_of, timed
from frankenstein.design import rules
from frankenstein.design.kinds.base import Evidence, can_still_change, dropped_blocks
from frankenstein.design.start import load_warnings, machine_cells, machine_differences, machine_of, start_label
from frankenstein.store import StartRow

HostCells = tuple[int, str, str, str, str]  # block, Ray node, GPU, driver, engine binary sha256 (12 hex)


@dataclass(frozen=True)
class GpuArm:
    """One arm on one GPU, over the arm's ok starts: the largest peak, the mean of the means, the largest max."""

    peak_mib: float
    power_w_mean: float | None
    power_w_max: float | None


@dataclass(frozen=True)
class Resources:
    starts: int  # ok starts looked at
    with_gpu: int  # of those, starts that carried GPU figures
    per_arm: dict[str, dict[int, GpuArm]] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    not_sampled: tuple[str, ...] = ()  # why, per ok start that could not look at a GPU (never "no GPU")

    @property
    def absent(self) -> bool:
        return self.with_gpu == 0

    def largest_increase(self) -> tuple[int, float] | None:
        """(GPU index, candidate peak − served peak in MiB) for the GPU where the increase is largest."""
        served, cand = self.per_arm.get("served", {}), self.per_arm.get("candidate", {})
        common = sorted(set(served) & set(cand))
        if not common:
            return None
        return max(((i, cand[i].peak_mib - served[i].peak_mib) for i in common), key=lambda t: (t[1], -t[0]))


@dataclass(frozen=True)
class DesignFacts:
    design_id: str
    kind: str
    primary_metric: str
    concurrency: int
    workload_path: str | None
    workload_hash: str | None
    max_turns: int | None
    warmup_turns: int
    engines: tuple[str, ...]
    engine_versions: tuple[str, ...]
    blocks: int
    blocks_run: int  # blocks with every start recorded
    starts_ok: int
    starts_failed: int
    stopped: str | None  # None | "curtailed" | "incomplete"
    resources: Resources
    fidelity_gate: str | None
    memory_gate_mib: float | None
    top_k: int
    fidelity_paths: tuple[str, ...] = ()  # the forced-decode path(s) of this fidelity design, or of its gate
    machines: tuple[tuple[str, dict[str, str]], ...] = ()  # (start label, metadata cells) per start
    machine_flags: tuple[str, ...] = ()  # starts whose machine differs from the rest
    load_warnings: tuple[str, ...] = ()  # starts run while the machine was busier than its cores
    not_fresh: tuple[str, ...] = ()  # arms whose ok starts talked to a server already running (engine external)
    hosts: tuple[HostCells, ...] = ()  # per start a cluster ran (frank run --ray): block, node, GPU, driver, engine
    rate: float | None = None  # replay.rate: requests/s after the warm-up (None: the concurrency alone paced them)
    arrivals: str = "poisson"  # replay.arrivals, meaningful with a rate


def _gpu_entries(data: dict[str, Any]) -> tuple[list[dict[str, Any]] | None, str | None]:
    gpus = data.get("gpu")
    if not isinstance(gpus, list) or not gpus:
        return None, None
    return gpus, data.get("memory_source")


def read_resources(rows: list[StartRow]) -> Resources:
    """Per arm and GPU, from the ok start rows of one design."""
    acc: dict[str, dict[int, list[dict[str, Any]]]] = {}
    ok, with_gpu, sources, why = 0, 0, set(), []
    for row in rows:
        if not row.ok:
            continue
        ok += 1
        gpus, source = _gpu_entries(row.resources)
        if gpus is None:
            if row.resources.get("status") == "not sampled" or not row.resources:
                why.append(str(row.resources.get("note") or "not sampled: nothing recorded"))
            continue
        with_gpu += 1
        if source:
            sources.add(str(source))
        for g in gpus:
            acc.setdefault(row.arm, {}).setdefault(int(g["index"]), []).append(g)
    per_arm = {arm: {i: _fold(gs) for i, gs in sorted(by_gpu.items())} for arm, by_gpu in acc.items()}
    return Resources(
        starts=ok, with_gpu=with_gpu, per_arm=per_arm, sources=tuple(sorted(sources)), not_sampled=tuple(why)
    )


def _fold(gs: list[dict[str, Any]]) -> GpuArm:
    means = [float(g["power_w_mean"]) for g in gs if g.get("power_w_mean") is not None]
    maxes = [float(g["power_w_max"]) for g in gs if g.get("power_w_max") is not None]
    return GpuArm(
        peak_mib=max(float(g["memory_mib_peak"]) for g in gs),
        power_w_mean=sum(means) / len(means) if means else None,
        power_w_max=max(maxes) if maxes else None,
    )


def design_facts(campaign: Campaign, ev: Evidence) -> DesignFacts:
    """Everything the note and the ledger say about a design besides its verdict, from its starts as ``ev``
    read them (the campaign for a fidelity gate's own starts)."""
    reg, rows = ev.reg, ev.starts
    d = reg.design
    recorded = {(r.block, r.position) for r in rows}
    by_block: dict[int, list[bool]] = {}
    for s in reg.slots():
        by_block.setdefault(s.block, []).append((s.block, s.position) in recorded)
    blocks_run = sum(1 for v in by_block.values() if all(v))
    ok = [r for r in rows if r.ok]
    return DesignFacts(
        design_id=reg.design_id,
        kind=d.kind,
        primary_metric=d.primary_metric,
        concurrency=d.replay.concurrency,
        rate=d.replay.rate,
        arrivals=d.replay.arrivals,
        workload_path=reg.frozen.workload_path,
        workload_hash=reg.frozen.workload_hash,
        max_turns=d.replay.max_turns,
        warmup_turns=d.replay.warmup_turns,
        engines=_distinct(r.engine for r in ok),
        engine_versions=_distinct(r.engine_version for r in ok),
        blocks=d.blocks,
        blocks_run=blocks_run,
        starts_ok=len(ok),
        starts_failed=len(rows) - len(ok),
        stopped=_stopped(ev, blocks_run),
        resources=read_resources(rows),
        fidelity_gate=d.gates.fidelity,
        memory_gate_mib=d.gates.memory_mib,
        top_k=d.fidelity.top_k,
        fidelity_paths=paths_of(rows)
        if kind_of(d.kind).measures_fidelity
        else fidelity_paths(campaign, d.gates.fidelity),
        machines=tuple((start_label(r), machine_cells(machine_of(r), r)) for r in rows),
        machine_flags=tuple(machine_differences(rows)),
        load_warnings=tuple(load_warnings(rows, timed=timed(d.kind))),
        not_fresh=_distinct(r.arm for r in ok if r.capabilities.get("fresh_start") is False),
        hosts=cluster_hosts(rows),
    )


def cluster_hosts(rows: list[StartRow]) -> tuple[HostCells, ...]:
    """(block, node name, GPU, driver, engine binary sha256) of every start a Ray cluster ran (its
    ``resources["host"]``); empty for a local run."""
    out = []
    for r in rows:
        host = r.resources.get("host")
        if isinstance(host, dict) and host.get("node"):
            snap = machine_of(r)
            gpu = ", ".join(g.name for g in snap.gpus) if snap and snap.gpus else "no GPU" if snap else "not recorded"
            driver = (snap.driver_version if snap else None) or "—"
            out.append((r.block, str(host["node"]), gpu, driver, _engine_sha(r)))
    return tuple(out)


def _engine_sha(row: StartRow) -> str:
    """The engine binary's sha256 (12 hex), or the pinned program's the host checked (a command arm)."""
    binary = row.resources.get("engine_binary")
    if isinstance(binary, dict) and binary.get("sha256"):
        return str(binary["sha256"])[:12]
    for pin in row.resources.get("pins") or []:
        if isinstance(pin, dict) and pin.get("role") in ("engine binary", "command program") and pin.get("sha256"):
            return str(pin["sha256"])[:12]
    return "—"


def fresh_start_lines(f: DesignFacts) -> list[str]:
    """The sentence for a design whose starts were not fresh engine lives (an ``external`` arm), else none."""
    if not f.not_fresh:
        return []
    return [
        f"Starts were not fresh: arm(s) {', '.join(f.not_fresh)} ran against a server already running (engine "
        "external, not started by frank), so their starts share one process and its warm state; the blocks "
        "compare occasions of that process, not independent engine starts."
    ]


def fidelity_paths(campaign: Campaign, design_id: str | None) -> tuple[str, ...]:
    """The paths a fidelity design's ok starts recorded (``capabilities.fidelity_path``), e.g. the decode path."""
    return paths_of(campaign.store.starts_of(design_id)) if design_id else ()


def paths_of(rows: list[StartRow]) -> tuple[str, ...]:
    """The fidelity paths these ok starts recorded, sorted."""
    return tuple(
        sorted({str(r.capabilities["fidelity_path"]) for r in rows if r.ok and r.capabilities.get("fidelity_path")})
    )


def _distinct(values: Any) -> tuple[str, ...]:
    return tuple(sorted({str(v) for v in values if v}))


def _stopped(ev: Evidence, blocks_run: int) -> str | None:
    """Whether the design stopped short: curtailed (its rule allowed it) or simply incomplete."""
    reg = ev.reg
    if blocks_run >= reg.design.blocks:
        return None
    if reg.design.stopping == "curtail" and kind_of(reg.design.kind).can_curtail:
        served, candidate, _ = ev.blocks()
        done = sorted(b for b in served if b in candidate)
        dropped = dropped_blocks(reg, ev.values(reg.design.primary_metric)[1])
        remaining = rules.remaining_blocks(reg.design.blocks, len(done), len(dropped))
        if not can_still_change(reg, [served[b] for b in done], [candidate[b] for b in done], remaining):
            return "curtailed"
    return "incomplete"
