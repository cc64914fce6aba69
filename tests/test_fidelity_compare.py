"""Lining up two starts, counting bad engine output (never averaged in), pooling, the rule and its lines."""

from __future__ import annotations

import math

import numpy as np
import pytest

from frankenstein.design.model import FidelityRule
from frankenstein.fidelity.compare import compare, pool, summarize_pairs
from frankenstein.fidelity.forced import ForcedResult, from_npz, parse_llamacpp_probs, skipped_reason, to_npz
from frankenstein.fidelity.gate import apply_rule, format_summary

K = 4
PROBS = np.log(np.array([0.6, 0.25, 0.1, 0.05], np.float32))


def result(turns: dict[str, int], *, shift: float = 0.0, sha: dict[str, str] | None = None) -> ForcedResult:
    """A forced decode of ``turns`` (turn id → positions): top-4 ids 10..13 at every position."""
    tid, pos = [], []
    for i, n in enumerate(turns.values()):
        tid += [i] * n
        pos += list(range(n))
    p = len(tid)
    lp = np.tile(PROBS, (p, 1))
    lp[:, 0] += shift
    return ForcedResult(
        path="test",
        k_requested=K,
        k_used=K,
        turn_ids=list(turns),
        turn_sha=[(sha or {}).get(t, "s") for t in turns],
        turn=np.array(tid, np.int32),
        pos=np.array(pos, np.int32),
        token=np.full(p, 10, np.int32),
        ids=np.tile(np.arange(10, 14, dtype=np.int32), (p, 1)),
        logprobs=lp.astype(np.float32),
        n=np.full(p, K, np.int32),
        error=np.zeros(p, bool),
    )


def test_identical_starts_compare_to_zero_with_nothing_bad() -> None:
    c = compare(result({"t1": 5, "t2": 3}), result({"t1": 5, "t2": 3}))
    assert len(c.keys) == 8 and c.bad_total == 0
    assert np.all(c.stats.kl == 0)


def test_fewer_than_k_logprobs_is_counted_not_averaged() -> None:
    b = result({"t1": 6})
    b.n[2] = 3
    b.ids[2, 3], b.logprobs[2, 3] = -1, -np.inf
    c = compare(result({"t1": 6}), b)
    assert c.bad["short"] == 1 and len(c.keys) == 5 and ("t1", 2) not in c.keys


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_are_counted_not_averaged(bad: float) -> None:
    b = result({"t1": 6}, shift=-0.1)
    b.logprobs[4, 1] = bad
    c = compare(result({"t1": 6}), b)
    assert c.bad["nonfinite"] == 1 and len(c.keys) == 5
    assert np.all(np.isfinite(c.stats.kl)) and np.all(c.stats.kl > 0)


def test_positions_that_do_not_line_up_are_counted() -> None:
    a = result({"t1": 6, "t2": 4, "t3": 2})
    b = result({"t1": 5, "t2": 4, "t4": 3}, sha={"t2": "other ids"})
    c = compare(a, b)
    # t1: 1 extra position; t2: forced ids differ (4); t3 only in a (2); t4 only in b (3)
    assert c.bad["misaligned"] == 1 + 4 + 2 + 3
    assert sorted({t for t, _ in c.keys}) == ["t1"] and len(c.keys) == 5
    assert any("different token ids" in e for e in c.bad_examples)


def test_failed_requests_and_duplicate_ids_are_counted() -> None:
    b = result({"t1": 4})
    b.error[0], b.n[0] = True, 0
    b.ids[1, 1] = b.ids[1, 0]
    c = compare(result({"t1": 4}), b)
    assert c.bad["error"] == 1 and c.bad["duplicate"] == 1 and len(c.keys) == 2


def test_pool_averages_per_position_across_pairs() -> None:
    a = result({"t1": 3})
    near, far = compare(a, result({"t1": 3}, shift=-0.05)), compare(a, result({"t1": 3}, shift=-0.2))
    pooled = pool([near, far])
    assert len(pooled.kl) == 3
    np.testing.assert_allclose(pooled.kl, (near.stats.kl + far.stats.kl) / 2)
    s = summarize_pairs([near, far], threshold=0.5)
    assert s["positions"] == 3 and s["pair_positions"] == 6 and s["pairs"] == 2 and s["bad_total"] == 0


def test_rule_words() -> None:
    rule = FidelityRule(tolerance=0.01, threshold=0.5, max_positions_above=2)
    ok = summarize_pairs([compare(result({"t": 8}), result({"t": 8}, shift=-0.001))], 0.5)
    word, why = apply_rule(rule, ok)
    assert word == "passed" and why == "mean KL 0.000549 ≤ 0.01 nats; 0 position(s) above 0.5 nats (fewer than 2)"
    big = summarize_pairs([compare(result({"t": 8}), result({"t": 8}, shift=-2.0))], 0.5)
    assert big["above_threshold"] == 8
    assert apply_rule(rule, big)[0] == "failed"
    bad_b = result({"t": 8})
    bad_b.logprobs[0, 0] = np.nan
    bad = summarize_pairs([compare(result({"t": 8}), bad_b)], 0.5)
    assert apply_rule(rule, bad) == (
        "invalid",
        "bad engine output at candidate positions (1 nonfinite); not averaged in",
    )
    empty = summarize_pairs([compare(result({"t": 2}), result({"u": 2}))], 0.5)
    assert apply_rule(rule, empty) == ("invalid", "no positions could be compared")


def test_summary_lines_label_the_bound_and_show_the_noise_floor() -> None:
    a = result({"t": 4})
    summary = {
        "path": "llama.cpp decode path, one position per request",
        "k": {"requested": 64, "used": {"served": 4, "candidate": 4}},
        "noise_floor": summarize_pairs([compare(a, result({"t": 4}))], 0.5),
        "candidate": summarize_pairs([compare(a, result({"t": 4}, shift=-0.1))], 0.5),
    }
    lines = format_summary(summary)
    assert (
        lines[0]
        == "KL(served ‖ candidate) per position, nats — top-k union + tail bucket: a lower bound of the full-vocabulary KL"
    )
    assert lines[1] == "path measured: llama.cpp decode path, one position per request"
    assert lines[2] == "top-k: requested 64, used served 4, candidate 4"
    noise = next(line for line in lines if line.startswith("noise floor (A vs A′)"))
    assert noise.split()[5:7] == ["4", "0.000000"]
    assert "  candidate: none" in lines


def test_artifact_round_trip() -> None:
    r = result({"t1": 3, "t2": 2})
    r.skipped = ["turn x: recorded output has neither token ids nor text"]
    back = from_npz(to_npz(r))
    assert back.turn_ids == r.turn_ids and back.skipped == r.skipped and back.k_used == K
    np.testing.assert_array_equal(back.logprobs, r.logprobs)
    np.testing.assert_array_equal(back.ids, r.ids)


def test_parse_llamacpp_shapes() -> None:
    pre = {
        "completion_probabilities": [
            {"id": 1, "logprob": -0.1, "top_logprobs": [{"id": 1, "logprob": -0.1}, {"id": 2, "logprob": -2.5}]}
        ]
    }
    assert parse_llamacpp_probs(pre) == ([1, 2], [-0.1, -2.5])
    post = {
        "completion_probabilities": [
            {"id": 1, "prob": 0.9, "top_probs": [{"id": 1, "prob": 0.5}, {"id": 2, "prob": 0.0}]}
        ]
    }
    ids, lps = parse_llamacpp_probs(post)
    assert ids == [1, 2] and lps[0] == pytest.approx(math.log(0.5)) and lps[1] == -math.inf
    assert parse_llamacpp_probs({}) == ([], [])
    assert math.isnan(
        parse_llamacpp_probs({"completion_probabilities": [{"top_logprobs": [{"id": 3, "logprob": None}]}]})[1][0]
    )


def test_skipped_reasons_are_grouped() -> None:
    why = skipped_reason([f"turn s-{i}: recorded output has neither token ids nor text" for i in range(5)])
    assert why == "5 turn(s) (s-0, s-1, s-2, …): recorded output has neither token ids nor text"
