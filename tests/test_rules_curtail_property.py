"""Curtailment never changes a verdict: whenever ``curtailed`` fixes a word before the last block,
every completion of the remaining blocks gives that word (#13, must show).

For every rule and side (all_blocks_better, sign, permutation better/worse/two-sided, harm by
permutation and by sign), alpha 0.05 and 0.2, with and without min_effect, and every n <= 8:
every sign pattern (+, -, and 0 for short prefixes) of the done blocks, under magnitude families
(real, whole numbers with ties, huge near 1e300, tiny near 1e-300, mixed), against completions that
are enumerated from a grid for one or two remaining blocks and sampled beyond — the extremes that
attain the p bounds (huge values of distinct sizes, either sign), zeros, ties with done values,
and random values. The word H1's runner prints (decide on a completion of ties) is checked too.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator, Sequence

import pytest

from frankenstein.design import rules
from frankenstein.design.rules import BlockRule, parse_rule

ALPHAS = (0.05, 0.2)


def _rule_set() -> list[BlockRule]:
    out: list[BlockRule] = []
    for alpha in ALPHAS:
        for eff in (None, 0.05):
            out.append(parse_rule("all_blocks_better", alpha=alpha, min_effect=eff))
            out.append(parse_rule("sign", alpha=alpha, min_effect=eff))
            for side in ("better", "worse", "two-sided"):
                out.append(parse_rule("permutation", alpha=alpha, side=side, min_effect=eff))
            for test in ("permutation", "sign"):
                out.append(parse_rule("harm", alpha=alpha, test=test, min_effect=eff))
    return out


RULE_SET = _rule_set()
FAMILIES = ("real", "integer", "huge", "tiny", "mixed")


def _magnitudes(family: str, n: int, rng: random.Random) -> list[float]:
    if family == "real":
        return [round(rng.uniform(0.01, 0.3), rng.choice([2, 17])) for _ in range(n)]  # decimal ties included
    if family == "integer":
        return [float(rng.choice([1, 1, 2, 3])) for _ in range(n)]
    if family == "huge":
        return [rng.uniform(1, 1.7) * 1e300 for _ in range(n)]
    if family == "tiny":
        return [rng.uniform(1, 9) * 1e-300 for _ in range(n)]
    return [rng.choice([1e-300, 0.1, 0.2, 0.3, 1e300, 2.0]) for _ in range(n)]


def _done_patterns(d: int) -> Iterator[tuple[int, ...]]:
    yield from itertools.product((1, -1), repeat=d)
    if d <= 3:
        yield from (p for p in itertools.product((1, -1, 0), repeat=d) if 0 in p)


GRID = (0.0, 0.05, -3.0, 1e300, -1e300)


def _completions(done: Sequence[float], m: int, rng: random.Random) -> Iterator[list[float]]:
    if m <= 2:
        yield from (list(c) for c in itertools.product(GRID, repeat=m))
    big = [1e299 * 2.0**i for i in range(m)]
    yield big
    yield [-x for x in big]
    yield [0.0] * m
    yield [1e-299 * 2.0**i for i in range(m)]
    yield [-1e-299 * 2.0**i for i in range(m)]
    mirror = [-x for x in done] or [0.0]
    yield [mirror[i % len(mirror)] for i in range(m)]
    yield [(done or [1.0])[i % max(1, len(done))] for i in range(m)]
    for _ in range(2):
        yield [rng.choice([rng.gauss(0, 0.3), rng.choice(GRID), float(rng.randint(-3, 3))]) for _ in range(m)]


def _cases() -> Iterator[tuple[list[float], int, int]]:
    rng = random.Random(13)
    for n in range(1, 9):
        for d in range(0, n):
            for i, pattern in enumerate(_done_patterns(d)):
                families = FAMILIES if d < 5 else (FAMILIES * 2)[i % 5 : i % 5 + (3 if d == 5 else 2)]
                for j, family in enumerate(families):
                    mags = _magnitudes(family, d, rng)
                    yield [s * x for s, x in zip(pattern, mags)], n - d, j


def test_a_curtailed_verdict_is_the_verdict_of_every_completion() -> None:
    rng = random.Random(8)
    stopped = {id(r): 0 for r in RULE_SET}
    checked = 0
    for i, (done, m, family) in enumerate(_cases()):
        futures: list[list[float]] | None = None
        direction, data = (("higher", "ratio"), ("lower", "difference"))[i % 2]
        for rule in RULE_SET:
            if family and rule.test_name == "sign" and rule.min_effect is None:
                continue  # counts only: the signs decide, already checked under the first family
            g = rules.gains(done, direction)  # type: ignore[arg-type]
            early = rules.curtailed(rule, g, m, direction, data)  # type: ignore[arg-type]
            if early is None:
                continue
            stopped[id(rule)] += 1
            if futures is None:
                futures = list(_completions(done, m, rng))
            ties = rules.decide(rule, [*g, *[0.0] * m], direction, data)  # type: ignore[arg-type]
            assert ties.word == early.word, (rule, done, m)
            for future in futures:
                word = rules.decide(rule, [*g, *rules.gains(future, direction)], direction, data).word  # type: ignore[arg-type]
                checked += 1
                assert word == early.word, (rule, direction, data, done, future, early)
    assert checked > 50_000
    assert all(v > 0 for v in stopped.values()), [r for r in RULE_SET if stopped[id(r)] == 0]


def test_can_change_is_false_only_where_curtailed_fixes_a_word() -> None:
    for done, m, _ in itertools.islice(_cases(), 0, None, 7):
        for rule in RULE_SET:
            assert rules.can_change(rule, done, m) == (rules.curtailed(rule, done, m) is None)


@pytest.mark.parametrize("n", [8, 10])
def test_all_blocks_better_confirms_at_the_end_never_early(n: int) -> None:
    rule = parse_rule("all_blocks_better")
    for d in range(n):  # gains: +0.1 = the candidate better in every block so far
        assert rules.can_change(rule, [0.1] * d, n - d) is True
    assert rules.can_change(rule, [0.1, -0.1], n - 2) is False
    assert rules.decide(rule, [0.1] * n, "higher").word == "confirmed"
    assert math.isclose(float(rules.decide(rule, [0.1] * n, "higher").p or 0), 2.0**-n)
