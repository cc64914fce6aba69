"""Fidelity as an equivalence test against the engine's own noise (issue 29, defects 1 and 2).

Synthetic starts in the shape engines return (fidelity.compare consumes them: per-position top-64 ids and
logprobs, several turns): every served start adds its own run-to-run noise to the same logits, and a
candidate adds a systematic change on top. The old rule compared the candidate's mean KL and the floor
with the tolerance separately, so a candidate adding 43 % over the floor passed; the excess test bounds
what the candidate adds over the floor, per turn, and prints both as ranges over start pairs."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from frankenstein.design.model import FidelityRule
from frankenstein.design.registry import register
from frankenstein.errors import DesignError
from frankenstein.engines.forcing import ForcedResult
from frankenstein.fidelity import kl as klmod
from frankenstein.fidelity.compare import compare, summarize_pairs
from frankenstein.fidelity.equivalence import StartPair, excess_test, start_variances, turn_variance, upper_bound
from frankenstein.fidelity.gate import apply_rule, decided_by, rule_line
from helpers_campaign import make_campaign, make_workload

VOCAB, K, TURNS, PER_TURN = 512, 64, 12, 16


def top_k(full_lp: np.ndarray, turns: int = TURNS) -> ForcedResult:
    """What an engine returns for full log-probabilities over ``turns`` equal turns: its k most likely
    tokens, sorted."""
    order = np.argsort(-full_lp, axis=1, kind="stable")[:, :K]
    lp = np.take_along_axis(full_lp, order, axis=1)
    p = full_lp.shape[0]
    return ForcedResult(
        path="test",
        k_requested=K,
        k_used=K,
        turn_ids=[f"t{i}" for i in range(turns)],
        turn_sha=[f"s{i}" for i in range(turns)],
        turn=np.repeat(np.arange(turns, dtype=np.int32), p // turns),
        pos=np.tile(np.arange(p // turns, dtype=np.int32), turns),
        token=order[:, 0].astype(np.int32),
        ids=order.astype(np.int32),
        logprobs=lp.astype(np.float32),
        n=np.full(p, K, np.int32),
        error=np.zeros(p, bool),
    )


def normalise(logits: np.ndarray) -> np.ndarray:
    top = logits.max(axis=1, keepdims=True)
    return logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))


def engines(
    shift: float, noise: float = 0.12, starts: int = 3, seed: int = 5, cand_scales: tuple[float, ...] | None = None
) -> tuple[list, list]:
    """(served starts, candidate starts) as top-k results: shared logits, per-start noise (times
    ``cand_scales`` for the candidate's starts), the candidate's shift."""
    rng = np.random.default_rng(seed)
    p = TURNS * PER_TURN
    base = rng.normal(0, 5.0, (p, VOCAB))
    sens = np.repeat(rng.lognormal(0, 0.5, TURNS), PER_TURN)[:, None]  # turns differ in how much the part moves
    change = rng.normal(0, 1, (p, VOCAB)) * sens
    served = [top_k(normalise(base + noise * rng.normal(0, 1, (p, VOCAB)))) for _ in range(starts)]
    scales = cand_scales or (1.0,) * starts
    cand = [top_k(normalise(base + shift * change + noise * k * rng.normal(0, 1, (p, VOCAB)))) for k in scales]
    return served, cand


def pairs(served: list, cand: list) -> tuple[list[StartPair], list[StartPair]]:
    """Every two served starts, every served start with every candidate start (as the fidelity kind pairs them)."""
    floor = [
        StartPair(f"s{i}", f"s{j}", compare(a, b)) for i, a in enumerate(served) for j, b in enumerate(served) if i < j
    ]
    return floor, [StartPair(f"s{i}", f"c{j}", compare(a, b)) for i, a in enumerate(served) for j, b in enumerate(cand)]


def verdict(rule: FidelityRule, served: list, cand: list) -> tuple[str, str]:
    floor, across = pairs(served, cand)
    excess = excess_test(floor, across, rule.margin, rule.alpha)
    candidate = summarize_pairs([compare(a, b, "A vs B") for a, b in zip(served, cand)], rule.threshold)
    noise = summarize_pairs([compare(a, b, "A vs A′") for a, b in zip(served, served[1:])], rule.threshold)
    return apply_rule(rule, candidate, noise, excess, {"served": len(served), "candidate": len(cand)})


def test_a_candidate_well_over_the_floor_passed_the_old_rule_and_fails_the_excess_test() -> None:
    """The audit's case: the floor well under the tolerance, the candidate adding ~45 % over it, both under
    the tolerance: the old rule passed; with a margin it fails on the excess, and says so."""
    served, cand = engines(shift=0.06)
    floor, across = pairs(served, cand)
    f = np.mean([np.mean(x.pair.stats.kl) for x in floor])
    c = np.mean([np.mean(x.pair.stats.kl) for x in across])
    assert 1.3 < c / f < 1.6 and c < 0.02, (f, c)
    old = FidelityRule(tolerance=0.02, max_positions_above=10)
    assert verdict(old, served, cand)[0] == "passed"
    word, why = verdict(FidelityRule(tolerance=0.02, max_positions_above=10, margin=0.002), served, cand)
    assert word == "failed" and " ≥ margin 0.002 (t bound over 12 turns and the starts)" in why, why
    assert decided_by(word, why) == "the excess over the noise floor"


def test_a_candidate_that_adds_nothing_passes_and_prints_both_ranges() -> None:
    served, cand = engines(shift=0.0)
    word, why = verdict(FidelityRule(tolerance=0.02, max_positions_above=10, margin=0.005), served, cand)
    assert word == "passed", why
    m = re.match(
        r"two starts of the served engine differed by (\S+)–(\S+) \(3 pairs\); the candidate against the served "
        r"engine: (\S+)–(\S+) \(9 pairs\); excess (\S+) nats, one-sided 95% upper bound (\S+) < margin 0.005 "
        r"\(t bound over 12 turns and the starts\); mean KL ",
        why,
    )
    assert m, why
    lo, hi, clo, chi, _, upper = (float(x) for x in m.groups())
    assert 0 < lo <= hi and 0 < clo <= chi and upper < 0.005
    assert decided_by(word, why) == "the excess bound, mean KL and positions above threshold (all held)"


def test_too_few_starts_per_arm_is_invalid_not_passed() -> None:
    served, cand = engines(shift=0.0, starts=2)
    word, why = verdict(FidelityRule(tolerance=0.02, max_positions_above=10, margin=0.005), served, cand)
    assert (
        word == "invalid" and "starts: the excess test needs at least 3 ok starts per arm; served 2, candidate 2" in why
    )
    assert decided_by(word, why) == "starts"
    # without a margin the rule and its reason are the ones registered before (the analysis prints the ranges)
    word, why = verdict(FidelityRule(tolerance=0.02, max_positions_above=10), served, cand)
    assert word == "passed" and why.startswith("mean KL "), why
    floor, across = pairs(served, cand)
    assert (
        excess_test(floor, across, None, 0.05)
        .bound()
        .endswith("(t bound over 12 turns and the starts; no margin registered, not tested)")
    )


def test_the_bound_adds_the_turns_and_the_starts_with_welch_satterthwaite_df() -> None:
    from scipy import stats as sps

    d, w = np.array([0.001, 0.003, 0.002, 0.006]), np.array([10.0, 10, 20, 10])
    mean = (0.01 + 0.03 + 0.04 + 0.06) / 50
    v_t = 4 / 3 * sum((wi * (di - mean)) ** 2 for di, wi in zip(d, w)) / 50**2
    assert turn_variance(d, w) == pytest.approx(v_t)
    assert upper_bound(mean, [(v_t, 3)], 0.05) == pytest.approx(mean + sps.t.ppf(0.95, 3) * np.sqrt(v_t))
    v_s = v_t / 2
    df = (v_t + v_s) ** 2 / (v_t**2 / 3 + v_s**2 / 2)
    assert upper_bound(mean, [(v_t, 3), (v_s, 2)], 0.05) == pytest.approx(
        mean + sps.t.ppf(0.95, df) * np.sqrt(1.5 * v_t)
    )
    assert np.isnan(upper_bound(0.1, [(math.nan, 0)], 0.05))


def test_starts_that_differ_as_a_whole_widen_the_bound() -> None:
    """Candidate starts whose noise differs as a whole (0.6, 1, 1.4 times the served engine's): the turns
    cannot see it, the jackknife over the candidate's starts does."""
    same = pairs(*engines(shift=0.0))
    varied = pairs(*engines(shift=0.0, cand_scales=(0.6, 1.0, 1.4)))
    (_, n_s), (v_same, n_c) = start_variances(*same)
    _, (v_varied, _) = start_variances(*varied)
    assert (n_s, n_c) == (3, 3) and v_varied > 10 * v_same
    assert excess_test(*varied, 0.005, 0.05).upper - excess_test(*varied, 0.005, 0.05).excess > 2 * (
        excess_test(*same, 0.005, 0.05).upper - excess_test(*same, 0.005, 0.05).excess
    )


# ---------------------------------------------------------------- defect 2: a rearranged tail


def rearranged_tail(head_mass: float, positions: int = 24) -> tuple[np.ndarray, np.ndarray]:
    """The same top-64 (ids and probabilities) in both; the candidate moves the tail of ``1 - head_mass``
    onto the tokens the served recipe gives almost nothing."""
    rng = np.random.default_rng(7)
    s, c = np.zeros((positions, 1536)), np.zeros((positions, 1536))
    tail_ids = np.arange(K, 1536)
    half = len(tail_ids) // 2
    for i in range(positions):
        head = rng.dirichlet(np.ones(K)) * 0.02 + (head_mass - 0.02) / K
        s[i, :K] = c[i, :K] = head
        tail = 1.0 - head_mass
        hi, lo = tail * (1 - 1e-5) / half, tail * 1e-5 / (len(tail_ids) - half)
        s[i, tail_ids[:half]], s[i, tail_ids[half:]] = hi, lo
        c[i, tail_ids[:half]], c[i, tail_ids[half:]] = lo, hi
    return np.log(s), np.log(c)


@pytest.mark.parametrize("head_mass", [0.92, 0.95, 0.97])
def test_identical_top_64_with_a_rearranged_tail_at_092_to_097_is_refused(head_mass: float) -> None:
    """The audit: captured mass 0.92-0.97 and a full KL of 0.58-1.47 nats passed the old floors (0.5, 0.9)."""
    served, cand = rearranged_tail(head_mass)
    assert klmod.full_kl(served, cand).mean() > 0.3  # nats, all of it in the tail
    a, b = top_k(served, turns=1), top_k(cand, turns=1)
    candidate = summarize_pairs([compare(a, b, "A vs B")], 0.5)
    assert candidate["kl"]["mean"] == 0.0 and candidate["captured_mass_mean"] == pytest.approx(head_mass, abs=1e-3)
    old = FidelityRule(tolerance=0.02, min_captured_mass=0.5, min_captured_mass_mean=0.9)
    assert apply_rule(old, candidate)[0] == "passed"  # the hole
    word, why = apply_rule(FidelityRule(tolerance=0.02), candidate)
    assert word == "invalid" and why.startswith("captured mass: "), why
    assert "≥ 0.9 of the served mass at every position and ≥ 0.99 on average" in rule_line(FidelityRule(tolerance=1))


def test_a_margin_with_fewer_than_3_starts_per_arm_is_refused_at_registration(tmp_path: Path) -> None:
    c = make_campaign(tmp_path / "c")
    make_workload(c.root / "w.jsonl", turns=2)
    p = c.root / "f.toml"
    p.write_text(DESIGN.format(starts=2))
    with pytest.raises(DesignError) as info:
        register(c, p)
    assert str(info.value) == (
        f"{p}: starts_per_arm: the fidelity rule's margin needs at least 3 starts per arm (blocks × starts_per_arm), "
        "got 2: 3 give 3 noise-floor pairs and 9 candidate pairs"
    )
    p.write_text(DESIGN.format(starts=2).replace("margin = 0.005", "margin = 0.005\nalpha = 0.6"))
    with pytest.raises(DesignError, match=r"rule.alpha: Input should be less than or equal to 0.5"):
        register(c, p)


DESIGN = """\
name = "f"
kind = "fidelity"
blocks = 1
starts_per_arm = {starts}
workload = "w.jsonl"

[arms.served]
recipe = "served"

[arms.candidate]
recipe = "served"
parts = ["threads1"]

[rule]
kind = "fidelity"
tolerance = 0.02
margin = 0.005
"""


def test_a_design_registered_before_the_margin_loads_with_its_own_rule() -> None:
    """A stored fidelity rule from before ``margin``/``alpha`` (and with the old floors spelled out, as every
    stored design spells its fields) keeps its meaning: no excess test, its own captured-mass floors."""
    old = {
        "kind": "fidelity",
        "tolerance": 0.02,
        "threshold": 0.5,
        "max_positions_above": 1,
        "min_captured_mass": 0.5,
        "min_captured_mass_mean": 0.9,
    }
    rule = FidelityRule.model_validate(old)
    assert (rule.margin, rule.min_captured_mass, rule.min_captured_mass_mean) == (None, 0.5, 0.9)
    served, cand = engines(shift=0.06)
    assert verdict(rule, served, cand)[1].startswith("mean KL ")  # the reason it was registered with
    assert rule.model_dump(exclude={"margin", "alpha"}) == old


def test_a_very_uneven_per_turn_excess_is_flagged() -> None:
    """One turn carries nearly all of the candidate's change: the bound is mean-based, so it says so."""
    served, cand = engines(shift=0.0)
    floor, across = pairs(served, cand)
    assert excess_test(floor, across, 0.005, 0.05).uneven() is None
    rng = np.random.default_rng(2)
    p = TURNS * PER_TURN
    base = rng.normal(0, 5.0, (p, VOCAB))
    change = np.zeros((p, VOCAB))
    change[:PER_TURN] = rng.normal(0, 0.5, (PER_TURN, VOCAB))  # the first turn only
    served = [top_k(normalise(base + 0.12 * rng.normal(0, 1, (p, VOCAB)))) for _ in range(3)]
    cand = [top_k(normalise(base + change + 0.12 * rng.normal(0, 1, (p, VOCAB)))) for _ in range(3)]
    e = excess_test(*pairs(served, cand), 0.005, 0.05)
    warning = e.uneven()
    assert e.skew > 2.5 and warning is not None and warning.startswith("the per-turn excess is very uneven (skewness ")
