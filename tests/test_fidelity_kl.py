"""The top-k KL lower bound and per-position statistics (pure numpy)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from frankenstein.fidelity.kl import (
    by_confidence,
    full_kl,
    percentiles,
    position_stats,
    row_problems,
    summarize,
    topk_kl,
)


def _dists(rows: int, vocab: int, noise: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    s = rng.standard_normal((rows, vocab)) * 3
    c = s + rng.standard_normal((rows, vocab)) * noise
    s -= np.log(np.exp(s).sum(1, keepdims=True))
    c -= np.log(np.exp(c).sum(1, keepdims=True))
    return s, c


def _topk(lp: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.argsort(-lp, axis=1)[:, :k]
    return ids.astype(np.int32), np.take_along_axis(lp, ids, 1).astype(np.float32)


def _brute(si: np.ndarray, sl: np.ndarray, ci: np.ndarray, cl: np.ndarray) -> np.ndarray:
    """KL over {each token both lists hold} + one tail bucket, written out the slow way."""
    out = []
    for r in range(len(si)):
        cpos = {int(t): j for j, t in enumerate(ci[r])}
        shared = [(j, cpos[int(t)]) for j, t in enumerate(si[r]) if int(t) in cpos]
        ps = np.array([math.exp(sl[r, a]) for a, _ in shared])
        pc = np.array([math.exp(cl[r, b]) for _, b in shared])
        kl = float(np.sum(ps * (np.log(ps) - np.log(pc)))) if shared else 0.0
        ts, tc = 1 - ps.sum(), 1 - pc.sum()
        if ts > 1e-12:
            kl += ts * math.log(ts / tc)
        out.append(kl)
    return np.array(out)


@pytest.mark.parametrize("k", [1, 4, 16, 64])
def test_matches_brute_force_and_bounds_full_kl(k: int) -> None:
    s, c = _dists(300, 200, 0.4)
    si, sl = _topk(s, k)
    ci, cl = _topk(c, k)
    kl, _, _ = topk_kl(si, sl, ci, cl)
    np.testing.assert_allclose(kl, _brute(si, sl, ci, cl), atol=2e-6)
    full = full_kl(s, c)
    assert np.all(kl <= full + 1e-6)
    assert kl.mean() > 0.2 * full.mean()


def test_full_lists_give_the_full_kl() -> None:
    s, c = _dists(50, 100, 0.3)
    si, sl = _topk(s, 100)
    ci, cl = _topk(c, 100)
    kl, ms, mc = topk_kl(si, sl, ci, cl)
    np.testing.assert_allclose(kl, full_kl(s, c), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(ms, 1.0, atol=1e-5)


def test_identical_lists_give_exactly_zero() -> None:
    s, _ = _dists(100, 500, 0.0)
    si, sl = _topk(s, 64)
    kl, _, _ = topk_kl(si, sl, si, sl)
    assert np.all(kl == 0.0)


def test_bound_grows_with_k() -> None:
    s, c = _dists(200, 300, 0.5)
    means = [topk_kl(*_topk(s, k), *_topk(c, k))[0].mean() for k in (2, 8, 32, 300)]
    assert means == sorted(means)
    assert means[-1] == pytest.approx(full_kl(s, c).mean(), rel=1e-4)


def test_sides_may_have_different_k_and_large_ids() -> None:
    s, c = _dists(40, 64, 0.3)
    si, sl = _topk(s, 64)
    ci, cl = _topk(c, 20)
    big = 5_000_000  # ids too large for 32-bit packed keys: the int64 layout takes over
    a, _, _ = topk_kl(si, sl, ci, cl)
    b, _, _ = topk_kl(si + big, sl, ci + big, cl)
    np.testing.assert_allclose(a, b)
    np.testing.assert_allclose(a, _brute(si, sl, ci, cl), atol=2e-6)


def test_disjoint_lists_put_everything_in_the_tail() -> None:
    sl = np.log(np.array([[0.5, 0.3]], np.float32))
    kl, ms, mc = topk_kl(np.array([[1, 2]]), sl, np.array([[3, 4]]), sl)
    assert ms[0] == 0 and mc[0] == 0 and kl[0] == pytest.approx(0.0, abs=1e-7)


def test_tail_term_for_known_values() -> None:
    # served: a .6 b .3 (tail .1); candidate: a .5 b .2 (tail .3)
    kl, _, _ = topk_kl(
        np.array([[0, 1]]),
        np.log(np.array([[0.6, 0.3]], np.float32)),
        np.array([[1, 0]]),
        np.log(np.array([[0.2, 0.5]], np.float32)),
    )
    expect = 0.6 * math.log(0.6 / 0.5) + 0.3 * math.log(0.3 / 0.2) + 0.1 * math.log(0.1 / 0.3)
    assert kl[0] == pytest.approx(expect, abs=1e-6)


def test_shapes_must_line_up() -> None:
    with pytest.raises(ValueError, match="shapes do not line up"):
        topk_kl(np.zeros((3, 2), int), np.zeros((3, 2)), np.zeros((2, 2), int), np.zeros((2, 2)))


def test_position_stats_top1_dp_and_duplicates() -> None:
    s_ids = np.array([[5, 6, 7], [5, 6, 7], [1, 1, 2]])
    c_ids = np.array([[5, 7, 6], [6, 5, 7], [1, 2, 3]])
    s_lp = np.log(np.array([[0.7, 0.2, 0.1], [0.5, 0.3, 0.1], [0.5, 0.3, 0.1]], np.float32))
    c_lp = np.log(np.array([[0.6, 0.3, 0.1], [0.6, 0.3, 0.05], [0.5, 0.3, 0.1]], np.float32))
    st = position_stats(s_ids, s_lp, c_ids, c_lp, token=np.array([6, 9, 2]))
    assert st.top1_agree.tolist() == [True, False, True]
    assert st.dp[0] == pytest.approx(0.1 - 0.2, abs=1e-6)
    assert math.isnan(st.dp[1])  # neither lists token 9
    assert st.duplicate.tolist() == [False, False, True]
    assert st.served_top1_p[0] == pytest.approx(0.7)


def test_row_problems_each_kind() -> None:
    lp = np.array([[-1, -2, -3], [-1, np.nan, -3], [-1, -np.inf, -3], [-1, -2, -np.inf], [0, 0, 0]], np.float32)
    n = np.array([3, 3, 3, 2, 0])
    err = np.array([False, False, False, False, True])
    p = row_problems(n, lp, 3, err)
    assert p["nonfinite"].tolist() == [False, True, True, False, False]  # padding (-inf beyond n) is not a problem
    assert p["short"].tolist() == [False, False, False, True, False]
    assert p["error"].tolist() == [False, False, False, False, True]


def test_summary_numbers() -> None:
    kl = np.array([0.0, 0.1, 0.2, 0.6, 1.0])
    st = position_stats(
        np.array([[1]] * 5), np.zeros((5, 1), np.float32), np.array([[1]] * 5), np.zeros((5, 1), np.float32)
    )
    st.kl = kl
    st.served_top1_p = np.array([0.3, 0.6, 0.9, 0.97, 1.0], np.float32)
    s = summarize(st, threshold=0.5)
    assert s["above_threshold"] == 2 and s["positions"] == 5
    assert s["kl"]["mean"] == pytest.approx(0.38) and s["kl"]["max"] == 1.0 and s["kl"]["median"] == 0.2
    buckets = {b["bucket"]: (b["positions"], b["mean_kl"]) for b in s["by_confidence"]}
    assert buckets["[0.99, 1]"] == (1, 1.0) and buckets["[0, 0.5)"] == (1, 0.0)
    assert percentiles(np.zeros(0)) == {}
    assert sum(b["positions"] for b in by_confidence(kl, st.served_top1_p)) == 5
