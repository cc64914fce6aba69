"""Prometheus text from an engine's ``/metrics``, and requests timed by scraping around them.

``parse_prometheus`` reads the text format into {sample name with labels: value}; ``counter`` sums a
metric over its label sets; ``metrics_delta`` is the per-name difference of two scrapes; ``merge``
takes timing fields from a first source, then a second. Pure functions; the engine that scrapes
around each request is :class:`frankenstein.engines.scraped.ScrapedRequests`.
"""

from __future__ import annotations

from frankenstein.measure.timings import StepTiming


def parse_prometheus(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            continue
    return out


def counter(m: dict[str, float], name: str) -> float | None:
    """Sum of a metric over its label sets; counters are looked up with and without ``_total``."""
    for n in (name, name + "_total") if not name.endswith(("_total", "_sum", "_count")) else (name,):
        vals = [v for k, v in m.items() if k.split("{", 1)[0] == n]
        if vals:
            return float(sum(vals))
    return None


def metrics_delta(before: dict[str, float], after: dict[str, float], prefix: str = "vllm:") -> dict[str, float]:
    """Per-name differences of an engine's counters and histogram sums/counts (labels summed)."""
    names = {k.split("{", 1)[0] for k in after if k.startswith(prefix) and not k.split("{", 1)[0].endswith("_created")}
    out = {}
    for n in names:
        a, b = counter(after, n), counter(before, n)
        if a is not None:
            out[n] = a - (b or 0.0)
    return out


def merge(first: StepTiming, second: StepTiming) -> StepTiming:
    """Field by field: ``first`` where it has a value, else ``second``."""
    a, b = first.as_dict(), second.as_dict()
    return StepTiming(**{k: a[k] if a[k] is not None else b[k] for k in a})  # type: ignore[arg-type]
