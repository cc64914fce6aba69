"""Line up two starts' forced decodes, count bad engine output, and pool pairs into one summary.

Positions line up when both starts forced the same turn with the same ids (``turn_sha``) and the
same position exists in both. Everything else is counted, by kind, and left out of the KL numbers —
never averaged in:

* ``misaligned``: a position only one start has, or a turn whose forced ids differ between the two;
* ``error``: the request for the position failed;
* ``short``: fewer than the k that engine used elsewhere came back;
* ``nonfinite``: a NaN or ±inf among the logprobs;
* ``duplicate``: one list held the same token id twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from frankenstein.fidelity import kl as klmod
from frankenstein.fidelity.forced import ForcedResult


@dataclass
class PairComparison:
    """KL(a ‖ b) on the good, aligned positions of two starts, and the counts of the rest."""

    label: str
    keys: list[tuple[str, int]]
    stats: klmod.PositionStats
    bad: dict[str, int]
    bad_examples: list[str] = field(default_factory=list)

    @property
    def bad_total(self) -> int:
        return sum(self.bad.values())


def _turn_slices(r: ForcedResult) -> dict[str, tuple[str, np.ndarray]]:
    out = {}
    for ti, (tid, sha) in enumerate(zip(r.turn_ids, r.turn_sha)):
        out[tid] = (sha, np.flatnonzero(r.turn == ti))
    return out


def align(a: ForcedResult, b: ForcedResult) -> tuple[np.ndarray, np.ndarray, int, list[str]]:
    """Row indices of positions present in both (same turn ids, same forced ids, same position)."""
    ta, tb = _turn_slices(a), _turn_slices(b)
    ia: list[np.ndarray] = []
    ib: list[np.ndarray] = []
    misaligned = 0
    why: list[str] = []
    for tid in [*ta, *(t for t in tb if t not in ta)]:
        if tid not in ta or tid not in tb:
            only = ta.get(tid) or tb.get(tid)
            misaligned += len(only[1]) if only else 0
            why.append(f"turn {tid}: forced in only one start")
            continue
        (sha_a, rows_a), (sha_b, rows_b) = ta[tid], tb[tid]
        if sha_a != sha_b:
            misaligned += max(len(rows_a), len(rows_b))
            why.append(f"turn {tid}: the two starts forced different token ids")
            continue
        pa, pb = a.pos[rows_a], b.pos[rows_b]
        common, xa, xb = np.intersect1d(pa, pb, return_indices=True)
        misaligned += len(pa) + len(pb) - 2 * len(common)
        if len(common) < max(len(pa), len(pb)):
            why.append(f"turn {tid}: {len(pa)} vs {len(pb)} positions")
        ia.append(rows_a[xa])
        ib.append(rows_b[xb])
    cat = lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.intp)  # noqa: E731
    return cat(ia), cat(ib), misaligned, why


def compare(a: ForcedResult, b: ForcedResult, label: str = "") -> PairComparison:
    """Per-position KL(a ‖ b) lower bound and the bad-output counts (see module docstring)."""
    ia, ib, misaligned, why = align(a, b)
    pa = klmod.row_problems(a.n[ia], a.logprobs[ia], a.k_used, a.error[ia])
    pb = klmod.row_problems(b.n[ib], b.logprobs[ib], b.k_used, b.error[ib])
    bad_rows = np.zeros(len(ia), bool)
    bad = {"misaligned": misaligned}
    for kind in ("error", "short", "nonfinite"):
        mask = pa[kind] | pb[kind]
        bad[kind] = int(mask.sum())
        bad_rows |= mask
    good_a, good_b = ia[~bad_rows], ib[~bad_rows]
    ka = max(1, int(a.n[good_a].max(initial=1)))
    kb = max(1, int(b.n[good_b].max(initial=1)))
    stats = klmod.position_stats(
        a.ids[good_a, :ka], a.logprobs[good_a, :ka], b.ids[good_b, :kb], b.logprobs[good_b, :kb], token=a.token[good_a]
    )
    bad["duplicate"] = int(stats.duplicate.sum())
    keep = ~stats.duplicate
    stats = _select(stats, keep)
    keys = [(a.turn_ids[t], int(p)) for t, p in zip(a.turn[good_a][keep], a.pos[good_a][keep])]
    examples = why[:5] + [e for e in (a.errors + b.errors)][:5]
    return PairComparison(label=label, keys=keys, stats=stats, bad=bad, bad_examples=examples)


def _select(s: klmod.PositionStats, mask: np.ndarray) -> klmod.PositionStats:
    return klmod.PositionStats(**{f: getattr(s, f)[mask] for f in klmod.PositionStats.__dataclass_fields__})


def pool(pairs: list[PairComparison]) -> klmod.PositionStats:
    """One value per workload position: each statistic averaged over the pairs that measured it
    (``top1_agree`` becomes the share of pairs that agreed).

    So "positions above the threshold" counts positions of the workload, whatever the number of
    blocks and starts (a deterministic engine gives every pair the same value at a position)."""
    keys = [k for p in pairs for k in p.keys]
    if not keys:
        empty = np.zeros(0)
        return klmod.PositionStats(
            empty,
            empty.astype(np.float32),
            empty.astype(np.float32),
            empty.astype(bool),
            empty.astype(np.float32),
            empty.astype(np.float32),
            empty.astype(bool),
        )
    index = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    inv = np.fromiter((index[k] for k in keys), np.intp, len(keys))
    n = len(index)
    counts = np.bincount(inv, minlength=n)
    cat = {f: np.concatenate([getattr(p.stats, f) for p in pairs]) for f in klmod.PositionStats.__dataclass_fields__}
    mean = lambda x: np.bincount(inv, weights=x.astype(np.float64), minlength=n) / counts  # noqa: E731
    dp = cat["dp"].astype(np.float64)
    known = np.isfinite(dp)
    dp_sum = np.bincount(inv[known], weights=dp[known], minlength=n)
    dp_n = np.bincount(inv[known], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        dp_mean = np.where(dp_n == counts, dp_sum / np.maximum(dp_n, 1), np.nan)
    return klmod.PositionStats(
        kl=mean(cat["kl"]),
        captured=mean(cat["captured"]).astype(np.float32),
        served_mass=mean(cat["served_mass"]).astype(np.float32),
        top1_agree=mean(cat["top1_agree"]),
        served_top1_p=mean(cat["served_top1_p"]).astype(np.float32),
        dp=dp_mean.astype(np.float32),
        duplicate=np.zeros(n, bool),
    )


def summarize_pairs(pairs: list[PairComparison], threshold: float) -> dict[str, Any]:
    """The JSON-able summary of a set of pairs: pooled KL statistics plus bad-output counts per kind."""
    s = klmod.summarize(pool(pairs), threshold)
    bad = {kind: sum(p.bad.get(kind, 0) for p in pairs) for kind in klmod.BAD_KINDS}
    s["pairs"] = len(pairs)
    s["pair_positions"] = sum(len(p.keys) for p in pairs)
    s["bad"] = bad
    s["bad_total"] = sum(bad.values())
    s["bad_examples"] = [e for p in pairs for e in p.bad_examples][:8]
    return s
