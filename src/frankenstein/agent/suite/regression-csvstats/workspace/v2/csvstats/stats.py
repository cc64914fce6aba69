"""Summary statistics. Every public function takes a non-empty list of numbers in any order.

2.0: percentiles, built on one interpolating quantile helper shared with the median.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Number = int | float


def mean(values: Sequence[Number]) -> float:
    return sum(values) / len(values)


def _quantile(ordered: Sequence[Number], q: float) -> Number:
    """Linear interpolation between the closest ranks; ``ordered`` must be sorted ascending."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q}")
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = math.ceil(pos)
    if lo == hi:
        return ordered[lo]
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median(values: Sequence[Number]) -> Number:
    return _quantile(values, 0.5)


def percentile(values: Sequence[Number], p: float) -> Number:
    """The p-th percentile (0..100), interpolated like the median."""
    return _quantile(sorted(values), p / 100)


def stdev(values: Sequence[Number]) -> float:
    """Sample standard deviation (n - 1); 0.0 for a single value."""
    n = len(values)
    if n < 2:
        return 0.0
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))


def minimum(values: Sequence[Number]) -> Number:
    return min(values)


def maximum(values: Sequence[Number]) -> Number:
    return max(values)


def summary(values: Sequence[Number], percentiles: Sequence[float] = ()) -> dict[str, Number]:
    out: dict[str, Number] = {"count": len(values), "mean": mean(values), "median": median(values),
                              "stdev": stdev(values), "min": minimum(values), "max": maximum(values)}
    for p in percentiles:
        out[f"p{p:g}"] = percentile(values, p)
    return out
