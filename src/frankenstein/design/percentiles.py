"""Per-arm latency percentiles of a design: p50/p90/p99 of TTFT, time per output token, inter-token
latency, end-to-end time and the time outside the server's own timings, from the stored per-turn rows of
its ok starts. Secondary numbers, the ones vLLM bench, AIPerf and GuideLLM print: reported, never tested
(a design tests only its registered primary metric).

Which turns: every measured turn (not warm-up, no error) of every ok start of the arm, pooled over blocks
and starts. Each value is the client's (the peers' definitions, so the numbers read alike):

- ``ttft_ms``  the client's time to first token (streamed turns only); one value per turn.
- ``tpot_ms``  the turn's mean time per output token after the first, (``e2e_ms`` − ``ttft_ms``) /
  (``generated_tokens`` − 1); one value per turn. vLLM bench's TPOT (``benchmarks/serve.py``
  ``calculate_metrics``: ``tpot = (latency - ttft) / (output_len - 1)``), AIPerf's
  ``inter_token_latency`` ((request_latency − TTFT) / (output_sequence_length − 1)). A turn with fewer than
  2 tokens or without a client TTFT gives none.
- ``itl_ms``   inter-token latency: the gaps between successive streamed content events, every gap of every
  measured turn pooled into one list, then its percentiles (so n counts gaps, not turns). vLLM bench's ITL
  (each request's ``itl`` list, ``itls += outputs[i].itl``, then ``np.percentile``), AIPerf's
  ``inter_chunk_latency``. Events that reach the client in one read give near-zero gaps, as they do in
  vLLM bench (:mod:`frankenstein.engines.stream`); a chunk carrying several tokens counts once.
- ``e2e_ms``   the client's request time, first byte sent to last byte read; one value per turn.
- ``pre_ms``, ``post_ms``  time outside the server's own timings (:mod:`frankenstein.measure.timings`):
  client TTFT − server prompt time, and client e2e − TTFT − server decode time; one value per turn.
  ``post_ms`` is often slightly negative with llama.cpp (its decode clock starts before the first token
  reaches the client); percentiles of negative values are as defined below, nothing is clipped.

Percentile definition: linear interpolation between closest ranks (numpy's default ``method="linear"``,
as vLLM bench uses): for sorted values x[0..n-1] and q in [0, 1], h = (n − 1)·q and
p = x[⌊h⌋] + (h − ⌊h⌋)·(x[⌈h⌉] − x[⌊h⌋]). It holds for any real values, negative ones included.

    percentile(values, q) -> float
    turn_values(turn) -> {metric: value}          the per-turn metrics of one turn
    turn_gaps(turn) -> [ms]                       one turn's stored chunk gaps (finite numbers only)
    arm_percentiles(store, starts) -> {arm: {metric: {"n", "p50", "p90", "p99"}}}   a design's starts, their turns
    rows_percentiles(rows) -> {metric: {"n", "p50", "p90", "p99"}}   one start's replay rows
    percentile_rows(table) -> rows for a table
    percentile_lines(table) -> the caption and the table as text lines (frank analyze, frank replay)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from frankenstein.design.table import render_table
from frankenstein.measure.metrics import names
from frankenstein.measure.timings import chunk_gaps
from frankenstein.store import StartRow, Store

LATENCY_METRICS = names(percentiles=True)  # the registry's per-turn metrics
QUANTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))

Percentiles = dict[str, dict[str, dict[str, float | int | None]]]  # arm -> metric -> {"n", "p50", "p90", "p99"}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0 <= q <= 1) by linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} is not in [0, 1]")
    return _sorted_quantile(sorted(values), q)


def _sorted_quantile(xs: Sequence[float], q: float) -> float:
    h = (len(xs) - 1) * q
    lo, hi = math.floor(h), math.ceil(h)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def turn_values(turn: Mapping[str, Any]) -> dict[str, float]:
    """The turn's one-per-turn values (ms): TTFT, TPOT, end-to-end, pre and post, those it has."""
    out: dict[str, float] = {}
    ttft, e2e, gen = _number(turn.get("ttft_ms")), _number(turn.get("e2e_ms")), _number(turn.get("generated_tokens"))
    if ttft is not None:
        out["ttft_ms"] = ttft
    if e2e is not None:
        out["e2e_ms"] = e2e
    if ttft is not None and e2e is not None and gen is not None and gen >= 2:
        out["tpot_ms"] = (e2e - ttft) / (gen - 1)
    for key in ("pre_ms", "post_ms"):
        v = _number(turn.get(key))
        if v is not None:
            out[key] = v
    return out


def turn_gaps(turn: Mapping[str, Any]) -> list[float]:
    """The turn's stored chunk gaps (ms, :func:`~frankenstein.measure.timings.chunk_gaps`); a turn without
    them (not streamed, or stored before they were recorded) has none."""
    return chunk_gaps(turn) or []


def summarize(values: Sequence[float]) -> dict[str, float | int | None]:
    """{"n", "p50", "p90", "p99"}; the percentiles are None without values."""
    out: dict[str, float | int | None] = {"n": len(values)}
    xs = sorted(values)  # once for every quantile
    for name, q in QUANTILES:
        out[name] = _sorted_quantile(xs, q) if xs else None
    return out


def _measured(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """Each metric's values over the measured turns of ``rows``: one per turn, and every gap for ``itl_ms``."""
    pooled: dict[str, list[float]] = {}
    for turn in rows:
        if turn.get("warmup") or turn.get("error"):
            continue
        for metric, v in turn_values(turn).items():
            pooled.setdefault(metric, []).append(v)
        gaps = turn_gaps(turn)
        if gaps:
            pooled.setdefault("itl_ms", []).extend(gaps)
    return pooled


def rows_percentiles(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float | int | None]]:
    """Per latency metric over the measured turns of one start's rows (``frank replay``)."""
    pooled = _measured(rows)
    return {m: summarize(pooled[m]) for m in LATENCY_METRICS if pooled.get(m)}


def arm_percentiles(store: Store, starts: list[StartRow]) -> Percentiles:
    """Per arm, per latency metric: the count (turns; gaps for ``itl_ms``) and p50/p90/p99 over the measured
    turns of its ok starts. Arms without per-turn rows (command arms, agent designs) are left out."""
    pooled: dict[str, dict[str, list[float]]] = {}
    for start in starts:
        if not start.ok:
            continue
        for metric, vs in _measured(store.turns_of(start.id)).items():
            pooled.setdefault(start.arm, {}).setdefault(metric, []).extend(vs)
    return {
        arm: {m: summarize(per[m]) for m in LATENCY_METRICS if per.get(m)}
        for arm, per in sorted(pooled.items(), key=lambda kv: (kv[0] != "served", kv[0]))
    }


def percentile_rows(table: Percentiles) -> list[list[str]]:
    """Rows of arm, metric, n, p50, p90, p99 (ms, four significant digits)."""
    rows = []
    for arm, per in table.items():
        for metric, s in per.items():
            rows.append([arm, metric, str(s["n"]), *(_ms(s[name]) for name, _ in QUANTILES)])
    return rows


def _ms(x: float | int | None) -> str:
    return "-" if x is None else f"{x:.4g}"


PERCENTILE_HEADER = ("arm", "metric", "n", "p50", "p90", "p99")
PERCENTILE_CAPTION = (
    "latency percentiles per arm over measured turns, ms (reported, not tested; linear interpolation; "
    "n: turns, pooled chunk gaps for itl_ms; post_ms can be negative)"
)


def percentile_lines(table: Percentiles) -> list[str]:
    """The caption and the table, as plain text lines (``frank analyze``, ``frank replay``)."""
    rows = render_table(PERCENTILE_HEADER, percentile_rows(table), "llrrrr")
    return [f"{PERCENTILE_CAPTION}:", *(f"  {line}" for line in rows)]
