"""``frank fidelity check``: an unregistered quick look — served (A), served + part (B), served again (A′).

No verdict comes from it (only a registered design gives one); it prints the candidate's summary
beside the noise floor, and, given a tolerance, what the fidelity rule would say. The forced
sequences are built once, by the first served start, and forced on all three starts; a workload
recorded without outputs gets its continuations generated first, at temperature 0, by an engine
life of the served recipe of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from frankenstein.campaign import open_campaign
from frankenstein.design.kinds.fidelity import run_forced
from frankenstein.design.model import FidelityRule
from frankenstein.engines import start_engine
from frankenstein.errors import FidelityError
from frankenstein.fidelity.compare import compare, summarize_pairs
from frankenstein.fidelity.forced import cut, generate_continuations, with_outputs, workload_problems
from frankenstein.fidelity.gate import apply_rule, format_summary
from frankenstein.served import served_parts
from frankenstein.shipped import expand
from frankenstein.workload.trace import load_trace, write_trace


def _recipes(campaign: Any, recipe: str, part: str | None) -> tuple[Any, Any]:
    if recipe == "served":
        base, parts = campaign.config.served, served_parts(campaign)
    else:
        base, parts = recipe, []
    served = campaign.recipe(base, parts) if parts else campaign.recipe(base)
    return served, (campaign.recipe(base, [*parts, part]) if part else None)


def _generated(
    served: Any, workload: Any, log_dir: Path, max_positions: int | None, echo: Callable[[str], None]
) -> list[Any] | None:
    """Continuations generated in an engine life of their own, when no turn records an output.

    Its own life, so that A and A′ send the same request sequence: a start that generated first
    has a different cache history, and llama.cpp's numbers depend on it slightly (batched prefill
    vs one-token decode)."""
    if len(workload_problems(workload.turns)) < len(workload.turns):
        return None
    with start_engine(served, log_dir) as engine:
        forced = cut(generate_continuations(engine, workload.turns), max_positions)
    echo(
        f"no recorded outputs: generated {sum(len(f.continuation) for f in forced)} tokens with {served.name} at temperature 0"
    )
    return forced


def check_fidelity(
    campaign_dir: str | Path,
    recipe: str,
    part: str,
    workload_path: str | Path,
    *,
    top_k: int = 64,
    max_positions: int | None = None,
    threshold: float = 0.5,
    tolerance: float | None = None,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run A, B, A′ and return the summary (also printed through ``echo``)."""
    wl_path = Path(expand(str(workload_path)))
    workload = load_trace(wl_path)
    with open_campaign(campaign_dir) as campaign:
        served, candidate = _recipes(campaign, recipe, part)
        forced = _generated(served, workload, campaign.logs, max_positions, echo)
        results, versions = {}, {}
        for label, r in (("A", served), ("B", candidate), ("A′", served)):
            out, res, forced = run_forced(r, workload, campaign.logs, top_k, max_positions, forced=forced)
            if res is None:
                raise FidelityError(f"start {label} ({r.name}) {out.status}: {out.reason}")
            results[label], versions[label] = res, out.engine_version
            echo(f"start {label} ({r.name}): {res.positions} positions in {res.seconds:.1f} s, k used {res.k_used}")
    summary: dict[str, Any] = {
        "path": results["A"].path,
        "k": {"requested": top_k, "used": {"served": results["A"].k_used, "candidate": results["B"].k_used}},
        "noise_floor": summarize_pairs([compare(results["A"], results["A′"], "A vs A′")], threshold),
        "candidate": summarize_pairs([compare(results["A"], results["B"], "A vs B")], threshold),
        "skipped": results["A"].skipped,
        "sources": results["A"].sources,
        "engine_version": versions["A"],
    }
    echo(
        f"fidelity check (unregistered): {served.name} vs {candidate.name} on {wl_path.name}; "
        f"forced continuations: {', '.join(f'{n} turn(s) {s}' for s, n in summary['sources'].items())}"
    )
    for line in format_summary(summary):
        echo(line)
    if tolerance is not None:
        word, why = apply_rule(
            FidelityRule(tolerance=tolerance, threshold=threshold), summary["candidate"], summary["noise_floor"]
        )
        summary["would_be"] = word
        echo(
            f"the fidelity rule with tolerance {tolerance:g} would say: {word} ({why}); register a design for a verdict"
        )
    return summary


def fill_outputs(
    campaign_dir: str | Path,
    recipe: str,
    workload_path: str | Path,
    out_path: str | Path,
    *,
    tokens: int = 16,
    echo: Callable[[str], None] = print,
) -> str:
    """Write a copy of a workload whose recorded outputs are greedy continuations of ``recipe``.

    For workloads recorded without output (token ids and text), so that a fidelity design can force
    the same continuation on every start: generated once, stored, pinned by the new file's hash.
    The recorded length is kept where known, else ``tokens``. Returns the new workload hash."""
    workload = load_trace(Path(expand(str(workload_path))))
    out_path = Path(out_path)
    if out_path.resolve() == Path(expand(str(workload_path))).resolve():
        raise FidelityError(f"{out_path}: write the filled workload to a new file (the old hash may be pinned)")
    with open_campaign(campaign_dir) as campaign:
        served, _ = _recipes(campaign, recipe, None)
        with start_engine(served, campaign.logs) as engine:
            texts: list[str] = []
            forced = generate_continuations(engine, workload.turns, tokens, texts)
    h = write_trace(out_path, with_outputs(workload.turns, forced, texts))
    echo(
        f"wrote {out_path}: {len(forced)} turns, {sum(len(f.continuation) for f in forced)} tokens "
        f"generated by {served.name} at temperature 0 (hash {h[:16]})"
    )
    return h
