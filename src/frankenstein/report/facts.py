"""What was recorded about a design, beyond its verdict: the facts the ledger's gates and the note's
"what this does and does not show" are made from.

Reading (one function, :func:`design_facts`, touches the store) is kept apart from the pure functions
that turn facts into gate decisions and sentences, so tests compare strings exactly.

Resources: each start's ``resources`` JSON holds, per GPU, the peak and mean memory and the mean and
max power that NVML read while the engine ran, or ``{"gpu": null}`` where there was no GPU. Absent is
never read as zero: a design whose starts carry no GPU figures has its memory gate "not checked".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from frankenstein.campaign import Campaign
from frankenstein.design.model import ARMS
from frankenstein.design.registry import Registered

STEP_METRICS = ("verify_step_ms", "decode_ms_per_token", "tokens_per_step", "acceptance_rate")
REQUEST_METRICS = ("ttft_ms", "e2e_ms", "prompt_ms", "prefill_tokens_per_s")


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


def _gpu_entries(resources_json: str) -> tuple[list[dict[str, Any]] | None, str | None]:
    try:
        data = json.loads(resources_json or "{}")
    except ValueError:
        return None, None
    gpus = data.get("gpu") if isinstance(data, dict) else None
    if not isinstance(gpus, list) or not gpus:
        return None, None
    return gpus, data.get("memory_source")


def read_resources(rows: list[Any]) -> Resources:
    """Per arm and GPU, from the ok start rows of one design."""
    acc: dict[str, dict[int, list[dict[str, Any]]]] = {}
    ok, with_gpu, sources = 0, 0, set()
    for row in rows:
        if row["status"] != "ok":
            continue
        ok += 1
        gpus, source = _gpu_entries(row["resources"])
        if gpus is None:
            continue
        with_gpu += 1
        if source:
            sources.add(str(source))
        for g in gpus:
            acc.setdefault(row["arm"], {}).setdefault(int(g["index"]), []).append(g)
    per_arm = {arm: {i: _fold(gs) for i, gs in sorted(by_gpu.items())} for arm, by_gpu in acc.items()}
    return Resources(starts=ok, with_gpu=with_gpu, per_arm=per_arm, sources=tuple(sorted(sources)))


def _fold(gs: list[dict[str, Any]]) -> GpuArm:
    means = [float(g["power_w_mean"]) for g in gs if g.get("power_w_mean") is not None]
    maxes = [float(g["power_w_max"]) for g in gs if g.get("power_w_max") is not None]
    return GpuArm(peak_mib=max(float(g["memory_mib_peak"]) for g in gs),
                  power_w_mean=sum(means) / len(means) if means else None, power_w_max=max(maxes) if maxes else None)


def memory_gate(res: Resources, limit_mib: float) -> tuple[bool | None, str]:
    """(passed, sentence); passed is None when the gate could not be checked (absent is not zero)."""
    if res.starts == 0:
        return None, "memory gate not checked: no ok starts"
    if res.absent:
        return None, f"memory gate not checked: no GPU (resources absent in all {res.starts} ok starts)"
    if res.with_gpu < res.starts:
        return None, f"memory gate not checked: {res.starts - res.with_gpu} of {res.starts} ok starts have no GPU figures"
    inc = res.largest_increase()
    if inc is None:
        return None, "memory gate not checked: no GPU seen by both arms"
    gpu, mib = inc
    ok = mib <= limit_mib
    return ok, (f"memory gate {'passed' if ok else 'failed'}: the largest increase of peak GPU memory is "
                f"{mib:+.0f} MiB (GPU {gpu}), {'within' if ok else 'over'} the {limit_mib:g} MiB allowed")


def design_facts(campaign: Campaign, reg: Registered) -> DesignFacts:
    """Everything the note and the ledger say about a design besides its verdict."""
    from frankenstein.design.runner import slots

    rows = campaign.store.query("SELECT * FROM starts WHERE design_id = ? ORDER BY block, position", (reg.design_id,))
    d = reg.design
    recorded = {(r["block"], r["position"]) for r in rows}
    by_block: dict[int, list[bool]] = {}
    for s in slots(reg):
        by_block.setdefault(s.block, []).append((s.block, s.position) in recorded)
    blocks_run = sum(1 for v in by_block.values() if all(v))
    ok = [r for r in rows if r["status"] == "ok"]
    return DesignFacts(
        design_id=reg.design_id, kind=d.kind, primary_metric=d.primary_metric, concurrency=d.replay.concurrency,
        workload_path=reg.frozen.workload_path, workload_hash=reg.frozen.workload_hash, max_turns=d.replay.max_turns,
        warmup_turns=d.replay.warmup_turns, engines=_distinct(r["engine"] for r in ok),
        engine_versions=_distinct(r["engine_version"] for r in ok), blocks=d.blocks, blocks_run=blocks_run,
        starts_ok=len(ok), starts_failed=len(rows) - len(ok), stopped=_stopped(campaign, reg, blocks_run),
        resources=read_resources(rows), fidelity_gate=d.gates.fidelity, memory_gate_mib=d.gates.memory_mib,
        top_k=d.fidelity.top_k,
        fidelity_paths=fidelity_paths(campaign, reg.design_id if d.kind == "fidelity" else d.gates.fidelity),
    )


def fidelity_paths(campaign: Campaign, design_id: str | None) -> tuple[str, ...]:
    """The paths a fidelity design's ok starts recorded (``capabilities.fidelity_path``), e.g. the decode path."""
    if not design_id:
        return ()
    rows = campaign.store.query("SELECT capabilities FROM starts WHERE design_id = ? AND status = 'ok'", (design_id,))
    paths = set()
    for r in rows:
        try:
            path = json.loads(r["capabilities"] or "{}").get("fidelity_path")
        except (ValueError, AttributeError):
            path = None
        if path:
            paths.add(str(path))
    return tuple(sorted(paths))


def _distinct(values: Any) -> tuple[str, ...]:
    return tuple(sorted({str(v) for v in values if v}))


def _stopped(campaign: Campaign, reg: Registered, blocks_run: int) -> str | None:
    """Whether the design stopped short: curtailed (its rule allowed it) or simply incomplete."""
    if blocks_run >= reg.design.blocks:
        return None
    if reg.design.stopping == "curtail" and reg.design.kind not in ("fidelity", "agent"):
        from frankenstein.design.analysis import block_values, can_still_change

        served, candidate, _ = block_values(campaign, reg)
        done = sorted(b for b in served if b in candidate)
        if not can_still_change(reg, [served[b] for b in done], [candidate[b] for b in done], reg.design.blocks - len(done)):
            return "curtailed"
    return "incomplete"


def metric_scope(metric: str) -> str:
    """What a metric measures, for the sentence on step time versus task time."""
    if metric == "passes":
        return "graded passes per start, not speed: a part that keeps every pass can still be slower"
    if metric in STEP_METRICS:
        return (f"step time (`{metric}`, from the server's own timings), not task time: it does not show that a task "
                "finishes sooner or still passes; an agent design shows that")
    if metric in REQUEST_METRICS:
        return (f"per-request time (`{metric}`), not task time: it does not show that a whole task finishes sooner "
                "or still passes")
    return f"`{metric}` as the arms reported it"


def resource_lines(res: Resources) -> list[str]:
    """Memory and power seen, per GPU, or a plain statement that they are absent."""
    if res.starts and res.absent:
        return [f"GPU memory and power: absent (no GPU or NVML where the {res.starts} ok starts ran), not zero."]
    if not res.starts:
        return ["GPU memory and power: no ok starts."]
    lines = []
    if res.with_gpu < res.starts:
        lines.append(f"GPU figures absent in {res.starts - res.with_gpu} of {res.starts} ok starts.")
    gpus = sorted({i for arm in res.per_arm.values() for i in arm})
    src = f" ({', '.join(res.sources)} memory)" if res.sources else ""
    for i in gpus:
        parts = []
        for arm in ARMS:
            g = res.per_arm.get(arm, {}).get(i)
            if g is None:
                parts.append(f"{arm}: absent")
                continue
            power = "power absent" if g.power_w_mean is None else f"power mean {g.power_w_mean:.0f} W, max {g.power_w_max:.0f} W"
            parts.append(f"{arm}: peak {g.peak_mib:.0f} MiB, {power}")
        lines.append(f"GPU {i}{src}: " + "; ".join(parts) + ".")
    return lines


def what_it_shows(f: DesignFacts) -> list[str]:
    """Sentences, generated from the facts, on what a design's result does and does not show."""
    lines = [_measures(f), _concurrency(f)]
    if f.workload_hash:
        turns = f"the first {f.max_turns} turns" if f.max_turns else "all turns"
        lines.append(f"Workload `{_basename(f.workload_path)}` (hash `{f.workload_hash[:12]}`), {turns} per start after "
                     f"{f.warmup_turns} warm-up turn(s): other prompts and lengths may behave differently.")
    lines.append(_engines(f))
    lines.append(_fidelity(f))
    lines += resource_lines(f.resources)
    if f.memory_gate_mib is not None:
        text = memory_gate(f.resources, f.memory_gate_mib)[1]
        lines.append(text[0].upper() + text[1:] + ".")
    lines.append(_blocks(f))
    return lines


def _measures(f: DesignFacts) -> str:
    if f.kind == "fidelity":
        return ("It measures how far the candidate's next-token distributions move from the served recipe's, "
                "not speed.")
    if f.kind == "aa":
        return f"It is an A/A design: it measures how often the rule fires on no change, for {metric_scope(f.primary_metric)}."
    return f"It measures {metric_scope(f.primary_metric)}."


def _concurrency(f: DesignFacts) -> str:
    if f.kind == "agent":
        return "Tested one agent, one request at a time: it says nothing about concurrent serving."
    if f.concurrency == 1:
        return "Tested at concurrency 1 (one request at a time): it says nothing about batched or concurrent serving."
    return f"Tested at concurrency {f.concurrency}: it says nothing about other concurrency levels."


def _engines(f: DesignFacts) -> str:
    eng = ", ".join(f.engines) or "not recorded"
    if len(f.engine_versions) > 1:
        return f"Engine {eng}; versions differ across starts: {', '.join(f.engine_versions)}."
    return f"Engine {eng}, version {f.engine_versions[0] if f.engine_versions else 'not recorded'} in every ok start."


def _fidelity(f: DesignFacts) -> str:
    bound = "KL over the top-k union plus one tail bucket is a lower bound of the full-vocabulary KL"
    path = "; ".join(f.fidelity_paths) or "not recorded"
    if f.kind == "fidelity":
        return (f"Fidelity path measured: {path}; forced decode of the recorded continuations, top-{f.top_k} "
                f"logprobs requested; {bound}. Other paths (e.g. accepted draft tokens) were not measured.")
    if f.fidelity_gate:
        return f"Fidelity was gated by design `{f.fidelity_gate}` (path measured: {path}; {bound})."
    return "Fidelity was not measured for this design: it does not show that the outputs are unchanged."


def _blocks(f: DesignFacts) -> str:
    text = f"{f.blocks_run} of {f.blocks} registered blocks run"
    if f.stopped == "curtailed":
        text += " (curtailed: the registered rule could no longer change its verdict)"
    elif f.stopped == "incomplete":
        text += " (incomplete: the verdict above is over the blocks run so far)"
    text += f"; {f.starts_ok} ok start(s)"
    if f.starts_failed:
        text += f", {f.starts_failed} failed or invalid (recorded, see the block table)"
    return text + "."


def _basename(path: str | None) -> str:
    return (path or "").replace("\\", "/").rsplit("/", 1)[-1]
