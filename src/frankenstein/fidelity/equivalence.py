"""Fidelity as an equivalence test against the engine's own noise (pure: numbers in, numbers out).

Two starts of the same engine already differ (GPU reductions, batching, threads): KL(served ‖ served′)
is the noise floor. What a part adds is the **excess**: the candidate-vs-served KL over the
served-vs-served KL, on the same workload turns. Every pair of starts is used:

* floor pairs: every two served starts (3 starts: 3 pairs);
* candidate pairs: every served start with every candidate start (3 × 3: 9 pairs).

Per turn t, ``floor_t`` and ``cand_t`` are the mean KL over the turn's positions, averaged over the
pairs; ``d_t = cand_t - floor_t``. The excess is the position-weighted mean of ``d_t``, and its
one-sided upper bound at level 1 - alpha is a **t bound over turns and starts**:

    excess + t(1 - alpha, df) * sqrt(v_turns + v_served + v_candidate)

``v_turns`` is the cluster-robust variance of the weighted mean with turns as clusters,
``T/(T-1) Σ w_t² (d_t - excess)² / (Σ w_t)²``: positions within a turn are correlated (clustering by
turn raises the standard error about 2.3 times), so positions are not independent units. ``v_served``
and ``v_candidate`` are delete-one-start jackknife variances: starts of one engine differ as a whole
(a simulation with turns alone passed 14 % of designs at the margin, benchmarks/fidelity_equivalence.py),
and the turns cannot see it. df is Welch-Satterthwaite's from T - 1 and the starts per arm - 1.
Neither an exact permutation over starts (3 + 3 starts have 20 relabellings: p >= 1/10) nor a
bootstrap over turns (as blind to whole-start differences as the t bound over turns, and random)
would do. The equivalence passes when the upper bound is below the registered margin.

    pair_turns(pair)               turn -> (sum of KL, positions) of one start pair
    excess_test(floor, cand, margin, alpha) -> Excess   (floor, cand: StartPair)
    nats(x)                        '0.0173': a KL as printed, 3 significant digits
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from frankenstein.fidelity.compare import PairComparison

MIN_STARTS = 3  # per arm: 3 floor pairs and 9 candidate pairs
UNEVEN_SKEW = 1.5  # sample skewness of the per-turn excess above which the bound is flagged (a heuristic)


@dataclass(frozen=True)
class Excess:
    """The noise floor and the candidate as ranges over start pairs, and the excess with its upper bound."""

    floor: tuple[float, float]  # mean KL of each served-vs-served pair: lowest, highest
    floor_pairs: int
    candidate: tuple[float, float]  # mean KL of each served-vs-candidate pair: lowest, highest
    candidate_pairs: int
    turns: int
    excess: float
    upper: float  # one-sided (1 - alpha) upper bound of the excess; nan when it cannot be computed
    alpha: float
    margin: float | None  # None: a design registered without one (ranges reported, no test)
    skew: float = math.nan  # sample skewness of the per-turn excess (nan below 3 turns)

    @property
    def passed(self) -> bool:
        return self.margin is not None and self.upper < self.margin

    def ranges(self) -> str:
        """'two starts of the served engine differed by 0.0173–0.0177 (3 pairs); the candidate against the
        served engine: 0.0184–0.0202 (9 pairs)'."""
        return (
            f"two starts of the served engine differed by {span(self.floor)} ({self.floor_pairs} pairs); "
            f"the candidate against the served engine: {span(self.candidate)} ({self.candidate_pairs} pairs)"
        )

    def bound(self) -> str:
        """'excess 0.0019 nats, one-sided 95% upper bound 0.0031 < margin 0.005 (t bound over 24 turns and the
        starts)'."""
        head = f"excess {nats(self.excess)} nats, one-sided {(1 - self.alpha) * 100:g}% upper bound {nats(self.upper)}"
        how = f"t bound over {self.turns} turns and the starts"
        if self.margin is None:
            return f"{head} ({how}; no margin registered, not tested)"
        return f"{head} {'<' if self.passed else '≥'} margin {self.margin:g} ({how})"

    def uneven(self) -> str | None:
        """A warning when the per-turn excess is very uneven: a mean-based bound over few turns then passes
        more often than alpha (benchmarks/fidelity_equivalence.py: 10.5 % at a per-turn log sd of 1.0)."""
        if not self.skew > UNEVEN_SKEW:
            return None
        return (
            f"the per-turn excess is very uneven (skewness {self.skew:.2g} over {self.turns} turns): the bound "
            "can pass more often than alpha with so few turns; a workload with more turns makes it honest"
        )


def nats(x: float) -> str:
    """A KL as printed: 3 significant digits ('0.0173', '0.00512', '0')."""
    if x == 0:
        return "0"
    return f"{x:.3g}" if math.isfinite(x) else "-"


def span(r: tuple[float, float]) -> str:
    lo, hi = r
    return nats(lo) if lo == hi else f"{nats(lo)}–{nats(hi)}"


@dataclass(frozen=True)
class StartPair:
    """A compared pair of starts, by name (``a`` served; ``b`` served for the floor, candidate otherwise)."""

    a: str
    b: str
    pair: PairComparison


def pair_turns(pair: PairComparison) -> dict[str, tuple[float, int]]:
    """Turn id -> (sum of KL over the turn's positions, positions) for one start pair."""
    out: dict[str, tuple[float, int]] = {}
    for (turn, _), kl in zip(pair.keys, pair.stats.kl):
        s, n = out.get(turn, (0.0, 0))
        out[turn] = (s + float(kl), n + 1)
    return out


def per_turn(pairs: Sequence[PairComparison]) -> dict[str, tuple[float, float]]:
    """Turn -> (mean KL over the turn's positions averaged over the pairs, mean positions)."""
    acc: dict[str, list[tuple[float, int]]] = {}
    for p in pairs:
        for turn, (s, n) in pair_turns(p).items():
            acc.setdefault(turn, []).append((s / n, n))
    return {t: (float(np.mean([m for m, _ in v])), float(np.mean([n for _, n in v]))) for t, v in acc.items()}


def _pair_range(pairs: Sequence[StartPair]) -> tuple[float, float]:
    means = [float(np.mean(p.pair.stats.kl)) for p in pairs if len(p.pair.stats.kl)]
    return (min(means), max(means)) if means else (math.nan, math.nan)


def turn_differences(floor: Sequence[StartPair], cand: Sequence[StartPair]) -> tuple[np.ndarray, np.ndarray]:
    """Per turn compared by both kinds of pair: (candidate minus floor mean KL, positions)."""
    f, c = per_turn([p.pair for p in floor]), per_turn([p.pair for p in cand])
    turns = [t for t in c if t in f]
    return np.array([c[t][0] - f[t][0] for t in turns]), np.array([c[t][1] for t in turns])


def weighted_mean(d: np.ndarray, w: np.ndarray) -> float:
    return float((w * d).sum() / w.sum()) if len(d) else math.nan


def turn_variance(d: np.ndarray, w: np.ndarray) -> float:
    """The squared standard error of the weighted mean with turns as clusters (nan below 2 turns)."""
    t = len(d)
    if t < 2:
        return math.nan
    est = weighted_mean(d, w)
    return t / (t - 1) * float((w**2 * (d - est) ** 2).sum()) / float(w.sum()) ** 2


def start_variances(floor: Sequence[StartPair], cand: Sequence[StartPair]) -> tuple[tuple[float, int], ...]:
    """The delete-one-start jackknife variance of the excess, per arm: ((variance, starts), ...).

    Leaving out a served start drops its floor pairs and its candidate pairs; leaving out a candidate
    start drops its candidate pairs. It sees what the turns cannot: starts that differ as a whole."""
    served = sorted({p.a for p in (*floor, *cand)} | {p.b for p in floor})
    cands = sorted({p.b for p in cand})
    out = []
    for names, drop in ((served, _drop_served), (cands, _drop_candidate)):
        thetas = [weighted_mean(*turn_differences(*drop(floor, cand, n))) for n in names]
        k = len(thetas)
        var = (k - 1) / k * float(np.sum((np.array(thetas) - np.mean(thetas)) ** 2)) if k > 1 else math.nan
        out.append((var, k))
    return tuple(out)


def _drop_served(floor: Sequence[StartPair], cand: Sequence[StartPair], name: str) -> tuple[list, list]:
    return [p for p in floor if name not in (p.a, p.b)], [p for p in cand if p.a != name]


def _drop_candidate(floor: Sequence[StartPair], cand: Sequence[StartPair], name: str) -> tuple[list, list]:
    return list(floor), [p for p in cand if p.b != name]


def upper_bound(est: float, parts: Sequence[tuple[float, float]], alpha: float) -> float:
    """est + t(1 - alpha, df) * sqrt(sum of variances), df by Welch-Satterthwaite from (variance, df) parts."""
    parts = [(v, df) for v, df in parts if df > 0]
    if not parts or any(not math.isfinite(v) for v, _ in parts):
        return math.nan
    total = sum(v for v, _ in parts)
    if total == 0:
        return est
    df = total**2 / sum(v**2 / df for v, df in parts if v > 0)
    from scipy import stats as sps  # ~1.4 s to import: only where a fidelity verdict is computed

    return est + float(sps.t.ppf(1 - alpha, df)) * math.sqrt(total)


def excess_test(floor: Sequence[StartPair], cand: Sequence[StartPair], margin: float | None, alpha: float) -> Excess:
    """The excess of the candidate pairs' KL over the floor pairs', per turn, and its upper bound: the
    variance over turns plus the jackknife variance over the starts of each arm (Welch-Satterthwaite df)."""
    d, w = turn_differences(floor, cand)
    est = weighted_mean(d, w)
    (v_s, n_s), (v_c, n_c) = start_variances(floor, cand)
    upper = upper_bound(est, [(turn_variance(d, w), len(d) - 1), (v_s, n_s - 1), (v_c, n_c - 1)], alpha)
    return Excess(
        floor=_pair_range(floor),
        floor_pairs=len(floor),
        candidate=_pair_range(cand),
        candidate_pairs=len(cand),
        turns=len(d),
        excess=est,
        upper=upper,
        alpha=alpha,
        margin=margin,
        skew=_skew(d),
    )


def _skew(d: np.ndarray) -> float:
    """The sample skewness (biased moment estimator) of the per-turn differences; nan below 3 or if constant."""
    if len(d) < 3:
        return math.nan
    c = d - d.mean()
    m2 = float((c**2).mean())
    return float((c**3).mean()) / m2**1.5 if m2 > 0 else math.nan
