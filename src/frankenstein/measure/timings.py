"""Engine-independent step metrics: how a start folds its measured turns into the metrics the registry
(:mod:`frankenstein.measure.metrics`) declares with ``sums`` (:func:`turn_sums`, :func:`aggregate`).

Per turn an adapter fills a :class:`StepTiming` from what the *server* reports. Per start the
metrics are ratios of sums over the measured turns (never means of per-turn ratios):

- ``verify_step_ms``      = Σ decode_ms / Σ target_steps
- ``decode_ms_per_token`` = Σ decode_ms / Σ (generated_tokens − 1)
- ``tokens_per_step``     = Σ (generated_tokens − 1) / Σ target_steps

Time outside the server's own timings, per turn (client clock minus server clock; see docs/workloads.md):

- ``pre_ms``  = client TTFT − server prompt_ms (templating, tokenization, queueing and transport
  before the first token); per start Σ pre_ms / turns
- ``post_ms`` = client e2e − client TTFT − server decode_ms (what the client waits beyond the
  server's decode after the first token: detokenization, SSE framing, transport); per start Σ / turns

Client-side decode pace, per start (the start-level forms of the per-arm percentiles, design/percentiles.py):

- ``tpot_ms`` = Σ (client e2e − client TTFT) / Σ (generated_tokens − 1): vLLM bench's TPOT (AIPerf's
  inter_token_latency) as a ratio of sums
- ``itl_ms``  = Σ chunk gaps / number of gaps: the mean gap between streamed content events (vLLM bench's
  ITL, AIPerf's inter_chunk_latency); none when some turn was not streamed

Start-level rates, over the start's measured wall span (first measured send to last measured completion;
:func:`start_rates`), as AIPerf and vLLM bench report them:

- ``output_tokens_per_s`` = Σ generated tokens of the measured turns that answered / span
- ``requests_per_s``      = measured turns that answered / span
- ``goodput``             = measured turns that answered and met every registered target / span: TTFT <= ttft_ms
  and the turn's mean chunk gap <= itl_ms (a turn with no gap, one content event, meets the ITL target)

pre_ms and post_ms need a stream (client TTFT) and an engine that reports prompt and decode time (llama.cpp
``timings``); a turn without them has none, and a start then has none either. Their sum is exact
(e2e − prompt_ms − decode_ms); where the server's decode clock starts decides the split, and with
llama.cpp ``post_ms`` is often slightly negative (docs/workloads.md).

The first generated token comes out of the prefill, so a turn of n tokens has n − 1 decode tokens;
without speculative decoding a target step yields one token (tokens_per_step = 1.0 exactly), with it a
verify step yields its accepted draft tokens + 1, so ``target_steps = n − 1 − accepted``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from frankenstein.measure.metrics import BUILTIN


@dataclass(frozen=True)
class StepTiming:
    """What the server reported for one request."""

    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    prompt_ms: float | None = None
    generated_tokens: int | None = None
    decode_ms: float | None = None
    target_steps: int | None = None
    drafted: int | None = None
    accepted: int | None = None

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def target_steps(generated: int, accepted: int | None) -> int:
    """Decode-time target forward passes for a turn of ``generated`` tokens."""
    return max(generated - 1 - (accepted or 0), 0)


def outside_ms(timing: StepTiming, ttft_ms: float | None, e2e_ms: float | None) -> dict[str, float | None]:
    """``pre_ms`` and ``post_ms`` of one turn (module docstring); None where a clock is missing."""
    pre = None if ttft_ms is None or timing.prompt_ms is None else ttft_ms - timing.prompt_ms
    post = (
        None if ttft_ms is None or e2e_ms is None or timing.decode_ms is None else e2e_ms - ttft_ms - timing.decode_ms
    )
    return {"pre_ms": pre, "post_ms": post}


def _sum(rows: Iterable[dict[str, float | int | None]], key: str) -> float | None:
    vals = [r.get(key) for r in rows]
    if not vals or any(v is None for v in vals):
        return None
    return float(sum(v for v in vals if v is not None))


def _div(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


GAPS_KEY = "chunk_gaps_ms"  # the per-turn row key holding a stream's chunk gaps (workload/replay.py)


def chunk_gaps(turn: Mapping[str, object]) -> list[float] | None:
    """A turn's stored chunk gaps (ms): finite numbers only; None when the turn has none recorded (not
    streamed, or stored before they were). One pass, no call per gap: a large design pools millions."""
    gaps = turn.get(GAPS_KEY)
    if not isinstance(gaps, list):
        return None
    return [float(g) for g in gaps if (type(g) is float or type(g) is int) and math.isfinite(g)]


def _gaps(turns: Sequence[Mapping[str, object]]) -> list[float] | None:
    """Every stored chunk gap of the turns, or None when some turn has none recorded."""
    out: list[float] = []
    for t in turns:
        g = chunk_gaps(t)
        if g is None:
            return None
        out += g
    return out


def speculation(turns: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Drafted and accepted tokens summed over the measured turns that drafted, and their ratio.

    llama-server omits the draft fields on a turn where nothing was drafted (n-gram speculation often
    drafts nothing); such a turn is left out of the sums instead of making the start's rate None. An
    arm that never drafted has ``drafting_turns = 0`` and no rate: it cannot produce one."""
    drafting = [t for t in turns if not t.get("warmup") and not t.get("error") and t.get("drafted") is not None]
    if not drafting:
        return {"drafted": None, "accepted": None, "acceptance_rate": None, "drafting_turns": 0.0}
    drafted = float(sum(t["drafted"] for t in drafting))
    accepted = float(sum(t.get("accepted") or 0 for t in drafting))
    return {
        "drafted": drafted,
        "accepted": accepted,
        "acceptance_rate": _div(accepted, drafted),
        "drafting_turns": float(len(drafting)),
    }


def turn_sums(turns: list[dict[str, float | int | None]]) -> dict[str, float | None]:
    """The sums over a start's measured turns that the registry's ``sums`` name (None where some turn lacks
    a value): every ``ratio_of_sums`` metric is one of these over another."""
    gen, n = _sum(turns, "generated_tokens"), float(len(turns))
    prompt_tokens, cached = _sum(turns, "prompt_tokens"), _sum(turns, "cached_tokens") or 0.0
    ttft, e2e = _sum(turns, "ttft_ms"), _sum(turns, "e2e_ms")
    gaps = _gaps(turns)
    spec = speculation(turns)
    return {
        **{k: _sum(turns, k) for k in ("decode_ms", "target_steps", "prompt_ms", "pre_ms", "post_ms")},
        "turns": n,
        "generated_tokens": gen,
        "decode_tokens": None if gen is None else gen - n,
        "new_prompt_tokens_x1000": None if prompt_tokens is None else (prompt_tokens - cached) * 1000.0,
        "ttft_ms": ttft,
        "e2e_ms": e2e,
        "after_first_ms": None if ttft is None or e2e is None else e2e - ttft,
        "gaps_ms": None if gaps is None else sum(gaps),
        "gaps": None if gaps is None else float(len(gaps)),
        "drafted": spec["drafted"],
        "accepted": spec["accepted"],
        "drafting_turns": spec["drafting_turns"],
    }


RAW_SUMS = ("decode_ms", "target_steps", "generated_tokens", "turns", "drafted", "accepted", "drafting_turns")
"""Sums a start also stores beside its metrics."""


def aggregate(turns: list[dict[str, float | int | None]]) -> dict[str, float | None]:
    """Start-level metrics over measured turns (rows with StepTiming keys + client times): each registered
    ``ratio_of_sums`` metric (:data:`~frankenstein.measure.metrics.BUILTIN`), then the raw sums."""
    sums = turn_sums(turns)
    folded = {m.name: _div(sums[m.sums[0]], sums[m.sums[1]]) for m in BUILTIN.values() if m.sums}
    return {**folded, **{k: sums[k] for k in RAW_SUMS}}


RATES = ("output_tokens_per_s", "requests_per_s", "goodput")
"""The start-level rates :func:`start_rates` gives (registry metrics with fold ``last``)."""


def start_rates(
    turns: Sequence[Mapping[str, object]], span_s: float | None, targets: tuple[float | None, float | None] | None
) -> dict[str, float | None]:
    """Throughput and goodput of a start's measured turns that answered (module docstring); ``targets``:
    (ttft_ms, itl_ms), either None, or no goodput at all. None where the span is unknown or zero."""
    if span_s is None or span_s <= 0:
        return dict.fromkeys(RATES)
    tokens = [n for t in turns if isinstance(n := t.get("generated_tokens"), int | float)]
    out = float(sum(tokens)) if len(tokens) == len(turns) else None
    good = None if targets is None else sum(1 for t in turns if meets(t, *targets))
    return {
        "output_tokens_per_s": None if out is None else out / span_s,
        "requests_per_s": len(turns) / span_s,
        "goodput": None if good is None else good / span_s,
    }


def meets(turn: Mapping[str, object], ttft_ms: float | None, itl_ms: float | None) -> bool:
    """Whether one turn met every goodput target given (a missing TTFT or stream misses a target it has)."""
    if ttft_ms is not None:
        ttft = turn.get("ttft_ms")
        if not isinstance(ttft, int | float) or ttft > ttft_ms:
            return False
    if itl_ms is not None:
        gaps = chunk_gaps(turn)
        if gaps is None or (gaps and sum(gaps) / len(gaps) > itl_ms):
            return False
    return True
