"""Sentences, made from a design's recorded facts, on what its result does and does not show.

Pure functions over :class:`~frankenstein.design.facts.DesignFacts` (read by :mod:`frankenstein.design.facts`),
so tests compare strings exactly.
"""

from __future__ import annotations

from frankenstein.design.facts import DesignFacts, Resources, fresh_start_lines
from frankenstein.design.kinds import kind_of
from frankenstein.design.model import ARMS
from frankenstein.gates import memory_gate


def resource_lines(res: Resources) -> list[str]:
    """Memory and power seen, per GPU, or a plain statement that they are absent."""
    if res.starts and res.absent and res.not_sampled:
        why = "; ".join(sorted(set(res.not_sampled)))
        return [
            f"GPU memory and power: not sampled in {len(res.not_sampled)} of the {res.starts} ok starts ({why}); "
            "absent, not zero, and not a statement that there was no GPU."
        ]
    if res.starts and res.absent:
        return [f"GPU memory and power: absent (no GPU where the {res.starts} ok starts ran), not zero."]
    if not res.starts:
        return ["GPU memory and power: no ok starts."]
    lines = []
    if res.with_gpu < res.starts:
        why = f" (not sampled in {len(res.not_sampled)})" if res.not_sampled else ""
        lines.append(f"GPU figures absent in {res.starts - res.with_gpu} of {res.starts} ok starts{why}.")
    gpus = sorted({i for arm in res.per_arm.values() for i in arm})
    src = f" ({', '.join(res.sources)} memory)" if res.sources else ""
    for i in gpus:
        parts = []
        for arm in ARMS:
            g = res.per_arm.get(arm, {}).get(i)
            if g is None:
                parts.append(f"{arm}: absent")
                continue
            power = (
                "power absent"
                if g.power_w_mean is None
                else f"power mean {g.power_w_mean:.0f} W, max {g.power_w_max:.0f} W"
            )
            parts.append(f"{arm}: peak {g.peak_mib:.0f} MiB, {power}")
        lines.append(f"GPU {i}{src}: " + "; ".join(parts) + ".")
    return lines


def what_it_shows(f: DesignFacts, measures: str, concurrency: str | None = None) -> list[str]:
    """Sentences, generated from the facts, on what a design's result does and does not show."""
    lines = [measures, concurrency or _concurrency(f)]
    if f.workload_hash:
        lines.append(_workload(f))
    lines.append(_engines(f))
    lines += fresh_start_lines(f)
    lines.append(_fidelity(f))
    lines += resource_lines(f.resources)
    if f.memory_gate_mib is not None:
        text = memory_gate(f.resources, f.memory_gate_mib)[1]
        lines.append(text[0].upper() + text[1:] + ".")
    lines.append(_blocks(f))
    return lines


def _workload(f: DesignFacts) -> str:
    """Which turns a start used: a fidelity start forces every turn (no warm-up), a speed start skips its
    registered warm-up turns."""
    turns = f"the first {f.max_turns} turns" if f.max_turns else "all turns"
    if kind_of(f.kind).measures_fidelity:
        used = f"{turns} per start, each forced (a fidelity start takes no warm-up turn)"
    else:
        used = f"{turns} per start after {f.warmup_turns} warm-up turn(s)"
    return (
        f"Workload `{_basename(f.workload_path)}` (hash `{(f.workload_hash or '')[:12]}`), {used}: "
        "other prompts and lengths may behave differently."
    )


NOT_EQUAL_QUALITY = (
    "No harm shown is not equal quality: the harm rule did not fire, so no pass difference was detected "
    "at this size; it does not show that the arms pass equally often"
)


def stated_limits(kind: str, says: str, limits: list[str], harm: str | None = None) -> list[str]:
    """After the generated lines: an agent design's 'no harm shown is not equal quality' (when its harm rule
    did not fire) with the largest harm the data exclude (``harm``, from ``design.table.harm_text``), then the
    design's own ``limits`` as registered, each as written."""
    lines = []
    if kind == "agent" and says == "no harm shown":
        lines.append(NOT_EQUAL_QUALITY + (f"; {harm}." if harm else "."))
    return lines + [_sentence(text) for text in limits]


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def _concurrency(f: DesignFacts) -> str:
    if f.rate is not None:
        return (
            f"Tested at concurrency {f.concurrency} with {f.rate:g} requests/s ({f.arrivals} arrivals): it says "
            "nothing about other concurrency levels or request rates."
        )
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
    if kind_of(f.kind).measures_fidelity:
        return (
            f"Fidelity path measured: {path}; forced decode of the recorded continuations, top-{f.top_k} "
            f"logprobs requested; {bound}. Other paths (e.g. accepted draft tokens) were not measured."
        )
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
