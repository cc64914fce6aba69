"""Fidelity as an equivalence test against the engine's own noise (pure: numbers in, numbers out).

Two starts of the same engine already differ (GPU reductions, batching, threads): KL(served ‖ served′)
is the noise floor. What a part adds is the **excess**: the candidate-vs-served KL over the
served-vs-served KL, on the same workload turns. Every pair of starts is used:

* floor pairs: every two served starts (3 starts: 3 pairs);
* candidate pairs: every served start with every candidate start (3 × 3: 9 pairs).

Per turn t, ``floor_t`` and ``cand_t`` are the mean KL over the turn's positions, averaged over the
pairs; ``d_t = cand_t - floor_t``. The excess is the position-weighted mean of ``d_t``, and its
one-sided upper bound at level 1 - alpha is a **t bound over turns**:

    excess + t(1 - alpha, T - 1) * se,   se² = T/(T-1) * Σ w_t² (d_t - excess)² / (Σ w_t)²

(the cluster-robust standard error of a ratio mean, turns as clusters). Why turns: positions within a
turn are correlated (the standard error clustered by turn is about 2.3 times the per-position one), so
positions are not independent units; and with 3 starts per arm there are too few start pairs for an
exact permutation over starts to reach 0.05 (20 relabellings of 3 + 3 starts). Why a t bound rather
than a bootstrap over turns: it is deterministic (no seed), and at 10-50 turns the percentile
bootstrap is too narrow by about sqrt((T-1)/T) and more (benchmarks/fidelity_equivalence.py measures
both). The equivalence passes when the upper bound is below the registered margin.

    pair_turns(pair)               turn -> (sum of KL, positions) of one start pair
    excess_test(floor, cand, margin, alpha) -> Excess
    nats(x)                        '0.0173': a KL as printed, 3 significant digits
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from frankenstein.fidelity.compare import PairComparison

MIN_STARTS = 3  # per arm: 3 floor pairs and 9 candidate pairs
METHOD = "one-sided t bound over turns (turns as clusters)"


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
        """'excess 0.0019 nats, one-sided 95% upper bound 0.0031 < margin 0.005 (t bound over 24 turns)'."""
        head = f"excess {nats(self.excess)} nats, one-sided {(1 - self.alpha) * 100:g}% upper bound {nats(self.upper)}"
        if self.margin is None:
            return f"{head} (t bound over {self.turns} turns; no margin registered, not tested)"
        return f"{head} {'<' if self.passed else '≥'} margin {self.margin:g} (t bound over {self.turns} turns)"


def nats(x: float) -> str:
    """A KL as printed: 3 significant digits ('0.0173', '0.00512', '0')."""
    if x == 0:
        return "0"
    return f"{x:.3g}" if math.isfinite(x) else "-"


def span(r: tuple[float, float]) -> str:
    lo, hi = r
    return nats(lo) if lo == hi else f"{nats(lo)}–{nats(hi)}"


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


def _pair_range(pairs: Sequence[PairComparison]) -> tuple[float, float]:
    means = [float(np.mean(p.stats.kl)) for p in pairs if len(p.stats.kl)]
    return (min(means), max(means)) if means else (math.nan, math.nan)


def turn_bound(d: Sequence[float], w: Sequence[float], alpha: float) -> tuple[float, float]:
    """(weighted mean of d, its one-sided 1 - alpha t upper bound with turns as clusters); nan below 2 turns."""
    dv, wv = np.asarray(d, float), np.asarray(w, float)
    t = len(dv)
    est = float((wv * dv).sum() / wv.sum()) if t else math.nan
    if t < 2:
        return est, math.nan
    se = math.sqrt(t / (t - 1) * float((wv**2 * (dv - est) ** 2).sum())) / float(wv.sum())
    from scipy import stats as sps  # ~1.4 s to import: only where a fidelity verdict is computed

    return est, est + float(sps.t.ppf(1 - alpha, t - 1)) * se


def excess_test(
    floor: Sequence[PairComparison], cand: Sequence[PairComparison], margin: float | None, alpha: float
) -> Excess:
    """The excess of the candidate pairs' KL over the floor pairs', per turn, and its upper bound."""
    f, c = per_turn(floor), per_turn(cand)
    turns = [t for t in c if t in f]
    est, upper = turn_bound([c[t][0] - f[t][0] for t in turns], [c[t][1] for t in turns], alpha)
    return Excess(
        floor=_pair_range(floor),
        floor_pairs=len(floor),
        candidate=_pair_range(cand),
        candidate_pairs=len(cand),
        turns=len(turns),
        excess=est,
        upper=upper,
        alpha=alpha,
        margin=margin,
    )
