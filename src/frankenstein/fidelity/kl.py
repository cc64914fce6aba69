"""KL(served ‖ candidate) per position from two engines' top-k logprobs — pure numpy, no I/O.

Why a lower bound: an engine returns only its k most likely tokens. We partition the vocabulary
into one bin per token that *both* engines listed (both probabilities known) plus one tail bucket
holding everything else — the tokens only one engine listed and the tokens neither listed. The
bins are computed over the union of the two top-k sets; a union token whose probability one engine
did not return cannot get its own bin without guessing, so it joins the tail. KL over any partition
of the vocabulary is ≤ the full-vocabulary KL (data-processing / log-sum inequality), so every
number here is a **lower bound of the full-vocabulary KL**, exact when both lists cover the whole
vocabulary.

Each bin contributes ``p·ln(p/q) − p + q`` (the generalised KL term): equal to plain KL when both
sides sum to one, and never negative bin by bin, so float rounding of the tail masses cannot make a
position's KL negative. Identical inputs give exactly 0.

Speed: rows are matched by sorting, per row, packed keys ``id << b | column`` of both lists
together (SIMD sort of int32); a token both lists hold shows up as two neighbours with the same id,
served first. Work is done in cache-sized chunks on two threads (benchmarks/fidelity_kl.py:
1M positions × top-64).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

# Confidence buckets of the served engine's top-1 probability (lower edges; the last is closed at 1).
CONFIDENCE_EDGES: tuple[float, ...] = (0.0, 0.5, 0.8, 0.95, 0.99)
CHUNK = 1024
WORKERS = 2
TAIL_FLOOR = 1e-5


@dataclass
class PositionStats:
    """Per position (aligned rows of the two engines' answers)."""

    kl: np.ndarray  # float64, lower bound of KL(served ‖ candidate), nats
    captured: np.ndarray  # float32, served probability mass in the shared bins (what the KL resolves)
    served_mass: np.ndarray  # float32, served probability mass in its own top-k
    top1_agree: np.ndarray  # bool (pooled: share of pairs), both engines' most likely token is the same
    served_top1_p: np.ndarray  # float32, served probability of its most likely token
    dp: np.ndarray  # float32, p_candidate − p_served of the recorded token; NaN where one did not list it
    duplicate: np.ndarray  # bool, a list held the same token id twice (bad engine output)


def _key_layout(max_id: int, width: int) -> tuple[type, int]:
    bits = max(1, int(width - 1).bit_length())
    if max_id < (1 << (31 - bits)):
        return np.int32, bits
    return np.int64, bits


def _chunk_kl(
    s_ids: np.ndarray, s_lp: np.ndarray, c_ids: np.ndarray, c_lp: np.ndarray, dtype: type, bits: int
) -> tuple[np.ndarray, ...]:
    """Shared-bin KL terms and masses for one chunk: (kl_shared, mass_s, mass_c, served top-k mass, duplicate)."""
    n, ks = s_ids.shape
    kc = c_ids.shape[1]
    w = ks + kc
    keys = np.empty((n, w), dtype)
    cols = np.arange(w, dtype=dtype)
    np.left_shift(s_ids, bits, out=keys[:, :ks], dtype=dtype)
    np.left_shift(c_ids, bits, out=keys[:, ks:], dtype=dtype)
    keys |= cols
    keys.sort(axis=1)
    lin = keys & ((1 << bits) - 1)
    keys >>= bits
    same = keys[:, :-1] == keys[:, 1:]
    served = lin < ks
    match = same & served[:, :-1] & ~served[:, 1:]
    duplicate = (same & ~match).any(axis=1)
    lin += (np.arange(n, dtype=lin.dtype) * w)[:, None]
    both = np.concatenate([s_lp, c_lp], axis=1).astype(np.float32, copy=False)
    lp = both.ravel().take(lin)
    p = np.exp(lp)
    ps, pc = p[:, :-1], p[:, 1:]
    term = lp[:, :-1] - lp[:, 1:]
    term *= ps
    term -= ps
    term += pc
    mf = match.astype(np.float32)
    kl = np.einsum("ij,ij->i", term, mf, dtype=np.float64)
    ms = np.einsum("ij,ij->i", ps, mf, dtype=np.float64)
    mc = np.einsum("ij,ij->i", pc, mf, dtype=np.float64)
    topk_mass = np.einsum("ij,ij->i", p, served.astype(np.float32), dtype=np.float64)
    return kl, ms, mc, topk_mass, duplicate


def _tail_term(mass_s: np.ndarray, mass_c: np.ndarray) -> np.ndarray:
    """The tail bucket's generalised KL term from the masses left outside the shared bins.

    Engines compute probabilities in float32 and lists of them do not sum to exactly one (llama.cpp's
    full 1536-token list sums to 1 + 1e-6), so a tail below ``TAIL_FLOOR`` is rounding, not mass: both
    tails are raised to at least ``TAIL_FLOOR``. That can only lower the term (it is decreasing in the
    smaller mass below the larger), so the result stays a lower bound, and two tails that are both
    rounding contribute exactly 0."""
    ts = np.clip(1.0 - mass_s, TAIL_FLOOR, 1.0)
    tc = np.clip(1.0 - mass_c, TAIL_FLOOR, 1.0)
    return np.maximum(ts * (np.log(ts) - np.log(tc)) - ts + tc, 0.0)


def topk_kl(
    s_ids: np.ndarray, s_lp: np.ndarray, c_ids: np.ndarray, c_lp: np.ndarray, chunk: int = CHUNK
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lower bound of KL(served ‖ candidate) per row, and the served/candidate mass in shared bins.

    ``*_ids`` int (P, k) token ids (distinct within a row), ``*_lp`` (P, k) natural-log probabilities,
    all finite; the two sides may have different k. Rows with a repeated id are reported by
    :func:`position_stats` (``duplicate``), their KL is not meaningful.
    """
    p = s_ids.shape[0]
    if c_ids.shape[0] != p or s_lp.shape != s_ids.shape or c_lp.shape != c_ids.shape:
        raise ValueError(f"shapes do not line up: {s_ids.shape} {s_lp.shape} {c_ids.shape} {c_lp.shape}")
    kl, ms, mc, _, _ = _all_chunks(s_ids, s_lp, c_ids, c_lp, chunk)
    return kl + _tail_term(ms, mc), ms, mc


def _all_chunks(
    s_ids: np.ndarray, s_lp: np.ndarray, c_ids: np.ndarray, c_lp: np.ndarray, chunk: int
) -> tuple[np.ndarray, ...]:
    """:func:`_chunk_kl` over all rows, in cache-sized chunks, on ``WORKERS`` threads (numpy
    releases the GIL in its loops, so two cores do about twice the work)."""
    p = s_ids.shape[0]
    out = np.zeros((4, p))
    dup = np.zeros(p, bool)
    if p == 0:
        return out[0], out[1], out[2], out[3], dup
    if min(int(s_ids.min(initial=0)), int(c_ids.min(initial=0))) < 0:
        raise ValueError("token ids must be ≥ 0")
    max_id = int(max(s_ids.max(initial=0), c_ids.max(initial=0)))
    dtype, bits = _key_layout(max_id, s_ids.shape[1] + c_ids.shape[1])

    def work(lo: int, hi: int) -> None:
        for i in range(lo, hi, chunk):
            sl = slice(i, min(i + chunk, hi))
            *vals, d = _chunk_kl(s_ids[sl], s_lp[sl], c_ids[sl], c_lp[sl], dtype, bits)
            for j, v in enumerate(vals):
                out[j, sl] = v
            dup[sl] = d

    workers = max(1, min(WORKERS, p // (4 * chunk)))
    if workers == 1:
        work(0, p)
    else:
        edges = [round(p * w / workers) for w in range(workers + 1)]
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(work, edges[:-1], edges[1:]))
    return out[0], out[1], out[2], out[3], dup


def _token_p(ids: np.ndarray, lp: np.ndarray, token: np.ndarray) -> np.ndarray:
    """Probability each row gives ``token``; NaN where the row does not list it."""
    hit = ids == token[:, None]
    found = hit.any(axis=1)
    col = hit.argmax(axis=1)
    p = np.exp(np.take_along_axis(lp, col[:, None], axis=1)[:, 0].astype(np.float32))
    return np.where(found, p, np.float32(np.nan))


def position_stats(
    s_ids: np.ndarray,
    s_lp: np.ndarray,
    c_ids: np.ndarray,
    c_lp: np.ndarray,
    token: np.ndarray | None = None,
    chunk: int = CHUNK,
) -> PositionStats:
    """All per-position numbers for aligned, valid rows (see :class:`PositionStats`)."""
    kl, ms, mc, served_mass, dup = _all_chunks(s_ids, s_lp, c_ids, c_lp, chunk)
    kl = kl + _tail_term(ms, mc)
    s_top = np.argmax(s_lp, axis=1)[:, None]
    c_top = np.argmax(c_lp, axis=1)[:, None]
    agree = np.take_along_axis(s_ids, s_top, axis=1)[:, 0] == np.take_along_axis(c_ids, c_top, axis=1)[:, 0]
    served_top1 = np.exp(np.take_along_axis(s_lp, s_top, axis=1)[:, 0].astype(np.float32))
    if token is None:
        dp = np.full(len(kl), np.nan, np.float32)
    else:
        dp = _token_p(c_ids, c_lp, token) - _token_p(s_ids, s_lp, token)
    return PositionStats(
        kl=kl,
        captured=ms.astype(np.float32),
        served_mass=served_mass.astype(np.float32),
        top1_agree=agree,
        served_top1_p=served_top1,
        dp=dp,
        duplicate=dup,
    )


def full_kl(s_lp: np.ndarray, c_lp: np.ndarray) -> np.ndarray:
    """Exact KL(served ‖ candidate) per row from full-vocabulary log-probabilities (rows aligned by id)."""
    s = s_lp.astype(np.float64)
    c = c_lp.astype(np.float64)
    ps = np.exp(s)
    return np.sum(ps * (s - c), axis=1)


# ---------------------------------------------------------------- bad engine output

BAD_KINDS = ("error", "short", "nonfinite", "duplicate", "misaligned")


def row_problems(n_returned: np.ndarray, logprobs: np.ndarray, k_used: int, error: np.ndarray) -> dict[str, np.ndarray]:
    """Per row: the request failed, fewer than ``k_used`` entries came back, or a NaN/±inf among them.

    Padding beyond ``n_returned`` is ignored. Each mask is reported separately; a row can be in several.
    """
    cols = np.arange(logprobs.shape[1])[None, :]
    present = cols < n_returned[:, None]
    nonfinite = (~np.isfinite(logprobs) & present).any(axis=1)
    return {"error": error.astype(bool), "short": (n_returned < k_used) & ~error, "nonfinite": nonfinite & ~error}


# ---------------------------------------------------------------- summary


def percentiles(kl: np.ndarray) -> dict[str, float]:
    if kl.size == 0:
        return {}
    q = np.percentile(kl, [50, 90, 99, 99.9])
    return {
        "mean": float(kl.mean()),
        "median": float(q[0]),
        "p90": float(q[1]),
        "p99": float(q[2]),
        "p99_9": float(q[3]),
        "max": float(kl.max()),
    }


def by_confidence(kl: np.ndarray, served_top1_p: np.ndarray) -> list[dict[str, float | int | str]]:
    """Mean KL per bucket of the served engine's top-1 probability."""
    edges = [*CONFIDENCE_EDGES, 1.0]
    which = np.clip(
        np.searchsorted(np.asarray(CONFIDENCE_EDGES), served_top1_p, side="right") - 1, 0, len(CONFIDENCE_EDGES) - 1
    )
    counts = np.bincount(which, minlength=len(CONFIDENCE_EDGES))
    sums = np.bincount(which, weights=kl, minlength=len(CONFIDENCE_EDGES))
    out: list[dict[str, float | int | str]] = []
    for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        label = f"[{lo:g}, {hi:g}" + ("]" if i == len(CONFIDENCE_EDGES) - 1 else ")")
        out.append(
            {
                "bucket": label,
                "positions": int(counts[i]),
                "mean_kl": float(sums[i] / counts[i]) if counts[i] else float("nan"),
            }
        )
    return out


def summarize(stats: PositionStats, threshold: float) -> dict[str, object]:
    """The summary a fidelity verdict is reported with (JSON-able; NaN where undefined)."""
    kl = stats.kl
    dp = stats.dp[np.isfinite(stats.dp)]
    return {
        "positions": int(kl.size),
        "kl": percentiles(kl),
        "threshold": threshold,
        "above_threshold": int((kl > threshold).sum()),
        "top1_agreement": float(stats.top1_agree.mean()) if kl.size else float("nan"),
        "captured_mass_mean": float(stats.captured.mean()) if kl.size else float("nan"),
        "captured_mass_min": float(stats.captured.min()) if kl.size else float("nan"),
        "served_topk_mass_mean": float(stats.served_mass.mean()) if kl.size else float("nan"),
        "recorded_token_dp": {
            "known": int(dp.size),
            "unknown": int(kl.size - dp.size),
            "mean_abs": float(np.abs(dp).mean()) if dp.size else float("nan"),
            "max_abs": float(np.abs(dp).max()) if dp.size else float("nan"),
            "mean": float(dp.mean()) if dp.size else float("nan"),
        },
        "by_confidence": by_confidence(kl, stats.served_top1_p),
    }
