"""The metric registry: every metric a design can name, declared once.

A :class:`Metric` says what a number is and how frank treats it: its unit, which direction is better,
what it measures (``scope``: a decode step, a request, a task, or a whole start), what a start needs to
produce it (``needs``: the client's stream, speculative decoding, the server's own timings), whether it
can be zero or negative (``signed``: no ratio of it means anything), and how a start folds its turns into
it (``fold``):

- ``ratio_of_sums``: Σ numerator / Σ denominator over the start's measured turns (``sums``), never a mean
  of per-turn ratios; a per-turn mean is the ratio with the denominator ``turns`` (or ``gaps``);
- ``mean``: Σ per-turn value / turns of a value computed per turn (a user metric derived from turn fields);
- ``last``: the start reports the number itself (a command arm's last line, an agent start's passes).

Aggregation (:func:`frankenstein.measure.timings.aggregate`), registration checks, per-arm percentiles
(``percentiles``), the numbers ``frank replay`` prints, the JSON schemas and docs/designs.md all read
:data:`BUILTIN`. User metrics (``[metrics.NAME]`` in frank.toml, :mod:`frankenstein.measure.usermetrics`)
join it per campaign through :func:`known`.

    Metric              one metric's declaration
    BUILTIN             {name: Metric}, in the order frank prints them
    direction(name)     "lower" | "higher" of a built-in metric ("lower" for a name it does not know)
    names(**filters)    built-in names with a property, e.g. names(scope="step"), names(needs="stream")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Direction = Literal["lower", "higher"]
Scope = Literal["step", "request", "task", "start"]
Need = Literal["stream", "drafting", "server_timings", "command", "engine_metrics", "goodput_targets"]
Fold = Literal["ratio_of_sums", "mean", "last"]


@dataclass(frozen=True)
class Metric:
    """One metric, as frank reads, checks, folds, tests and labels it."""

    name: str
    unit: str
    direction: Direction
    scope: Scope
    meaning: str
    needs: tuple[Need, ...] = ()
    signed: bool = False  # can be zero or negative by its definition: a ratio of it means nothing
    fold: Fold = "ratio_of_sums"
    sums: tuple[str, str] | None = None  # (numerator, denominator): keys of timings.turn_sums
    percentiles: bool = False  # one value per turn (or per chunk gap): per-arm p50/p90/p99 are reported


_TIMED: tuple[Need, ...] = ("server_timings",)
_STREAMED: tuple[Need, ...] = ("stream",)

# fmt: off
BUILTIN: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("verify_step_ms", "ms", "lower", "step", "server decode ms per target forward pass",
               _TIMED, sums=("decode_ms", "target_steps")),
        Metric("decode_ms_per_token", "ms", "lower", "step", "server decode ms per token after the first",
               _TIMED, sums=("decode_ms", "decode_tokens")),
        Metric("tokens_per_step", "tokens", "higher", "step", "tokens after the first per target forward pass",
               _TIMED, sums=("decode_tokens", "target_steps")),
        Metric("acceptance_rate", "ratio", "higher", "step",
               "accepted / drafted draft tokens over the turns that drafted", ("drafting",),
               sums=("accepted", "drafted")),
        Metric("prompt_ms", "ms", "lower", "request", "server prompt (prefill) ms per turn",
               _TIMED, sums=("prompt_ms", "turns")),
        Metric("prefill_tokens_per_s", "tokens/s", "higher", "request",
               "uncached prompt tokens per second of server prompt time", _TIMED,
               sums=("new_prompt_tokens_x1000", "prompt_ms")),
        Metric("ttft_ms", "ms", "lower", "request", "client time to first token per turn",
               _STREAMED, sums=("ttft_ms", "turns"), percentiles=True),
        Metric("tpot_ms", "ms", "lower", "request", "client ms per output token after the first",
               _STREAMED, sums=("after_first_ms", "decode_tokens"), percentiles=True),
        Metric("itl_ms", "ms", "lower", "request", "mean gap between streamed content events",
               _STREAMED, sums=("gaps_ms", "gaps"), percentiles=True),
        Metric("e2e_ms", "ms", "lower", "request", "client request time per turn, first byte sent to last read",
               sums=("e2e_ms", "turns"), percentiles=True),
        Metric("pre_ms", "ms", "lower", "request", "client TTFT − server prompt ms per turn",
               ("stream", "server_timings"), sums=("pre_ms", "turns"), percentiles=True),
        Metric("post_ms", "ms", "lower", "request",
               "client e2e − TTFT − server decode ms per turn; with llama.cpp often slightly negative",
               ("stream", "server_timings"), signed=True, sums=("post_ms", "turns"), percentiles=True),
        Metric("output_tokens_per_s", "tokens/s", "higher", "start",
               "generated tokens per second of the start's measured wall span (throughput)", fold="last"),
        Metric("requests_per_s", "requests/s", "higher", "start",
               "answered requests per second of the start's measured wall span", fold="last"),
        Metric("goodput", "requests/s", "higher", "start",
               "requests meeting every replay.goodput target per second of the measured wall span",
               ("stream", "goodput_targets"), fold="last"),
        Metric("passes", "passes", "higher", "task", "graded task passes per agent start", fold="last"),
    )
}
# fmt: on
"""Every built-in metric, once."""


def direction(name: str) -> Direction:
    """The better direction of a built-in metric; "lower" for a name it does not know."""
    m = BUILTIN.get(name)
    return m.direction if m else "lower"


def names(
    *, scope: Scope | None = None, needs: Need | None = None, signed: bool | None = None, percentiles: bool = False
) -> tuple[str, ...]:
    """Built-in names in registry order with every property given (``needs``: among its needs)."""
    return tuple(
        m.name
        for m in BUILTIN.values()
        if (scope is None or m.scope == scope)
        and (needs is None or needs in m.needs)
        and (signed is None or m.signed == signed)
        and (not percentiles or m.percentiles)
    )
