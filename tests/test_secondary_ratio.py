"""A secondary metric both arms have but that is not above zero (llama.cpp's ``post_ms`` can be a few ms
negative) is reported per arm with that reason, not as a metric "only one arm has"."""

from __future__ import annotations

from frankenstein.design.kinds.speed import _secondary


def test_non_positive_values_in_both_arms_say_why_there_is_no_ratio() -> None:
    got = _secondary({0: {"served": -1.5, "candidate": -0.5}, 1: {"served": -2.5, "candidate": 0.5}})
    assert got["geomean_ratio"] is None
    assert got["per_arm"] == {"served": -2.0, "candidate": 0.0}
    assert got["no_ratio"] == "a ratio needs values above zero in both arms"


def test_a_metric_of_one_arm_still_says_only_one_arm_has_it() -> None:
    got = _secondary({0: {"candidate": 0.25}, 1: {"candidate": 0.75}})
    assert got["per_arm"] == {"candidate": 0.5} and got["no_ratio"] == "only one arm has it"


def test_positive_pairs_give_a_ratio_and_skip_the_non_positive_block() -> None:
    got = _secondary({0: {"served": 2.0, "candidate": 1.0}, 1: {"served": -1.0, "candidate": 1.0}})
    assert got["blocks"] == 1 and abs(got["geomean_ratio"] - 0.5) < 1e-12 and "no_ratio" not in got
