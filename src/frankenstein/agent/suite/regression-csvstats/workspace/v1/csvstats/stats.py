"""Summary statistics. Every function takes a non-empty list of numbers in any order."""

import math


def mean(values):
    return sum(values) / len(values)


def median(values):
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    if n % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2


def stdev(values):
    """Sample standard deviation (n - 1); 0.0 for a single value."""
    if len(values) < 2:
        return 0.0
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def minimum(values):
    return min(values)


def maximum(values):
    return max(values)


def summary(values):
    return {"count": len(values), "mean": mean(values), "median": median(values), "stdev": stdev(values),
            "min": minimum(values), "max": maximum(values)}
