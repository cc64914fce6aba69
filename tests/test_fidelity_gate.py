"""The fidelity gate decides on a lower bound only where the bound can see: identical top-k lists with
the tails rearranged (full KL of nats, top-k + tail bound exactly 0) are invalid on captured mass, not
passed; a noise floor above the tolerance makes the verdict invalid; the reason names the part that
decided. Built in the shape engines return (fidelity.kl / compare consume: (P, k) ids and logprobs,
sorted, from full distributions over a 1536-token vocabulary like the shipped tiny model's)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from frankenstein.design.model import FidelityRule
from frankenstein.engines.forcing import ForcedResult
from frankenstein.fidelity import kl as klmod
from frankenstein.fidelity.compare import compare, summarize_pairs
from frankenstein.fidelity.gate import apply_rule, decided_by, rule_line

VOCAB, K, POSITIONS = 1536, 64, 24


def top_k(full_lp: np.ndarray) -> ForcedResult:
    """What an engine returns for full log-probabilities: its k most likely tokens, sorted."""
    order = np.argsort(-full_lp, axis=1, kind="stable")[:, :K]
    lp = np.take_along_axis(full_lp, order, axis=1)
    p = full_lp.shape[0]
    return ForcedResult(
        path="test",
        k_requested=K,
        k_used=K,
        turn_ids=["t"],
        turn_sha=["s"],
        turn=np.zeros(p, np.int32),
        pos=np.arange(p, dtype=np.int32),
        token=order[:, 0].astype(np.int32),
        ids=order.astype(np.int32),
        logprobs=lp.astype(np.float32),
        n=np.full(p, K, np.int32),
        error=np.zeros(p, bool),
    )


def rearranged_tails(head_mass: float) -> tuple[np.ndarray, np.ndarray]:
    """Served and candidate full distributions: the same top-64 (ids and probabilities), and a tail
    of ``1 - head_mass`` that the candidate moves onto the tokens the served recipe gives almost nothing."""
    rng = np.random.default_rng(7)
    s = np.zeros((POSITIONS, VOCAB))
    c = np.zeros((POSITIONS, VOCAB))
    tail_ids = np.arange(K, VOCAB)
    half = len(tail_ids) // 2
    for i in range(POSITIONS):
        head = rng.dirichlet(np.ones(K)) * 0.02 + (head_mass - 0.02) / K  # every head token above any tail token
        s[i, :K] = c[i, :K] = head
        tail = 1.0 - head_mass
        hi, lo = tail * (1 - 1e-5) / half, tail * 1e-5 / (len(tail_ids) - half)
        s[i, tail_ids[:half]], s[i, tail_ids[half:]] = hi, lo
        c[i, tail_ids[:half]], c[i, tail_ids[half:]] = lo, hi
    return np.log(s), np.log(c)


def summaries(served_lp: np.ndarray, cand_lp: np.ndarray) -> tuple[dict, dict]:
    a, b, a2 = top_k(served_lp), top_k(cand_lp), top_k(served_lp)
    return (summarize_pairs([compare(a, b, "A vs B")], 0.5), summarize_pairs([compare(a, a2, "A vs A′")], 0.5))


def test_identical_top_k_with_rearranged_tails_is_invalid_not_passed() -> None:
    served, cand = rearranged_tails(head_mass=0.6)
    full = klmod.full_kl(served, cand)
    assert full.mean() > 2.5  # nats of real divergence, all of it in the tail
    candidate, noise = summaries(served, cand)
    assert candidate["kl"]["mean"] == 0.0 and candidate["captured_mass_mean"] == pytest.approx(0.6, abs=1e-3)
    rule = FidelityRule(tolerance=0.02, min_captured_mass=0.5)
    word, why = apply_rule(rule, candidate, noise)
    assert word == "invalid"
    assert why.startswith(
        "captured mass: the shared top-k bins hold 0.6000 of the served mass on average, below the registered 0.99"
    )
    assert decided_by(word, why) == "captured mass"
    # the per-position floor decides when a position is below it
    word, why = apply_rule(FidelityRule(tolerance=0.02, min_captured_mass=0.7), candidate, noise)
    assert word == "invalid" and why.startswith("captured mass: a position below the registered 0.7")
    # without the captured-mass parts (both floors 0) the bound alone would pass: the hole the floors close
    assert (
        apply_rule(FidelityRule(tolerance=0.02, min_captured_mass=0, min_captured_mass_mean=0), candidate, noise)[0]
        == "passed"
    )


def test_a_well_covered_identical_pair_passes_and_says_what_decided() -> None:
    served, _ = rearranged_tails(head_mass=0.99)
    candidate, noise = summaries(served, served)
    word, why = apply_rule(FidelityRule(tolerance=0.02), candidate, noise)
    assert (word, why) == ("passed", "mean KL 0.000000 ≤ 0.02 nats; 0 position(s) above 0.5 nats (fewer than 1)")
    assert decided_by(word, why) == "mean KL and positions above threshold (both held)"


def test_a_noise_floor_above_the_tolerance_makes_the_verdict_invalid() -> None:
    served, _ = rearranged_tails(head_mass=0.99)
    shifted = served.copy()
    shifted[:, :K] += np.linspace(-0.6, 0.6, K)  # the served recipe against itself moves inside the top-k
    shifted -= np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    a, a2 = top_k(served), top_k(shifted)
    noise = summarize_pairs([compare(a, a2, "A vs A′")], 0.5)
    candidate = summarize_pairs([compare(a, top_k(served), "A vs B")], 0.5)
    assert noise["kl"]["mean"] > 0.02
    word, why = apply_rule(FidelityRule(tolerance=0.02), candidate, noise)
    assert word == "invalid" and why.startswith("noise floor: the served recipe against itself already has mean KL")
    assert decided_by(word, why) == "noise floor"
    failed = apply_rule(FidelityRule(tolerance=0.02), noise, None)
    assert failed[0] == "failed" and decided_by(*failed) == "mean KL"


def test_the_rule_fields_are_registered_and_validated() -> None:
    rule = FidelityRule(tolerance=0.02)
    assert (rule.min_captured_mass, rule.min_captured_mass_mean, rule.margin, rule.alpha) == (0.9, 0.99, None, 0.05)
    line = rule_line(rule)
    assert "≥ 0.9 of the served mass at every position and ≥ 0.99 on average" in line
    assert "tail masses below 1e-05 count as rounding" in line and "noise floor's mean KL is ≤ the tolerance" in line
    with pytest.raises(ValidationError):
        FidelityRule(tolerance=0.02, min_captured_mass=1.5)
